//! Two schema migrations run as Jobs on the cluster: one completes (Succeeded, with the Job's
//! own reason) and one whose pod fails (Failed, with the Job's reason and message; on kwok's
//! nodes its failing stage, selected by a pod label, fails it; on real nodes its command does).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use kube_fsm_examples::migration::{Migration, MigrationPhase, MigrationSpec};

use crate::BoxError;

fn migration(name: &str, script: &str, fails: bool) -> Migration {
    let mut pod_labels = BTreeMap::new();
    if fails {
        pod_labels.insert(kube_fsm_envtest::pods::FAILS.to_owned(), "true".to_owned());
    }
    Migration::new(
        name,
        MigrationSpec {
            image: "busybox:1.37".into(),
            command: vec!["sh".into(), "-c".into(), script.into()],
            approved_by: Some("the demo".into()),
            pod_labels,
        },
    )
}

/// Runs both migrations (their CRD installed), printing each one's phases as the API server stores them; an error
/// unless one Succeeded and the other Failed within `timeout`. They are deleted at the end
/// (the garbage collector takes their Jobs).
pub async fn run(client: &Client, ns: &str, timeout: Duration) -> Result<(), BoxError> {
    let api: Api<Migration> = Api::namespaced(client.clone(), ns);
    let start = Instant::now();
    let mut events = watcher(api.clone(), watcher::Config::default())
        .applied_objects()
        .boxed();
    for object in [
        migration("add-index", "echo index added", false),
        migration("drop-column", "exit 1", true),
    ] {
        api.create(&PostParams::default(), &object).await?;
    }
    println!("migrations add-index and drop-column created, approved: each runs as a Job");
    let mut phases: BTreeMap<String, MigrationPhase> = BTreeMap::new();
    let ended = |phases: &BTreeMap<String, MigrationPhase>| {
        phases.len() == 2
            && phases
                .values()
                .all(|p| matches!(p, MigrationPhase::Succeeded | MigrationPhase::Failed))
    };
    while !ended(&phases) {
        let next = tokio::time::timeout(timeout.saturating_sub(start.elapsed()), events.next());
        let Ok(Some(event)) = next.await else {
            return Err("the migrations did not finish in time".into());
        };
        let Ok(object) = event else { continue };
        let Some(status) = &object.status else {
            continue;
        };
        let Some(phase) = status.machine.phase() else {
            continue;
        };
        let name = object.name_any();
        if phases.insert(name.clone(), phase) == Some(phase) {
            continue;
        }
        let why = match phase {
            MigrationPhase::Succeeded => status.machine.condition("JobComplete"),
            MigrationPhase::Failed => status.machine.condition("JobFailed"),
            _ => None,
        }
        .map(|c| format!(" ({}: {})", c.reason, c.message))
        .unwrap_or_default();
        println!(
            "[{:7.3}s] migration {name}: {phase}{why}",
            start.elapsed().as_secs_f64()
        );
    }
    let outcome = (
        phases.get("add-index").copied(),
        phases.get("drop-column").copied(),
    );
    for name in ["add-index", "drop-column"] {
        api.delete(name, &DeleteParams::background()).await?;
    }
    match outcome {
        (Some(MigrationPhase::Succeeded), Some(MigrationPhase::Failed)) => Ok(()),
        other => Err(format!("the migrations ended as {other:?}, not Succeeded and Failed").into()),
    }
}
