//! The control plane beside a started API server: kube-controller-manager (garbage collection,
//! namespaces, Deployments, ReplicaSets, StatefulSets, Jobs, EndpointSlices …), kube-scheduler
//! and kwok, whose simulated nodes run the pod lifecycle (pods scheduled onto them become
//! Running and Ready, Job pods complete), and the nodes themselves.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::{Api, Client};

use crate::Error;
use crate::credentials::Files;
use crate::process::Servers;

/// How long the nodes have to become Ready once kwok runs.
const READY_WITHIN: Duration = Duration::from_secs(60);

/// The three programs and kwok's stages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ControlPlaneBinaries {
    pub(crate) controller_manager: PathBuf,
    pub(crate) scheduler: PathBuf,
    pub(crate) kwok: PathBuf,
    /// kwok's Stage objects (YAML): what its nodes do to nodes and pods.
    pub(crate) stages: PathBuf,
}

impl ControlPlaneBinaries {
    /// In `dir`: the names `scripts/envtest assets` links (`kube-controller-manager`,
    /// `kube-scheduler`, `kwok`, `kwok.stages.yaml`), else the newest versioned ones of the
    /// kube-fsm cache (`kube-controller-manager-X.Y.Z`, …, `kwok-X.Y.Z.stages.yaml`).
    ///
    /// # Errors
    /// [`Error::ControlPlane`] naming the first one missing.
    pub(crate) fn in_dir(dir: &Path) -> Result<Self, Error> {
        let names: Vec<String> = std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default();
        let find = |plain: &'static str| -> Result<PathBuf, Error> {
            if dir.join(plain).is_file() {
                return Ok(dir.join(plain));
            }
            crate::source::newest(names.iter().map(String::as_str), &format!("{plain}-"))
                .map(|name| dir.join(name))
                .ok_or_else(|| Error::ControlPlane {
                    dir: dir.to_owned(),
                    binary: plain,
                })
        };
        let kwok = find("kwok")?;
        let stages = if dir.join("kwok.stages.yaml").is_file() {
            dir.join("kwok.stages.yaml")
        } else {
            let mut stages = kwok.clone().into_os_string();
            stages.push(".stages.yaml");
            PathBuf::from(stages)
        };
        if !stages.is_file() {
            return Err(Error::ControlPlane {
                dir: dir.to_owned(),
                binary: "kwok.stages.yaml",
            });
        }
        Ok(Self {
            controller_manager: find("kube-controller-manager")?,
            scheduler: find("kube-scheduler")?,
            kwok,
            stages,
        })
    }
}

