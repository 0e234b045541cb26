//! The API server's own record of the requests it answered: `scripts/envtest` keeps an audit
//! log (one JSON line per create, update, patch or delete, but those of Events and Leases),
//! whose path `scripts/envtest env` exports as `KUBE_FSM_AUDIT_LOG`. Tests count an operator's
//! requests from it rather than trusting the operator's own account.

use std::io::BufRead;

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

/// One request the API server answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// `create`, `patch`, `update`, `delete`, …
    pub verb: String,
    /// The resource, e.g. `configmaps`.
    pub resource: String,
    /// `status` for the status subresource, empty otherwise.
    pub subresource: String,
    /// The object's namespace.
    pub namespace: String,
    /// The object's name.
    pub name: String,
    /// The HTTP code answered.
    pub code: u16,
    /// Who sent it, as authenticated.
    pub user: String,
    /// When the server answered.
    pub at: Timestamp,
}

/// The audit log's path, or `None` (after a loud message) when it is unset and the run does
/// not require a cluster.
///
/// # Panics
/// When `KUBE_FSM_REQUIRE_CLUSTER=1` and `KUBE_FSM_AUDIT_LOG` is unset.
#[must_use]
pub fn log(test: &str) -> Option<std::path::PathBuf> {
    crate::cluster::tool(
        test,
        "KUBE_FSM_AUDIT_LOG",
        r#"eval "$(scripts/envtest env)""#,
    )
    .map(Into::into)
}

/// Every request in `namespace` the log at `path` holds (answered, in the order answered).
///
/// # Panics
/// When the log cannot be read, or a line of it is not an audit event: a check that counts
/// requests must not count fewer because it could not read them.
#[must_use]
pub fn requests(path: &std::path::Path, namespace: &str) -> Vec<Request> {
    let file = std::fs::File::open(path)
        .unwrap_or_else(|e| panic!("cannot read the audit log {}: {e}", path.display()));
    let needle = format!("\"namespace\":\"{namespace}\"");
    std::io::BufReader::new(file)
        .lines()
        .map(|line| line.unwrap_or_else(|e| panic!("reading {}: {e}", path.display())))
        .filter(|line| line.contains(&needle))
        .filter_map(|line| {
            let event: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("not an audit event ({e}): {line}"));
            request(&event).filter(|r| r.namespace == namespace)
        })
        .collect()
}

fn request(event: &Value) -> Option<Request> {
    if event["stage"] != "ResponseComplete" {
        return None;
    }
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let object = &event["objectRef"];
    Some(Request {
        verb: text(&event["verb"]),
        resource: text(&object["resource"]),
        subresource: text(&object["subresource"]),
        namespace: text(&object["namespace"]),
        name: text(&object["name"]),
        code: u16::try_from(event["responseStatus"]["code"].as_u64()?).ok()?,
        user: text(&event["user"]["username"]),
        at: event["stageTimestamp"].as_str()?.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answered_request_is_read_and_a_stage_before_the_answer_is_not() {
        let line = r#"{"kind":"Event","level":"Request","stage":"ResponseComplete","verb":"create","user":{"username":"admin"},"objectRef":{"resource":"configmaps","namespace":"ns","name":"c"},"responseStatus":{"code":403},"stageTimestamp":"2026-12-03T10:00:00.123456Z"}"#;
        let event: Value = serde_json::from_str(line).unwrap();
        let read = request(&event).expect("an answered request");
        assert_eq!(
            (read.verb.as_str(), read.resource.as_str(), read.code),
            ("create", "configmaps", 403)
        );
        assert_eq!(read.subresource, "");
        let mut started = event;
        started["stage"] = "ResponseStarted".into();
        assert_eq!(request(&started), None);
    }
}
