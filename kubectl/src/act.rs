//! The commands that change an object: `move` (a status patch under the field manager
//! `kubectl-fsm`, checked against the machine first, with an Event), `pause`, `resume` and
//! `reconcile` (annotations the engine reads).

use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};
use kube_fsm::machine::Move;
use serde_json::json;

use crate::Error;
use kube_fsm::machine::{PAUSED_ANNOTATION, RECONCILE_ANNOTATION};

use crate::object::Stored;
use crate::target::Target;

/// The field manager of every write.
pub const FIELD_MANAGER: &str = "kubectl-fsm";

fn params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    }
}

/// Moves `object` to `phase` for `reason`; what to print.
pub async fn move_to(
    client: &Client,
    target: &Target,
    api: &Api<DynamicObject>,
    name: &str,
    phase: &str,
    reason: &str,
) -> Result<String, Error> {
    let object = api.get(name).await?;
    move_from(client, target, api, object, phase, reason).await
}

/// Moves `object`, as read, to `phase` for `reason`: refused (409) when it changed since.
async fn move_from(
    client: &Client,
    target: &Target,
    api: &Api<DynamicObject>,
    object: DynamicObject,
    phase: &str,
    reason: &str,
) -> Result<String, Error> {
    let name = object.metadata.name.clone().unwrap_or_default();
    let name = name.as_str();
    let value = serde_json::to_value(&object)?;
    let stored = Stored(&value);
    let from = stored.phase();
    let kind = &target.machine.kind;
    let manual = match target.machine.check_move(from, phase)? {
        Move::Stay => return Ok(format!("{kind}/{name} is already in {phase}")),
        Move::Manual => true,
        Move::Edge => false,
    };
    // Locked on the version read: a move decided on what someone else has changed since fails.
    let patch = json!({
        "metadata": { "resourceVersion": object.metadata.resource_version },
        "status": { "phase": phase },
    });
    api.patch_status(name, &params(), &Patch::Merge(&patch))
        .await
        .map_err(|e| match e {
            kube::Error::Api(status) if status.code == 409 => {
                format!("{kind}/{name} changed while it was being moved; look again and retry")
                    .into()
            }
            kube::Error::Api(status) => Error::from(status.message),
            other => other.into(),
        })?;
    let from = from.unwrap_or_default();
    let what = if manual {
        "a manual transition"
    } else {
        "a transition of the machine, taken by hand"
    };
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: FIELD_MANAGER.into(),
            instance: None,
        },
    );
    let event = Event {
        type_: EventType::Normal,
        reason: "MovedByHand".into(),
        note: Some(
            format!("{from} → {phase} by kubectl fsm ({what}): {reason}")
                .chars()
                .take(1024)
                .collect(),
        ),
        action: format!("{from}To{phase}").chars().take(128).collect(),
        secondary: None,
    };
    let reference = object.object_ref(&target.resource);
    if let Err(err) = recorder.publish(&event, &reference).await {
        eprintln!("warning: moved, but the Event could not be recorded: {err}");
    }
    Ok(format!(
        "{kind}/{name} moved from {from} to {phase} ({what})"
    ))
}

/// Sets (or with `None`, removes) annotation `key` on `name`.
pub async fn annotate(
    api: &Api<DynamicObject>,
    name: &str,
    key: &str,
    value: Option<&str>,
) -> Result<(), Error> {
    let patch = json!({ "metadata": { "annotations": { key: value } } });
    api.patch(name, &params(), &Patch::Merge(&patch)).await?;
    Ok(())
}

/// Pauses `name` for `reason`.
pub async fn pause(
    api: &Api<DynamicObject>,
    name: &str,
    reason: Option<&str>,
) -> Result<(), Error> {
    annotate(api, name, PAUSED_ANNOTATION, Some(reason.unwrap_or("true"))).await
}

/// Resumes `name`.
pub async fn resume(api: &Api<DynamicObject>, name: &str) -> Result<(), Error> {
    annotate(api, name, PAUSED_ANNOTATION, None).await
}

/// Asks for a reconcile of `name` now.
pub async fn reconcile(api: &Api<DynamicObject>, name: &str) -> Result<String, Error> {
    let now = Timestamp::now().to_string();
    annotate(api, name, RECONCILE_ANNOTATION, Some(&now)).await?;
    Ok(now)
}

#[cfg(test)]
mod tests {
    use kube::api::{Patch, PatchParams, PostParams};
    use kube_fsm_testkit::cluster;
    use kube_fsm_testkit::resources::{Database, sample};
    use serde_json::json;

    use super::*;

    /// On the real API server: a move decided on an object that someone else changed since
    /// it was read is refused with the API server's 409, in a sentence, and writes nothing.
    #[tokio::test]
    async fn a_move_decided_on_an_object_changed_since_is_refused() {
        let Some((client, ns)) = cluster::prepare("kubectl_fsm::move_409", "fsm-move-409").await
        else {
            return;
        };
        let typed: Api<Database> = Api::namespaced(client.clone(), &ns);
        typed
            .create(&PostParams::default(), &sample("db"))
            .await
            .expect("create");
        let target = Target::resolve(&client, "databases").await.expect("target");
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &target.resource);
        let pending = json!({ "status": { "phase": "Pending" } });
        typed
            .patch_status("db", &PatchParams::default(), &Patch::Merge(&pending))
            .await
            .expect("Pending");
        let read = api.get("db").await.expect("read");
        // Someone else writes in between: the object is no longer what the move was decided on.
        let label = json!({ "metadata": { "labels": { "team": "storage" } } });
        typed
            .patch("db", &PatchParams::default(), &Patch::Merge(&label))
            .await
            .expect("another writer");
        let err = move_from(&client, &target, &api, read, "Provisioning", "test")
            .await
            .expect_err("a stale move");
        assert_eq!(
            err.to_string(),
            "Database/db changed while it was being moved; look again and retry"
        );
        let stored = typed.get("db").await.expect("get");
        assert_eq!(
            cluster::phase_of(&stored).as_deref(),
            Some("Pending"),
            "nothing written"
        );
        // Read again, it moves.
        let read = api.get("db").await.expect("read");
        move_from(&client, &target, &api, read, "Provisioning", "test")
            .await
            .expect("a fresh move");
    }
}
