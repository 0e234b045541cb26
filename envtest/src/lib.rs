#![deny(missing_docs)]
//! A real Kubernetes API server for a `#[tokio::test]`: what controller-runtime's envtest
//! gives Go operators, for operators written with kube-rs (and kube-fsm).
//!
//! [`TestCluster::start`] starts `etcd` and `kube-apiserver` on free loopback ports, with
//! fresh certificates and an admin token, in a temporary directory; dropping the
//! [`TestCluster`] stops both and removes the directory. By default no kubelet,
//! controller-manager or scheduler runs: objects are stored and validated, CRDs are served,
//! nothing else acts on them (no garbage collection, no namespace finalisation, no pods
//! running), and it starts in about 3 s.
//!
//! For workloads, [`TestCluster::builder`] adds the control plane: `.controllers()` runs
//! kube-controller-manager (garbage collection, namespaces, Deployments, ReplicaSets,
//! StatefulSets, Jobs, EndpointSlices …) and kube-scheduler; `.nodes(n)` also runs kwok with
//! `n` simulated nodes, on which scheduled pods become Running and Ready and Job pods
//! complete. [`TestCluster::remove_node`] takes a node away; [`pods`] makes a pod fail, NotReady
//! or Ready again through kwok's stages; [`wait`] waits for a Job, a Deployment, a StatefulSet
//! or any state of an object. The programs come from the same
//! place as the API server (below); kube-fsm's `scripts/envtest start --version current
//! --control-plane` builds them into its cache.
//!
//! Where the API server comes from, in this order:
//! 1. `USE_EXISTING_CLUSTER=true` (controller-runtime's variable) or
//!    `KUBE_FSM_USE_EXISTING_CLUSTER=1`: the cluster of the user's kubeconfig.
//! 2. `KUBEBUILDER_ASSETS` (setup-envtest's convention): a directory holding `etcd` and
//!    `kube-apiserver`.
//! 3. The kube-fsm cache, `$KUBE_FSM_CACHE/bin` (default `~/.cache/kube-fsm/bin`): the newest
//!    `kube-apiserver-X.Y.Z` there with the newest `etcd-X.Y.Z` there; else an unversioned
//!    `kube-apiserver` there with the `etcd` on `PATH`.
//!
//! Without any of them, [`TestCluster::start`] skips the test loudly (or fails it when
//! `KUBE_FSM_REQUIRE_CLUSTER=1`, as CI should set), and [`TestCluster::try_start`] returns
//! [`Error::NoServer`].
//!
//! ```no_run
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kube::api::{Api, ObjectMeta, PostParams};
//! use kube_fsm_envtest::TestCluster;
//!
//! #[tokio::test]
//! async fn stores_a_config_map() {
//!     let Some(cluster) = TestCluster::start("stores_a_config_map").await else {
//!         return; // skipped, and said so on stderr
//!     };
//!     let ns = cluster.namespace("cm").await.unwrap();
//!     let api: Api<ConfigMap> = Api::namespaced(cluster.client(), &ns);
//!     let map = ConfigMap {
//!         metadata: ObjectMeta { name: Some("settings".into()), ..ObjectMeta::default() },
//!         ..ConfigMap::default()
//!     };
//!     api.create(&PostParams::default(), &map).await.unwrap();
//! } // the cluster stops here
//! # fn main() {}
//! ```

mod control_plane;
mod credentials;
mod error;
mod launch;
pub mod nodes;
pub mod pods;
mod process;
mod source;
pub mod wait;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};

pub use error::Error;
pub use source::Source;

use process::Servers;

/// How a [`TestCluster`] is started: the bare API server ([`Builder::default`]), or with the
/// control plane. From [`TestCluster::builder`].
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct Builder {
    controllers: bool,
    nodes: u32,
    assets: Option<PathBuf>,
}

impl Builder {
    /// Also run kube-controller-manager (every default controller: garbage collection,
    /// namespaces, Deployments, ReplicaSets, StatefulSets, Jobs, EndpointSlices …) and
    /// kube-scheduler.
    pub fn controllers(mut self) -> Self {
        self.controllers = true;
        self
    }

    /// Also run kwok with `n` simulated nodes (`kwok-node-0` …), Ready before the cluster is
    /// returned: pods scheduled onto them become Running and Ready, Job pods complete,
    /// deleted pods go. Implies [`Builder::controllers`].
    pub fn nodes(mut self, n: u32) -> Self {
        self.controllers = true;
        self.nodes = n;
        self
    }

    /// Takes the binaries from the directory `dir` (setup-envtest's layout, plus
    /// `kube-controller-manager`, `kube-scheduler`, `kwok` and `kwok.stages.yaml` for the
    /// control plane), whatever `KUBEBUILDER_ASSETS` and the cache say — as controller-runtime's
    /// `BinaryAssetsDirectory`. `USE_EXISTING_CLUSTER` still wins.
    pub fn assets(mut self, dir: impl Into<PathBuf>) -> Self {
        self.assets = Some(dir.into());
        self
    }

