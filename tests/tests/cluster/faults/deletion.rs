//! Objects deleted under the operator: a conflict caused by deletion runs cleanup, not the
//! step again; an object gone before its write is a quiet success; and a new object of a
//! deleted one's name does not inherit its backoff (the per-object memory is by UID).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kube::api::{DeleteParams, PostParams};
use kube::{Api, ResourceExt};
use kube_fsm::{Cleanup, Next, Step};
use kube_fsm_testkit::cluster::{self, events, eventually, phase_of};
use kube_fsm_testkit::operator::{self, Running};
use kube_fsm_testkit::resources::*;

use super::{Scripted, TestError, guarded};

/// Deletes the object from inside its first Pending step (so the step's status write
/// conflicts, or finds the object gone) and counts what runs.
#[derive(Clone)]
struct Deleting {
    api: Api<Database>,
    pending_runs: Arc<AtomicUsize>,
    cleanups: Arc<AtomicUsize>,
}

impl DatabaseHandler for Deleting {
    type Error = TestError;

    async fn on_pending(
        &self,
        db: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabasePendingNext, TestError> {
        if self.pending_runs.fetch_add(1, Ordering::SeqCst) == 0 {
            self.api
                .delete(&db.name_any(), &DeleteParams::default())
                .await?;
        }
        Ok(DatabasePendingEvent::Accept.into())
    }

    async fn on_provisioning(
        &self,
        _: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabaseProvisioningNext, TestError> {
        Ok(Next::Stay)
    }

    async fn on_running(
        &self,
        _: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabaseRunningNext, TestError> {
        Ok(Next::Stay)
    }

    async fn on_degraded(
        &self,
        _: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabaseDegradedNext, TestError> {
        Ok(Next::Stay)
    }

    async fn cleanup(&self, _: &Database, _: &kube_fsm::Context) -> Result<Cleanup, TestError> {
        self.cleanups.fetch_add(1, Ordering::SeqCst);
        Ok(Cleanup::Done)
    }
}

#[tokio::test]
async fn a_conflict_caused_by_deletion_runs_cleanup_not_the_step_again() {
    let Some((client, ns)) = cluster::prepare("a_conflict_caused_by_deletion", "fsm-delconf").await
    else {
        return;
    };
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let handler = Deleting {
        api: api.clone(),
        pending_runs: Arc::default(),
        cleanups: Arc::default(),
    };
    let operator = Running::spawn(operator::in_namespace::<Database, _>(
        &client,
        &ns,
        handler.clone(),
    ));
    api.create(&PostParams::default(), &sample("db"))
        .await
        .expect("create");
    let gone = eventually(Duration::from_secs(15), || async {
        api.get_opt("db")
            .await
            .ok()
            .and_then(|o| o.is_none().then_some(()))
    })
    .await;
    assert!(gone.is_some(), "cleanup ran and the finalizer was removed");
    assert_eq!(
        handler.pending_runs.load(Ordering::SeqCst),
        1,
        "the re-read object was being deleted: its step must not run again"
    );
    assert!(handler.cleanups.load(Ordering::SeqCst) >= 1);
    assert!(events(&client, &ns, "ReconcileFailed").await.is_empty());
    assert!(
        events(&client, &ns, "Accept").await.is_empty(),
        "no transition was written"
    );
    operator.stop().await;
}

#[tokio::test]
async fn an_object_gone_before_its_write_is_a_quiet_success() {
    let Some((client, ns)) = cluster::prepare("an_object_gone_before_its_write", "fsm-gone").await
    else {
        return;
    };
    let api: Api<Guarded> = Api::namespaced(client.clone(), &ns);
    let handler = Scripted {
        api: Some(api.clone()),
        ..Scripted::default()
    };
    let operator = Running::spawn(operator::in_namespace::<Guarded, _>(
        &client,
        &ns,
        handler.clone(),
    ));
    api.create(&PostParams::default(), &guarded("g", &[("then", "delete")]))
        .await
        .expect("create");
    eventually(Duration::from_secs(15), || async {
        (handler.pending_runs.load(Ordering::SeqCst) > 0).then_some(())
    })
    .await
    .expect("the step ran");
    let gone = eventually(Duration::from_secs(10), || async {
        api.get_opt("g").await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(gone.is_some(), "the object is gone");
    // A moment for a failure that should not be reported.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let failed = events(&client, &ns, "ReconcileFailed").await;
    assert!(
        failed.is_empty(),
        "a vanished object is no failure: {failed:?}"
    );
    operator.stop().await;
}

#[tokio::test]
async fn a_new_object_of_a_deleted_ones_name_does_not_inherit_its_backoff() {
    let Some((client, ns)) = cluster::prepare("a_new_object_does_not_inherit", "fsm-uid").await
    else {
        return;
    };
    let api: Api<Guarded> = Api::namespaced(client.clone(), &ns);
    let handler = Scripted::default();
    let operator = Running::spawn(
        operator::in_namespace::<Guarded, _>(&client, &ns, handler.clone())
            .backoff(Duration::from_millis(50), Duration::from_secs(600)),
    );
    api.create(&PostParams::default(), &guarded("g", &[("fail", "always")]))
        .await
        .expect("create");
    // 8 failures in a row: the next retry would come after 6.4-12.8 s.
    eventually(Duration::from_secs(30), || async {
        (handler.pending_runs.load(Ordering::SeqCst) >= 8).then_some(())
    })
    .await
    .expect("failures retried");
    api.delete("g", &DeleteParams::default())
        .await
        .expect("delete");
    eventually(Duration::from_secs(10), || async {
        api.get_opt("g")
            .await
            .ok()
            .and_then(|o| o.is_none().then_some(()))
    })
    .await
    .expect("deleted");
    // Same name, new UID, fails once: its first retry comes after 25-50 ms.
    api.create(&PostParams::default(), &guarded("g", &[("fail", "once")]))
        .await
        .expect("create again");
    let active = eventually(Duration::from_secs(4), || async {
        let g = api.get("g").await.ok()?;
        (phase_of(&g).as_deref() == Some("Active")).then_some(())
    })
    .await;
    assert!(
        active.is_some(),
        "the new object inherited the old one's backoff"
    );
    operator.stop().await;
}
