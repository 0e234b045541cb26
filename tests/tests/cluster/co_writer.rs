//! A chatty co-writer does not starve an object, on the real API server: another writer (a
//! GitOps tool's annotations) patching every object every 100 ms bumps the resourceVersion the
//! engine's status writes are locked on, more often than a step takes (150 ms here, a handler
//! asking an outside system), and the objects still converge in seconds, with no Warning Event
//! and each step's handler run about once.

use std::time::{Duration, Instant};

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube_fsm_testkit::cluster::{self, wait_phase};
use kube_fsm_testkit::handlers::{BeforeEach, Preceded};
use kube_fsm_testkit::metrics::Recorded;
use kube_fsm_testkit::operator::{Running, in_namespace};
use kube_fsm_testkit::resources::*;
use serde_json::json;

/// Objects, each patched by the co-writer every 100 ms.
const OBJECTS: usize = 20;

/// How long each handler call takes.
const STEP: Duration = Duration::from_millis(150);

/// Counts the Database handler calls, each taking [`STEP`].
#[derive(Clone, Default)]
struct Slow(Arc<AtomicUsize>);

impl BeforeEach for Slow {
    async fn before(&self, _: &Database, _: DatabasePhase) {
        self.0.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(STEP).await;
    }
}

#[tokio::test]
async fn a_chatty_co_writer_neither_starves_an_object_nor_raises_a_warning() {
    let Some((client, ns)) = cluster::prepare("co_writer", "fsm-chatty").await else {
        return;
    };
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let names: Vec<String> = (0..OBJECTS).map(|i| format!("db-{i}")).collect();
    for name in &names {
        api.create(&PostParams::default(), &sample(name))
            .await
            .expect("create a Database");
    }
    // The co-writer: one annotation per object, rewritten every 100 ms (a merge patch, not
    // locked on the resourceVersion, as GitOps tools and other controllers write).
    let writers: Vec<_> = names
        .iter()
        .map(|name| {
            let (api, name) = (api.clone(), name.clone());
            tokio::spawn(async move {
                for n in 0u64.. {
                    let ping = json!({ "metadata": { "annotations": { "gitops.example/ping": n.to_string() } } });
                    let _ = api
                        .patch(&name, &PatchParams::default(), &Patch::Merge(&ping))
                        .await;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        })
        .collect();
    let recorded = Recorded::default();
    let slow = Slow::default();
    let started = Instant::now();
    let running = Running::spawn(
        in_namespace::<Database, _>(&client, &ns, Preceded(slow.clone()))
            .metrics(recorded.metrics()),
    );
    for name in &names {
        wait_phase(&api, name, "Running").await;
    }
    let took = started.elapsed();
    let calls = slow.0.load(Ordering::SeqCst);
    // A few seconds more under the co-writer, settled.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for writer in &writers {
        writer.abort();
    }
    let conflicts = recorded.sum("kube_fsm_status_conflicts_total", &[]);
    eprintln!(
        "{OBJECTS} objects converged in {took:?} under a co-writer patching each every 100 ms \
         ({conflicts} conflicts, {calls} handler calls)"
    );
    let warnings: Vec<String> = cluster::warning_events(&client, &ns).await;
    assert!(warnings.is_empty(), "Warning Events: {warnings:#?}");
    assert!(
        took < Duration::from_secs(10),
        "converged in {took:?} (measured well under 10 s)"
    );
    // Pending, Provisioning (twice: its child first), Running: about four calls an object,
    // and the Running step again on later wake-ups; a conflict redoing the step would be
    // four more each time.
    assert!(
        calls <= OBJECTS * 8,
        "{calls} handler calls for {OBJECTS} objects: steps redone after conflicts"
    );
    running.stop().await;
}