    /// For the test named `test`, as [`TestCluster::start`] (skips loudly when no API server is
    /// configured).
    ///
    /// # Panics
    /// As [`TestCluster::start`].
    pub async fn start(self, test: &str) -> Option<TestCluster> {
        match self.try_start().await {
            Ok(cluster) => Some(cluster),
            Err(Error::NoServer) if !required() => {
                // On the process's stderr itself: libtest captures `eprintln!` of a passing
                // test, so that line would not show.
                use std::io::Write;
                let _ = writeln!(
                    std::io::stderr(),
                    "\n*** SKIPPED {test}: {}\n",
                    Error::NoServer
                );
                None
            }
            Err(Error::NoServer) => {
                panic!(
                    "{test}: KUBE_FSM_REQUIRE_CLUSTER=1 forbids skipping. {}",
                    Error::NoServer
                )
            }
            Err(err) => panic!("{test}: {err}"),
        }
    }

    /// As [`TestCluster::try_start`], with the control plane asked for (a user's own cluster
    /// is taken as it is: it has its own).
    ///
    /// # Errors
    /// As [`TestCluster::try_start`]; [`Error::ControlPlane`] when a program of the control
    /// plane is missing where the API server was found; [`Error::Start`] when one exits or the
    /// nodes are not Ready within 60 s.
    pub async fn try_start(self) -> Result<TestCluster, Error> {
        let found = source::resolve(|name| match (name, &self.assets) {
            ("KUBEBUILDER_ASSETS", Some(dir)) => Some(dir.clone().into_os_string()),
            _ => std::env::var_os(name),
        })?;
        let Some(binaries) = found.binaries else {
            return TestCluster::existing(found.source).await;
        };
        let plane = match (&found.source, self.controllers) {
            (Source::Binaries { dir, .. }, true) => {
                Some(control_plane::ControlPlaneBinaries::in_dir(dir)?)
            }
            _ => None,
        };
        let launched =
            launch::launch(&binaries, plane.as_ref().map(|plane| (plane, self.nodes))).await?;
        Ok(TestCluster {
            client: launched.client,
            kubeconfig: launched.kubeconfig,
            source: found.source,
            servers: Some(launched.servers),
        })
    }
}

/// A Kubernetes API server for a test: started for it (stopped when dropped), or the user's
/// own cluster.
pub struct TestCluster {
    client: Client,
    kubeconfig: PathBuf,
    source: Source,
    /// The started servers and their directory; `None` for [`Source::Existing`].
    servers: Option<Servers>,
}

impl std::fmt::Debug for TestCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCluster")
            .field("source", &self.source)
            .field("kubeconfig", &self.kubeconfig)
            .field("servers", &self.servers)
            .finish_non_exhaustive()
    }
}

/// Whether this run must not skip (`KUBE_FSM_REQUIRE_CLUSTER=1`, as CI sets it).
fn required() -> bool {
    std::env::var("KUBE_FSM_REQUIRE_CLUSTER").is_ok_and(|v| v == "1")
}

impl TestCluster {
    /// For the test named `test`: the cluster ([`TestCluster::try_start`]), or `None` after a
    /// loud `*** SKIPPED <test>: ...` line on stderr saying how to provide one, when none is
    /// configured.
    ///
    /// # Panics
    /// When none is configured and `KUBE_FSM_REQUIRE_CLUSTER=1` (CI: never skip), and when one
    /// is configured but cannot be started or reached.
    pub async fn start(test: &str) -> Option<TestCluster> {
        Builder::default().start(test).await
    }

    /// How to start one with the control plane: `TestCluster::builder().nodes(3).start(test)`.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// The cluster the environment names (see the crate documentation for the order): the
    /// user's, checked with a version request; or `etcd` and `kube-apiserver` started, and
    /// waited for (at most 60 s) until `/readyz` answers `ok` and the `default` namespace
    /// exists.
    ///
    /// # Errors
    /// [`Error::NoServer`] when none is configured; others when it cannot be reached or
    /// started (with the end of the failing server's log).
    pub async fn try_start() -> Result<TestCluster, Error> {
        Builder::default().try_start().await
    }

    /// Adds a simulated node named `name` (kwok manages it; started with
    /// [`Builder::nodes`]) and waits (at most 30 s) until it is Ready.
    ///
    /// # Errors
    /// When the API server refuses it, or it is not Ready in time.
    pub async fn add_node(&self, name: &str) -> Result<(), Error> {
        nodes::add(&self.client, name).await
    }

