//! The one error type: each message says what went wrong and what to do about it.

use std::path::PathBuf;

/// Why a test cluster could not be had, started or used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No API server was configured in any of the three ways.
    #[error(
        "There is no Kubernetes API server to test against. Provide one in any of three ways: \
         set USE_EXISTING_CLUSTER=true to use the cluster of your kubeconfig; or set \
         KUBEBUILDER_ASSETS to a directory holding `etcd` and `kube-apiserver` (setup-envtest's \
         layout: `export KUBEBUILDER_ASSETS=$(setup-envtest use -p path)`, or in kube-fsm's \
         repository `export KUBEBUILDER_ASSETS=$(scripts/envtest assets)`); or put \
         `kube-apiserver-X.Y.Z` and `etcd-X.Y.Z` in the kube-fsm cache, $KUBE_FSM_CACHE/bin \
         (default ~/.cache/kube-fsm/bin)."
    )]
    NoServer,
    /// `USE_EXISTING_CLUSTER` asked for the kubeconfig's cluster, which does not answer.
    #[error(
        "USE_EXISTING_CLUSTER asks for the cluster of your kubeconfig ({kubeconfig}), but {reason}. \
         Start that cluster or point KUBECONFIG at one that runs; or unset USE_EXISTING_CLUSTER \
         and KUBE_FSM_USE_EXISTING_CLUSTER to have a local API server started instead."
    )]
    Existing {
        /// The kubeconfig file, or a description of where the configuration came from.
        kubeconfig: String,
        /// What failed.
        reason: String,
    },
    /// `KUBEBUILDER_ASSETS` names a directory that lacks a binary.
    #[error(
        "KUBEBUILDER_ASSETS names {}, which holds no `{binary}`. Point it at a directory \
         holding both `etcd` and `kube-apiserver` (e.g. `setup-envtest use -p path`), or unset it.",
        dir.display()
    )]
    Assets {
        /// The directory `KUBEBUILDER_ASSETS` names.
        dir: PathBuf,
        /// The binary missing there.
        binary: &'static str,
    },
    /// The control plane was asked for ([`crate::Builder::controllers`], [`crate::Builder::nodes`])
    /// and a program of it is missing.
    #[error(
        "A control plane was asked for, but {} holds no `{binary}` (nor a `{binary}-X.Y.Z`). \
         Build them into the kube-fsm cache with kube-fsm's `scripts/envtest start --version \
         current --control-plane` (kube-controller-manager, kube-scheduler, kwok and its \
         stages), or link them into KUBEBUILDER_ASSETS with `scripts/envtest assets --version \
         current`; or use a real cluster (USE_EXISTING_CLUSTER=true).",
        dir.display()
    )]
    ControlPlane {
        /// The directory the API server came from.
        dir: PathBuf,
        /// The program (or file) missing there.
        binary: &'static str,
    },
    /// A file or directory of the test cluster could not be made.
    #[error(
        "Cannot {action}: {source}. Check that the temporary directory is writable and has \
         space (set TMPDIR to use another)."
    )]
    Io {
        /// What was being done.
        action: String,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// Generating the certificates or keys failed.
    #[error(
        "Cannot generate the test cluster's certificates: {0}. This is a bug in \
         kube-fsm-envtest; please report it."
    )]
    Credentials(#[from] rcgen::Error),
    /// A binary could not be run at all.
    #[error(
        "Cannot run {}: {source}. Check that the file exists, is executable and is built for \
         this machine.",
        binary.display()
    )]
    Spawn {
        /// The binary.
        binary: PathBuf,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// No client could be made from a kubeconfig file.
    #[error(
        "Cannot make a client from the kubeconfig {}: {reason}. Check that the file and the \
         certificate-authority file it names are readable.",
        kubeconfig.display()
    )]
    Client {
        /// The kubeconfig file.
        kubeconfig: PathBuf,
        /// What failed.
        reason: String,
    },
    /// A server exited, or did not become ready in time.
    #[error(
        "{process} {what}. Its log, {}, ends with:\n{tail}\nCheck that the two binaries run on \
         this machine and belong together (a kube-apiserver with an etcd version it supports). \
         Both servers were stopped; their directory stays for you to read, remove it when done.",
        log.display()
    )]
    Start {
        /// `etcd`, `kube-apiserver`, or a process of the control plane.
        process: &'static str,
        /// What happened: it exited (with its status), or was not ready in time.
        what: String,
        /// Its log file (stdout and stderr), kept with the rest of the cluster's directory.
        log: PathBuf,
        /// The last 20 lines of the log.
        tail: String,
    },
    /// The API server refused or failed a request.
    #[error(
        "The API server could not {action}: {source}. Check the request; the API server's \
         message above says what it refuses."
    )]
    Api {
        /// What was asked.
        action: String,
        /// The client's error.
        source: kube::Error,
    },
    /// What a test waited for did not happen in time.
    #[error(
        "{what} did not happen within {} s: {state}. Check that the control plane runs \
         (TestCluster::builder().nodes(n)) and that the object's spec allows it.",
        within.as_secs()
    )]
    Timeout {
        /// What was awaited, e.g. "the Job shop/migrate completes".
        what: String,
        /// How long it was awaited.
        within: std::time::Duration,
        /// What was seen last.
        state: String,
    },
    /// A CustomResourceDefinition was stored but did not become Established.
    #[error(
        "The CustomResourceDefinition {name} was not Established within 30 s (its conditions: \
         {conditions}). Check its names and schema: the conditions say what the API server \
         objects to."
    )]
    NotEstablished {
        /// The CRD's name.
        name: String,
        /// Its status conditions, as `type=status (reason: message)`.
        conditions: String,
    },
}
