//! What a test does to one pod on a simulated node, through kwok's stages (never by writing
//! the pod's status itself): make it fail, make it NotReady, make it Ready again.
//!
//! kwok's chaos stage fails a pod labelled [`FAILS`]; kube-fsm-envtest's own stages
//! (`stages/pods.yaml`, added to kwok's when the control plane starts) turn a running pod
//! labelled [`NOT_READY`] NotReady and turn it Ready again once the label is gone. The
//! controllers see what they would see of a real kubelet: a StatefulSet or Deployment counts
//! the replica unready, an EndpointSlice marks its endpoint not ready, a Job counts a failure.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};

use crate::Error;

/// A pod with this label set to `"true"` fails on a simulated node: kwok's chaos stage exits
/// its containers with code 1 once it runs (so its Job counts a failure, or its StatefulSet
/// makes it again). Put it on a pod ([`fail`]), or on the pod template of what should fail.
pub const FAILS: &str = "pod-container-running-failed.stage.kwok.x-k8s.io";

/// A running pod with this label set to `"true"` turns NotReady (its containers unready, as
/// when a readiness probe fails) and turns Ready again once the label is removed
/// ([`set_ready`]).
pub const NOT_READY: &str = "envtest.kube-fsm.dev/not-ready";

/// kube-fsm-envtest's kwok stages (the YAML of `stages/pods.yaml`).
pub(crate) const STAGES: &str = include_str!("../stages/pods.yaml");

/// How long [`set_ready`] waits for the pod's Ready condition.
const WITHIN: Duration = Duration::from_secs(30);

/// Makes the pod `name` in `namespace` fail: its containers exit with code 1 about a second
/// later (kwok's chaos stage), its phase becomes `Failed`.
///
/// # Errors
/// When the API server refuses the label (no such pod, no permission).
pub async fn fail(client: &Client, namespace: &str, name: &str) -> Result<(), Error> {
    label(client, namespace, name, FAILS, Some("true")).await
}

/// Makes the running pod `name` in `namespace` NotReady (`ready == false`) or Ready again,
/// and waits (at most 30 s) until its Ready condition says so.
///
/// # Errors
/// When the API server refuses the label; [`Error::Timeout`] when the pod's Ready condition
/// has not followed in time (it is not running on a simulated node).
pub async fn set_ready(
    client: &Client,
    namespace: &str,
    name: &str,
    ready: bool,
) -> Result<(), Error> {
    let value = (!ready).then_some("true");
    label(client, namespace, name, NOT_READY, value).await?;
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let want = if ready { "True" } else { "False" };
    let what = format!(
        "the pod {namespace}/{name} turns {} (is it running on a simulated node?)",
        if ready { "Ready" } else { "NotReady" }
    );
    crate::wait::until(&api, name, &what, WITHIN, move |pod| {
        ready_status(pod) == Some(want)
    })
    .await
    .map(drop)
}

/// The status of the pod's Ready condition, if it has one.
fn ready_status(pod: &Pod) -> Option<&str> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.as_str())
}

/// Sets the label `key` of the pod to `value`, or removes it (`None`).
async fn label(
    client: &Client,
    namespace: &str,
    name: &str,
    key: &str,
    value: Option<&str>,
) -> Result<(), Error> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let patch = serde_json::json!({ "metadata": { "labels": { key: value } } });
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(drop)
        .map_err(|source| Error::Api {
            action: format!(
                "label the pod {namespace}/{name} {key}={}",
                value.unwrap_or("(removed)")
            ),
            source,
        })
}

/// kwok's stages at `kwok` with kube-fsm-envtest's after them, as one file for kwok's
/// `--config`.
pub(crate) fn with_stages(kwok: &str) -> String {
    let mut all = kwok.trim_end().to_owned();
    if !all.is_empty() && !all.ends_with("---") {
        all.push_str("\n---");
    }
    all.push('\n');
    all.push_str(STAGES);
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_own_stages_follow_kwoks_as_separate_documents() {
        let all = with_stages("kind: Stage\nmetadata:\n  name: pod-ready\n");
        assert!(all.starts_with("kind: Stage\nmetadata:\n  name: pod-ready\n---\n"));
        assert!(all.contains("name: kube-fsm-pod-not-ready"));
        assert!(all.contains("name: kube-fsm-pod-ready-again"));
        let cached = with_stages("kind: Stage\n---\n");
        assert!(
            cached.starts_with("kind: Stage\n---\n# kube-fsm-envtest"),
            "{cached}"
        );
    }

    #[test]
    fn the_stages_select_on_the_labels_the_functions_set() {
        assert_eq!(
            STAGES.matches(NOT_READY).count(),
            3,
            "the comment and both selectors"
        );
        assert!(STAGES.contains(&format!(".metadata.labels[\"{NOT_READY}\"]")));
    }
}