    /// Drains the node `name` and takes it away, as `kubectl drain` then a machine's removal
    /// do: it is cordoned, each of its pods evicted (the Eviction API: PodDisruptionBudgets
    /// are respected, retried until they allow it, at most 60 s), then its Node object is
    /// deleted. Their owners make new pods on the nodes left (a few seconds).
    ///
    /// # Errors
    /// When the API server refuses a request, or an eviction is still refused after 60 s.
    pub async fn drain_node(&self, name: &str) -> Result<(), Error> {
        nodes::drain(&self.client, name).await
    }

    /// Takes the node `name` away without draining it, as a machine that is suddenly gone:
    /// its Node object is deleted; the pods bound to it are collected by the controllers' pod
    /// garbage collector (about a minute later: its quarantine), and their owners make new ones
    /// on the nodes left.
    ///
    /// # Errors
    /// When the API server refuses the deletion.
    pub async fn remove_node(&self, name: &str) -> Result<(), Error> {
        nodes::remove(&self.client, name).await
    }

    /// The user's cluster, if it answers.
    async fn existing(source: Source) -> Result<TestCluster, Error> {
        let kubeconfig = match &source {
            Source::Existing {
                kubeconfig: Some(path),
            } => path.clone(),
            _ => PathBuf::new(),
        };
        let failed = |reason: String| Error::Existing {
            kubeconfig: if kubeconfig.as_os_str().is_empty() {
                "no kubeconfig file: an in-cluster configuration, if any".into()
            } else {
                kubeconfig.display().to_string()
            },
            reason,
        };
        let client = Client::try_default()
            .await
            .map_err(|e| failed(format!("no client can be made from it: {e}")))?;
        client
            .apiserver_version()
            .await
            .map_err(|e| failed(format!("its API server does not answer: {e}")))?;
        Ok(TestCluster {
            client,
            kubeconfig,
            source,
            servers: None,
        })
    }

    /// A client for the cluster, acting as an administrator (group `system:masters`).
    #[must_use]
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// A kubeconfig file for the cluster, for `kubectl` or a child process (e.g. the operator
    /// under test run as a binary, with `KUBECONFIG` set to it). For [`Source::Existing`], the
    /// user's own file (empty when there is none).
    #[must_use]
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Where the API server comes from.
    #[must_use]
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// Installs `crd`: creates it, or replaces the one of that name (server-side apply, with
    /// force), then waits (at most 30 s) until it is Established, i.e. served.
    ///
    /// # Errors
    /// When the API server refuses it, or it is not Established in time.
    pub async fn install_crd(&self, mut crd: CustomResourceDefinition) -> Result<(), Error> {
        let name = crd.metadata.name.clone().unwrap_or_default();
        // What a read-back CRD carries that an apply must not.
        crd.metadata.managed_fields = None;
        crd.metadata.resource_version = None;
        crd.status = None;
        let api: Api<CustomResourceDefinition> = Api::all(self.client());
        let params = PatchParams::apply("kube-fsm-envtest").force();
        api.patch(&name, &params, &Patch::Apply(&crd))
            .await
            .map_err(|source| Error::Api {
                action: format!("apply the CustomResourceDefinition {name:?}"),
                source,
            })?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let conditions = match api.get_opt(&name).await {
                Ok(found) => found
                    .and_then(|crd| crd.status?.conditions)
                    .unwrap_or_default(),
                Err(_) => Vec::new(),
            };
            if conditions
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let conditions = conditions
                    .iter()
                    .map(|c| {
                        format!(
                            "{}={} ({}: {})",
                            c.type_,
                            c.status,
                            c.reason.as_deref().unwrap_or(""),
                            c.message.as_deref().unwrap_or("")
                        )
                    })
                    .collect::<Vec<_>>();
                let conditions = if conditions.is_empty() {
                    "none".to_owned()
                } else {
                    conditions.join("; ")
                };
                return Err(Error::NotEstablished { name, conditions });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Creates a fresh namespace named `{prefix}-{6 random lowercase letters and digits}` and
    /// returns its name. (Deleting a namespace does not finish without a controller-manager;
    /// fresh ones keep tests apart instead.)
    ///
    /// # Errors
    /// When the API server refuses it (e.g. `prefix` is not a valid name start).
    pub async fn namespace(&self, prefix: &str) -> Result<String, Error> {
        const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
        let suffix: String = (0..6)
            .map(|_| char::from(CHARS[fastrand::usize(..CHARS.len())]))
            .collect();
        let name = format!("{prefix}-{suffix}");
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        Api::<Namespace>::all(self.client())
            .create(&PostParams::default(), &namespace)
            .await
            .map_err(|source| Error::Api {
                action: format!("create the namespace {name:?}"),
                source,
            })?;
        Ok(name)
    }
}

impl Drop for TestCluster {
    /// Stops the servers it started (kube-apiserver first, then etcd), waits for them to exit
    /// and removes its temporary directory. For [`Source::Existing`], nothing.
    fn drop(&mut self) {
        drop(self.servers.take());
    }
}
