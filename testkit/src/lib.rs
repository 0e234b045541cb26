//! Test resources for kube-fsm: the reference machines of `specs/`, compiled by the macro, and
//! shared helpers for the integration tests.
#![deny(warnings, clippy::pedantic)]

pub mod admission;
pub mod audit;
pub mod browser;
pub mod canned;
pub mod cluster;
pub mod handlers;
pub mod hold;
pub mod kstatus;
pub mod lost;
pub mod metrics;
pub mod observer;
pub mod operator;
pub mod overload;
pub mod prometheus;
pub mod prometheus_server;
pub mod proxy;
pub mod service_account;
pub mod tickets;
pub mod workload;

/// The files the example `name` writes with `args --out DIR` (into a fresh temporary folder,
/// removed afterwards), by file name.
///
/// # Panics
/// When the example is not built or fails.
#[must_use]
pub fn example_output(name: &str, args: &[&str]) -> std::collections::BTreeMap<String, String> {
    let dir = std::env::temp_dir().join(cluster::fresh_name(&format!("kube-fsm-{name}")));
    let out = std::process::Command::new(example(name))
        .args(args)
        .arg("--out")
        .arg(&dir)
        .output()
        .unwrap_or_else(|e| panic!("{name} does not run: {e}"));
    assert!(
        out.status.success(),
        "{name} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let files = files(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    files
}

/// The files in `dir` and its folders, by their path relative to `dir` (`a/b.yaml`).
///
/// # Panics
/// When `dir` or one of its files cannot be read.
#[must_use]
pub fn files(dir: &std::path::Path) -> std::collections::BTreeMap<String, String> {
    let mut found = std::collections::BTreeMap::new();
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in
            std::fs::read_dir(&folder).unwrap_or_else(|e| panic!("{}: {e}", folder.display()))
        {
            let path = entry.expect("a folder entry").path();
            if path.is_dir() {
                folders.push(path);
                continue;
            }
            let name = path
                .strip_prefix(dir)
                .expect("below dir")
                .to_string_lossy()
                .into_owned();
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            found.insert(name, text);
        }
    }
    found
}

/// An example's binary (`examples/examples/NAME.rs`), built beside the running test's by
/// `cargo test` (`target/PROFILE/examples/NAME`).
///
/// # Panics
/// When it is not built.
#[must_use]
pub fn example(name: &str) -> std::path::PathBuf {
    let test = std::env::current_exe().expect("the test's path");
    let path = test
        .parent()
        .and_then(std::path::Path::parent)
        .expect("target dir")
        .join("examples")
        .join(name);
    assert!(
        path.exists(),
        "{} is not built: `cargo test -p kube-fsm-examples` builds the examples (running one \
         test file alone, run `cargo build -p kube-fsm-examples --examples` first)",
        path.display()
    );
    path
}

