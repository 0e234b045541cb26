//! Starting etcd and kube-apiserver on free loopback ports in a fresh temporary directory, and
//! waiting until the API server is ready.

use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, Client};

use crate::Error;
use crate::control_plane::{self, ControlPlaneBinaries};
use crate::credentials::{Credentials, Files};
use crate::process::Servers;
use crate::source::Binaries;

/// How long the API server has to become ready.
const READY_WITHIN: Duration = Duration::from_secs(60);

/// A started cluster: its servers (and directory), its kubeconfig and a client.
pub(crate) struct Launched {
    pub(crate) servers: Servers,
    pub(crate) kubeconfig: PathBuf,
    pub(crate) client: Client,
}

/// Starts `binaries` and waits until the API server is ready. On failure, whatever was started
/// is stopped; the directory is removed, but for a server that failed, whose log is kept.
///
/// With `plane`, the control plane too ([`control_plane::start`]), with that many nodes.
pub(crate) async fn launch(
    binaries: &Binaries,
    plane: Option<(&ControlPlaneBinaries, u32)>,
) -> Result<Launched, Error> {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let name = format!(
        "kube-fsm-envtest-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let mut servers = Servers::new(std::env::temp_dir().join(name))?;
    let dir = servers.dir().to_owned();
    let [etcd, peer, secure] = free_ports()?;
    let files = Credentials::generate()?.write(&dir, secure)?;

    let etcd_url = format!("http://127.0.0.1:{etcd}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    let data = dir.join("etcd-data").to_string_lossy().into_owned();
    let initial = format!("envtest={peer_url}");
    let etcd_args: [&str; 14] = [
        "--name",
        "envtest",
        "--data-dir",
        &data,
        "--listen-client-urls",
        &etcd_url,
        "--advertise-client-urls",
        &etcd_url,
        "--listen-peer-urls",
        &peer_url,
        "--initial-advertise-peer-urls",
        &peer_url,
        "--initial-cluster",
        &initial,
    ];
    servers.spawn("etcd", &binaries.etcd, &etcd_args.map(str::to_owned))?;
    servers.spawn(
        "kube-apiserver",
        &binaries.apiserver,
        &apiserver_args(&etcd_url, secure, &files),
    )?;

    let client = client(&files.kubeconfig).await?;
    let started = match wait_ready(&mut servers, &client).await {
        Ok(()) => match plane {
            Some((plane, nodes)) => {
                control_plane::start(&mut servers, plane, &files, &client, nodes).await
            }
            None => Ok(()),
        },
        Err(failed) => Err(failed),
    };
    if let Err(failed) = started {
        // The error names a log in it.
        servers.keep();
        return Err(failed);
    }
    Ok(Launched {
        servers,
        kubeconfig: files.kubeconfig,
        client,
    })
}

/// kube-apiserver's flags: the same on 1.20 and on current releases (no `--insecure-port`,
/// which later releases removed; the service-account issuer and keys, which they require).
/// No ServiceAccount admission: no controller-manager makes the default service accounts. No
/// endpoint reconciler: it refuses a loopback address for the `kubernetes` Endpoints.
fn apiserver_args(etcd_url: &str, port: u16, files: &Files) -> Vec<String> {
    let path = |p: &Path| p.to_string_lossy().into_owned();
    vec![
        format!("--etcd-servers={etcd_url}"),
        "--bind-address=127.0.0.1".into(),
        "--advertise-address=127.0.0.1".into(),
        format!("--secure-port={port}"),
        format!("--tls-cert-file={}", path(&files.cert)),
        format!("--tls-private-key-file={}", path(&files.key)),
        format!("--client-ca-file={}", path(&files.ca)),
        format!("--token-auth-file={}", path(&files.tokens)),
        format!("--service-account-key-file={}", path(&files.sa_public)),
        format!("--service-account-signing-key-file={}", path(&files.sa_key)),
        "--service-account-issuer=https://kubernetes.default.svc".into(),
        "--service-cluster-ip-range=10.0.0.0/24".into(),
        "--authorization-mode=RBAC".into(),
        "--disable-admission-plugins=ServiceAccount".into(),
        "--enable-admission-plugins=ValidatingAdmissionWebhook,MutatingAdmissionWebhook".into(),
        "--endpoint-reconciler-type=none".into(),
    ]
}

/// `N` distinct free ports on 127.0.0.1 (each bound, to be told one, then released).
pub(crate) fn free_ports<const N: usize>() -> Result<[u16; N], Error> {
    let io = |source| Error::Io {
        action: "find a free port on 127.0.0.1".into(),
        source,
    };
    // All held at once, so that they differ.
    let mut listeners = Vec::with_capacity(N);
    for _ in 0..N {
        listeners.push(TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(io)?);
    }
    let mut ports = [0; N];
    for (port, listener) in ports.iter_mut().zip(&listeners) {
        *port = listener.local_addr().map_err(io)?.port();
    }
    Ok(ports)
}

/// A client from the kubeconfig file `path`, as a user's child process would read it.
pub(crate) async fn client(path: &Path) -> Result<Client, Error> {
    let failed = |reason: String| Error::Client {
        kubeconfig: path.to_owned(),
        reason,
    };
    let kubeconfig =
        kube::config::Kubeconfig::read_from(path).map_err(|e| failed(e.to_string()))?;
    let options = kube::config::KubeConfigOptions::default();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .map_err(|e| failed(e.to_string()))?;
    Client::try_from(config).map_err(|e| failed(e.to_string()))
}

/// Waits until `GET /readyz` answers `ok` and the `default` namespace exists; an error when a
/// server exits first or [`READY_WITHIN`] passes.
async fn wait_ready(servers: &mut Servers, client: &Client) -> Result<(), Error> {
    let start = Instant::now();
    loop {
        if let Some(exited) = servers.exited() {
            return Err(exited);
        }
        if ready(client).await {
            return Ok(());
        }
        if start.elapsed() > READY_WITHIN {
            let what = format!(
                "was not ready (GET /readyz answering ok, the default namespace created) \
                 within {} s",
                READY_WITHIN.as_secs()
            );
            return Err(servers.failure(what).expect("the servers were started"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn ready(client: &Client) -> bool {
    let Ok(request) = http::Request::get("/readyz").body(Vec::new()) else {
        return false;
    };
    let answer = tokio::time::timeout(Duration::from_secs(5), client.request_text(request)).await;
    if !matches!(answer, Ok(Ok(text)) if text.trim() == "ok") {
        return false;
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    matches!(namespaces.get_opt("default").await, Ok(Some(_)))
}