/// Starts the control plane in `servers` against the API server of `files`, with `nodes`
/// simulated nodes (none: the controllers and the scheduler only), and waits until the nodes
/// are Ready.
pub(crate) async fn start(
    servers: &mut Servers,
    binaries: &ControlPlaneBinaries,
    files: &Files,
    client: &Client,
    nodes: u32,
) -> Result<(), Error> {
    let path = |p: &Path| p.to_string_lossy().into_owned();
    let kubeconfig = path(&files.kubeconfig);
    let [controllers, scheduler, kwok] = crate::launch::free_ports()?;
    let own = |port: u16| {
        vec![
            format!("--kubeconfig={kubeconfig}"),
            format!("--authentication-kubeconfig={kubeconfig}"),
            format!("--authorization-kubeconfig={kubeconfig}"),
            "--bind-address=127.0.0.1".to_owned(),
            format!("--secure-port={port}"),
            "--leader-elect=false".to_owned(),
            // Their clients' default limits (20 requests/s for the controllers, 50 for the
            // scheduler) made a thousand StatefulSets take minutes: they, not the operator
            // under test, set the pace (see BENCHMARKS.md, "Real workloads").
            "--kube-api-qps=500".to_owned(),
            "--kube-api-burst=1000".to_owned(),
        ]
    };
    let mut args = own(controllers);
    args.extend([
        format!("--service-account-private-key-file={}", path(&files.sa_key)),
        format!("--root-ca-file={}", path(&files.ca)),
        "--use-service-account-credentials=false".to_owned(),
        "--controllers=*".to_owned(),
        // A node that stops reporting is NotReady after 20 s (default 50 s).
        "--node-monitor-grace-period=20s".to_owned(),
        "--concurrent-statefulset-syncs=20".to_owned(),
        "--concurrent-service-endpoint-syncs=20".to_owned(),
    ]);
    servers.spawn(
        "kube-controller-manager",
        &binaries.controller_manager,
        &args,
    )?;
    servers.spawn("kube-scheduler", &binaries.scheduler, &own(scheduler))?;
    if nodes == 0 {
        return Ok(());
    }
    // kwok's stages and kube-fsm-envtest's (crate::pods), in one file beside the kubeconfig.
    let stages = files.kubeconfig.with_file_name("kwok.stages.yaml");
    let kwok_stages = std::fs::read_to_string(&binaries.stages).map_err(|source| Error::Io {
        action: format!("read kwok's stages {}", binaries.stages.display()),
        source,
    })?;
    std::fs::write(&stages, crate::pods::with_stages(&kwok_stages)).map_err(|source| {
        Error::Io {
            action: format!("write kwok's stages to {}", stages.display()),
            source,
        }
    })?;
    servers.spawn(
        "kwok",
        &binaries.kwok,
        &[
            format!("--config={}", path(&stages)),
            format!("--kubeconfig={kubeconfig}"),
            "--manage-all-nodes=false".to_owned(),
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake".to_owned(),
            "--node-ip=127.0.0.1".to_owned(),
            format!("--node-port={kwok}"),
            format!("--server-address=127.0.0.1:{kwok}"),
            "--node-lease-duration-seconds=40".to_owned(),
        ],
    )?;
    let api: Api<Node> = Api::all(client.clone());
    for i in 0..nodes {
        crate::nodes::create(&api, &format!("kwok-node-{i}")).await?;
    }
    wait_ready(servers, &api, nodes).await
}

/// Waits until `nodes` simulated nodes are Ready; an error when a process exits first or
/// [`READY_WITHIN`] passes.
async fn wait_ready(servers: &mut Servers, api: &Api<Node>, nodes: u32) -> Result<(), Error> {
    let start = Instant::now();
    loop {
        if let Some(exited) = servers.exited() {
            return Err(exited);
        }
        if crate::nodes::ready_count(api).await >= nodes as usize {
            return Ok(());
        }
        if start.elapsed() > READY_WITHIN {
            let what = format!(
                "did not make {nodes} simulated nodes Ready within {} s",
                READY_WITHIN.as_secs()
            );
            return Err(servers.failure(what).expect("kwok was started"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_with(tag: &str, files: &[&str]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "kube-fsm-envtest-plane-{}-{tag}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for file in files {
            std::fs::write(dir.join(file), "").unwrap();
        }
        dir
    }

    #[test]
    fn the_control_plane_is_found_by_plain_or_newest_versioned_names_or_named_missing() {
        let cache = dir_with(
            "cache",
            &[
                "kube-controller-manager-1.37.2",
                "kube-controller-manager-1.37.2.recipe",
                "kube-scheduler-1.37.2",
                "kwok-0.8.0",
                "kwok-0.7.0",
                "kwok-0.8.0.stages.yaml",
            ],
        );
        let found = ControlPlaneBinaries::in_dir(&cache).expect("found");
        assert_eq!(found.kwok, cache.join("kwok-0.8.0"));
        assert_eq!(found.stages, cache.join("kwok-0.8.0.stages.yaml"));
        assert_eq!(
            found.controller_manager,
            cache.join("kube-controller-manager-1.37.2")
        );
        let assets = dir_with(
            "assets",
            &["kube-controller-manager", "kwok", "kwok.stages.yaml"],
        );
        let missing = ControlPlaneBinaries::in_dir(&assets).expect_err("no scheduler");
        assert!(
            matches!(
                missing,
                Error::ControlPlane {
                    binary: "kube-scheduler",
                    ..
                }
            ),
            "{missing}"
        );
        for dir in [cache, assets] {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