pub mod resources {
    //! Custom resources driven by the example specs.
    use kube::CustomResource;
    use kube_fsm::{MachineStatus, state_machine};
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};

    // The examples' machines, declared once: `Database` (`specs/database.yaml`) and
    // `RiskEngine` (`specs/riskengine.yaml`, the admission tests' second spec).
    pub use kube_fsm_examples::riskengine::{
        RiskEngine, RiskEngineActiveNext, RiskEngineDegradedNext, RiskEngineDeployingNext,
        RiskEngineHandler, RiskEnginePendingNext, RiskEnginePhase, RiskEngineSpec,
        RiskEngineStatus, RiskEngineValidatingNext,
    };
    pub use kube_fsm_examples::stand_in::{
        Database, DatabaseCondition, DatabaseDegradedEvent, DatabaseDegradedNext,
        DatabaseDegradedTarget, DatabaseEvent, DatabaseHandler, DatabasePendingEvent,
        DatabasePendingNext, DatabasePendingTarget, DatabasePhase, DatabaseProvisioningEvent,
        DatabaseProvisioningNext, DatabaseProvisioningTarget, DatabaseRunningEvent,
        DatabaseRunningNext, DatabaseRunningTarget, DatabaseSpec, DatabaseStatus,
    };

    /// A Database named `name` with version 16 and one replica, as most tests create it.
    #[must_use]
    pub fn sample(name: &str) -> Database {
        Database::new(
            name,
            DatabaseSpec {
                version: "16".into(),
                replicas: 1,
            },
        )
    }

    /// The same machine as `Database`, written inline.
    #[state_machine(
        phases(
            Pending(initial, description = "Accepted, waiting to be provisioned."),
            Provisioning(description = "Child resources are being created.", requeue_after = "10s",
                         timeout = "10m" -> Failed as ProvisioningTimedOut),
            Running(description = "Serving."),
            Degraded(description = "Serving, but not every part is healthy.", requeue_after = "30s"),
            Failed(description = "Gave up; needs a human.", terminal),
        ),
        conditions(
            PodsReady(description = "All database pods are ready."),
            ServiceAvailable(description = "The service answers."),
        ),
        transitions(
            Pending -> Provisioning on Accept,
            Provisioning -> Running when PodsReady,
            Running -> Degraded when !ServiceAvailable,
            Degraded -> Running when ServiceAvailable && PodsReady,
            [Provisioning, Running, Degraded] -> Failed on Fail,
            Failed -> Pending manual,
        ),
        finalizer = "example.com/cleanup",
        ready(phases(Running), conditions(ServiceAvailable)),
    )]
    #[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    #[kube(
        group = "fsm.example.com",
        version = "v1",
        kind = "InlineDatabase",
        namespaced,
        status = "InlineDatabaseStatus"
    )]
    pub struct InlineDatabaseSpec {}

    /// Status of [`InlineDatabase`].
    #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    pub struct InlineDatabaseStatus {
        /// The machine's fields.
        #[serde(flatten)]
        pub machine: MachineStatus<InlineDatabasePhase>,
    }

    /// A batch run, from `specs/pipeline.yaml`.
    #[state_machine(spec = "../specs/pipeline.yaml")]
    #[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    #[kube(
        group = "fsm.example.com",
        version = "v1",
        kind = "Pipeline",
        namespaced,
        status = "PipelineStatus"
    )]
    pub struct PipelineSpec {
        /// The image to run.
        pub image: String,
    }

    /// Status of [`Pipeline`].
    #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    pub struct PipelineStatus {
        /// The machine's fields.
        #[serde(flatten)]
        pub machine: MachineStatus<PipelinePhase>,
    }

    /// A machine with a self-loop and a handler-only edge, for the decision tests.
    #[state_machine(
        phases(Waiting(initial, requeue_after = "30s", timeout = "5m" -> GaveUp), Working, GaveUp(terminal), Done(terminal)),
        conditions(Ready),
        transitions(
            Waiting -> Waiting on Retry,
            Waiting -> Working when Ready,
            Waiting -> GaveUp,
            Working -> Done on Finish,
            Working -> Waiting when !Ready,
        ),
    )]
    #[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    #[kube(
        group = "fsm.example.com",
        version = "v1",
        kind = "Retrier",
        namespaced,
        status = "RetrierStatus"
    )]
    pub struct RetrierSpec {}

    /// Status of [`Retrier`].
    #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    pub struct RetrierStatus {
        /// The machine's fields.
        #[serde(flatten)]
        pub machine: MachineStatus<RetrierPhase>,
    }

    /// A machine whose only way forward is a short timeout, for the timeout test.
    #[state_machine(
        phases(Waiting(initial, timeout = "2s" -> Expired), Expired(terminal)),
        transitions(Waiting -> Expired),
    )]
    #[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    #[kube(
        group = "fsm.example.com",
        version = "v1",
        kind = "Timer",
        namespaced,
        status = "TimerStatus"
    )]
    pub struct TimerSpec {}

    /// Status of [`Timer`].
    #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    pub struct TimerStatus {
        /// The machine's fields.
        #[serde(flatten)]
        pub machine: MachineStatus<TimerPhase>,
    }

    /// Work that must finish in 3 s or fail, each handler call bounded to 1 s by the spec: for
    /// the handler deadline and a timeout reached while every handler call hangs.
    #[state_machine(
        phases(
            Working(initial, handler_timeout = "1s", timeout = "3s" -> Failed as WorkTimedOut),
            Done(terminal),
            Failed(terminal),
        ),
        transitions(Working -> Done on Finish, Working -> Failed),
    )]
    #[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    #[kube(
        group = "fsm.example.com",
        version = "v1",
        kind = "Chore",
        namespaced,
        status = "ChoreStatus"
    )]
    pub struct ChoreSpec {}

    /// Status of [`Chore`].
    #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    pub struct ChoreStatus {
        /// The machine's fields.
        #[serde(flatten)]
        pub machine: MachineStatus<ChorePhase>,
    }

    /// A machine that waits for a `Finish` (or times out after 3 s), with a finalizer: for
    /// pausing, reconcile-now and deletion while paused. Its spec's one field is there to edit
    /// (a new generation).
    #[state_machine(
        phases(Waiting(initial, timeout = "3s" -> Expired), Done(terminal), Expired(terminal)),
        transitions(Waiting -> Done on Finish, Waiting -> Expired),
        finalizer = "fsm.example.com/cleanup",
    )]
    #[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    #[kube(
        group = "fsm.example.com",
        version = "v1",
        kind = "Sleeper",
        namespaced,
        status = "SleeperStatus"
    )]
    pub struct SleeperSpec {
        /// Free text; editing it makes a new generation.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub note: Option<String>,
    }

    /// Status of [`Sleeper`].
    #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    pub struct SleeperStatus {
        /// The machine's fields.
        #[serde(flatten)]
        pub machine: MachineStatus<SleeperPhase>,
    }

    /// Provisioning that never becomes ready (its handler never reports `PodsReady`) and times
    /// out after 40 s, reconciled every 2 s: for the alerts and dashboard on a real Prometheus.
    #[state_machine(
        phases(
            Provisioning(initial, description = "Waiting for pods that never become ready.",
                         requeue_after = "2s", timeout = "40s" -> Failed as ProvisioningTimedOut),
            Running(description = "Serving."),
            Done(terminal, description = "Finished."),
            Failed(terminal, description = "Gave up."),
        ),
        conditions(PodsReady(description = "All pods are ready.")),
        transitions(
            Provisioning -> Running when PodsReady,
            Provisioning -> Failed on Fail,
            Running -> Done on Finish,
        ),
        ready(phases(Running)),
    )]
    #[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    #[kube(
        group = "fsm.example.com",
        version = "v1",
        kind = "Overdue",
        namespaced,
        status = "OverdueStatus"
    )]
    pub struct OverdueSpec {}

    /// Status of [`Overdue`].
    #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    pub struct OverdueStatus {
        /// The machine's fields.
        #[serde(flatten)]
        pub machine: MachineStatus<OverduePhase>,
    }

    /// A chain of automatic steps under `drift: revert`, for two replicas forced to overlap.
    #[state_machine(
        phases(First(initial), Second, Third, Fourth(terminal)),
        transitions(First -> Second on Go, Second -> Third on Go, Third -> Fourth on Go),
        drift = revert,
    )]
    #[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    #[kube(
        group = "fsm.example.com",
        version = "v1",
        kind = "Relay",
        namespaced,
        status = "RelayStatus"
    )]
    pub struct RelaySpec {}

    /// Status of [`Relay`].
    #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    pub struct RelayStatus {
        /// The machine's fields.
        #[serde(flatten)]
        pub machine: MachineStatus<RelayPhase>,
    }

    /// An approval gate: only people approve (`Pending -> Approved`, a manual edge out of the
    /// initial phase), the handler may reject. For who may take a manual edge.
    #[state_machine(
        phases(Pending(initial), Approved(terminal), Rejected(terminal)),
        transitions(Pending -> Approved manual, Pending -> Rejected on Reject),
    )]
    #[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    #[kube(
        group = "fsm.example.com",
        version = "v1",
        kind = "Change",
        namespaced,
        status = "ChangeStatus"
    )]
    pub struct ChangeSpec {}

    /// Status of [`Change`].
    #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    pub struct ChangeStatus {
        /// The machine's fields.
        #[serde(flatten)]
        pub machine: MachineStatus<ChangePhase>,
    }

    /// A machine that reverts drift, for the drift tests. Its CRD is installed as an older
    /// spec's CRD would be, without the phase enum (see `cluster::install_crds`), so that a phase
    /// this spec does not declare can be stored.
    #[state_machine(
        phases(Pending(initial), Active, Retired(terminal)),
        transitions(Pending -> Active on Activate, Active -> Retired on Retire),
        retired(Activating -> Active),
        drift = revert,
    )]
    #[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    #[kube(
        group = "fsm.example.com",
        version = "v1",
        kind = "Guarded",
        namespaced,
        status = "GuardedStatus"
    )]
    pub struct GuardedSpec {}

    /// Status of [`Guarded`].
    #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    pub struct GuardedStatus {
        /// The machine's fields.
        #[serde(flatten)]
        pub machine: MachineStatus<GuardedPhase>,
    }
}
