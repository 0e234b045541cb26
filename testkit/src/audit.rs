//! The API server's own record of the requests it answered: `scripts/envtest` keeps an audit
//! log (one JSON line per create, update, patch or delete, and one per list but those of
//! Events and Leases: each watch starts with one), whose path `scripts/envtest env` exports as
//! `KUBE_FSM_AUDIT_LOG`. Tests count an operator's requests from it rather than trusting the
//! operator's own account.

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
    /// Who sent it: the user it acted as (the impersonated one, when impersonated).
    pub user: String,
    /// The `fieldManager` the request named (empty when none).
    pub field_manager: String,
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
    writes(path, namespace)
        .into_iter()
        .filter(|request| !["events", "leases"].contains(&request.resource.as_str()))
        .collect()
}

/// Every write in `namespace` the log at `path` holds, Events' and Leases' included.
///
/// # Panics
/// As [`requests`].
#[must_use]
pub fn writes(path: &std::path::Path, namespace: &str) -> Vec<Request> {
    const WRITES: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];
    answered(path, namespace)
        .filter(|request| WRITES.contains(&request.verb.as_str()))
        .collect()
}

/// Every list in `namespace` the log at `path` holds: each watch of a process starts with one
/// (kube's watcher and client-go's informers list, then watch from the list's version; a
/// watch that ends resumes without a list, unless its version is gone).
///
/// # Panics
/// As [`requests`].
#[must_use]
pub fn lists(path: &std::path::Path, namespace: &str) -> Vec<Request> {
    answered(path, namespace)
        .filter(|request| request.verb == "list")
        .collect()
}

/// The answered requests in `namespace`.
fn answered(path: &std::path::Path, namespace: &str) -> impl Iterator<Item = Request> {
    entries(path, namespace)
        .into_iter()
        .filter(|(stage, _)| stage == "ResponseComplete")
        .map(|(_, request)| request)
}

/// Every audit event in `namespace`: its stage and the request.
fn entries(path: &std::path::Path, namespace: &str) -> Vec<(String, Request)> {
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
            let stage = event["stage"].as_str().unwrap_or_default().to_owned();
            request(&event)
                .filter(|r| r.namespace == namespace)
                .map(|r| (stage, r))
        })
        .collect()
}

fn request(event: &Value) -> Option<Request> {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let object = &event["objectRef"];
    Some(Request {
        verb: text(&event["verb"]),
        resource: text(&object["resource"]),
        subresource: text(&object["subresource"]),
        namespace: text(&object["namespace"]),
        name: text(&object["name"]),
        code: u16::try_from(event["responseStatus"]["code"].as_u64().unwrap_or(0)).ok()?,
        user: event["impersonatedUser"]["username"]
            .as_str()
            .map_or_else(|| text(&event["user"]["username"]), str::to_owned),
        field_manager: field_manager(event["requestURI"].as_str().unwrap_or_default()),
        at: event["stageTimestamp"].as_str()?.parse().ok()?,
    })
}

/// The `fieldManager` query parameter of `uri`, decoded; empty when it has none.
fn field_manager(uri: &str) -> String {
    let query = uri.split_once('?').map_or("", |(_, query)| query);
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix("fieldManager="))
        .map(|value| {
            form_urlencoded::parse(format!("v={value}").as_bytes())
                .next()
                .map(|(_, v)| v.into_owned())
                .unwrap_or_default()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(id: &str, stage: &str, verb: &str, at: &str) -> String {
        format!(
            r#"{{"kind":"Event","auditID":"{id}","stage":"{stage}","verb":"{verb}","user":{{"username":"admin"}},"objectRef":{{"resource":"configmaps","namespace":"ns","name":"c"}},"responseStatus":{{"code":200}},"stageTimestamp":"2026-12-03T10:00:{at}Z"}}"#
        )
    }

    fn log(name: &str, lines: &[String]) -> std::path::PathBuf {
        let path =
            std::env::temp_dir().join(format!("kube-fsm-audit-{name}-{}", std::process::id()));
        std::fs::write(&path, lines.join("\n")).expect("write the log");
        path
    }

    #[test]
    fn answered_requests_are_read_and_the_stages_before_an_answer_are_not() {
        let path = log(
            "requests",
            &[
                line("a", "ResponseStarted", "create", "00"),
                line("a", "ResponseComplete", "create", "01"),
                line("w", "ResponseComplete", "list", "02"),
            ],
        );
        let read = requests(&path, "ns");
        let _ = std::fs::remove_file(&path);
        assert_eq!(read.len(), 1, "{read:?}");
        assert_eq!(
            (
                read[0].verb.as_str(),
                read[0].resource.as_str(),
                read[0].code
            ),
            ("create", "configmaps", 200)
        );
    }

    #[test]
    fn events_and_leases_are_writes_but_not_requests_and_the_impersonated_user_is_the_sender() {
        let event = line("e", "ResponseComplete", "create", "00")
            .replace("configmaps", "events")
            .replace(
                r#""user":{"username":"admin"}"#,
                r#""user":{"username":"admin"},"impersonatedUser":{"username":"replica-a"}"#,
            );
        let path = log(
            "events",
            &[event, line("c", "ResponseComplete", "patch", "01")],
        );
        let (writes, requests) = (writes(&path, "ns"), requests(&path, "ns"));
        let _ = std::fs::remove_file(&path);
        assert_eq!((writes.len(), requests.len()), (2, 1));
        assert_eq!(
            (writes[0].user.as_str(), writes[1].user.as_str()),
            ("replica-a", "admin")
        );
        assert_eq!(requests[0].resource, "configmaps");
    }

    #[test]
    fn the_field_manager_is_read_from_the_request_uri() {
        assert_eq!(
            field_manager(
                "/apis/g/v1/namespaces/ns/dbs/a/status?fieldManager=replica-a&force=true"
            ),
            "replica-a"
        );
        assert_eq!(
            field_manager("/apis/g/v1/namespaces/ns/dbs?fieldManager=a%2Fb"),
            "a/b"
        );
        assert_eq!(field_manager("/apis/g/v1/namespaces/ns/dbs/a"), "");
    }

    #[test]
    fn lists_are_read_apart_from_writes() {
        let path = log(
            "lists",
            &[
                line("a", "ResponseComplete", "list", "00"),
                line("b", "ResponseComplete", "patch", "01"),
            ],
        );
        let (lists, writes) = (lists(&path, "ns"), requests(&path, "ns"));
        let _ = std::fs::remove_file(&path);
        assert_eq!((lists.len(), writes.len()), (1, 1));
        assert_eq!(
            (lists[0].verb.as_str(), writes[0].verb.as_str()),
            ("list", "patch")
        );
    }
}
