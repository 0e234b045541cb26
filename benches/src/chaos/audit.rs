//! The API server's own record of the run's writes: `scripts/envtest` keeps an audit log
//! (one JSON line per create, update, patch or delete). Each replica sends its identity as
//! its User-Agent, so every write that landed on an object of the run (either kind) is attributed to the replica that
//! sent it, whatever the replicas themselves believe, and held against the other replicas'
//! handler steps: a write landing while another replica steps the same object is two
//! replicas handling it at once — but for the shard labeller's write of the label the object
//! already carries (a retry whose first answer was lost, say), which changes nothing.

use std::collections::{HashMap, HashSet};
use std::io::BufRead;
use std::time::SystemTime;

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use super::Window;

/// What a replica's User-Agent starts with; its identity follows.
pub const AGENT: &str = "kube-fsm-chaos/";
/// The label the chaos run's shards are kept in (`Sharding::new("chaos", …)`).
pub const SHARD_LABEL: &str = "shard.kube-fsm.io/chaos";

/// One write to an object of the run (or its status) that the API server accepted.
#[derive(Clone, Debug)]
pub struct Write {
    /// `namespace/name`.
    pub object: String,
    /// The replica that sent it.
    pub replica: String,
    /// `patch`, `update`, …, and `/status` for the subresource.
    pub verb: String,
    /// When the API server received it and when it answered.
    pub received: SystemTime,
    /// See `received`.
    pub completed: SystemTime,
    /// For a patch of the shard label alone (the labeller's): the label's value.
    pub label: Option<String>,
}

/// The replicas' accepted writes to the run's objects in `namespaces`, from the audit log at `path`.
///
/// # Errors
/// When the log cannot be read, or a replica's line of it is not an audit event (a check that
/// attributes writes must not attribute fewer because it could not read them).
pub fn writes(path: &str, namespaces: &HashSet<String>) -> std::io::Result<Vec<Write>> {
    let file = std::io::BufReader::new(std::fs::File::open(path)?);
    let mut writes = Vec::new();
    for line in file.lines() {
        let line = line?;
        if !line.contains(AGENT) {
            continue;
        }
        let event = serde_json::from_str::<Value>(&line).map_err(|err| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("a replica's audit line is not JSON ({err}): {line}"),
            )
        })?;
        if let Some(write) = accepted(&event, namespaces) {
            writes.push(write);
        }
    }
    Ok(writes)
}

/// The replica's write an audit event records, if it is one that landed on an object of the
/// run.
fn accepted(event: &Value, namespaces: &HashSet<String>) -> Option<Write> {
    let text = |v: &Value| v.as_str().map(str::to_owned);
    let replica = event["userAgent"].as_str()?.strip_prefix(AGENT)?.to_owned();
    let object = &event["objectRef"];
    let namespace = object["namespace"].as_str()?;
    let landed = event["responseStatus"]["code"]
        .as_u64()
        .is_some_and(|code| code < 300);
    if event["stage"] != "ResponseComplete"
        || !["databases", "inlinedatabases"].contains(&object["resource"].as_str().unwrap_or(""))
        || !namespaces.contains(namespace)
        || !landed
    {
        return None;
    }
    let time = |field: &str| -> Option<SystemTime> {
        Some(SystemTime::from(
            event[field].as_str()?.parse::<Timestamp>().ok()?,
        ))
    };
    let mut verb = text(&event["verb"])?;
    if let Some(sub) = object["subresource"].as_str() {
        verb = format!("{verb} /{sub}");
    }
    Some(Write {
        object: format!("{namespace}/{}", object["name"].as_str()?),
        replica,
        verb,
        received: time("requestReceivedTimestamp")?,
        completed: time("stageTimestamp")?,
        label: shard_label_alone(&event["requestObject"]),
    })
}

/// The value of the shard label, when `patch` sets it and nothing else (but the UID
/// precondition the labeller sends along).
fn shard_label_alone(patch: &Value) -> Option<String> {
    let fields = patch.as_object()?;
    let metadata = match (fields.len(), fields.get("metadata")) {
        (1, Some(Value::Object(metadata))) => metadata,
        _ => return None,
    };
    let labels = metadata.get("labels")?.as_object()?;
    let only_labels = metadata.keys().all(|k| k == "labels" || k == "uid");
    match (only_labels, labels.len(), labels.get(SHARD_LABEL)) {
        (true, 1, Some(Value::String(value))) => Some(value.clone()),
        _ => None,
    }
}

/// The writes that landed on an object while another replica was stepping it, described.
#[must_use]
pub fn during_others_steps(writes: &[Write], windows: &[Window]) -> Vec<String> {
    let mut by_object: HashMap<&str, Vec<&Window>> = HashMap::new();
    for window in windows {
        by_object.entry(&window.object).or_default().push(window);
    }
    writes
        .iter()
        .filter_map(|write| {
            let steps = by_object.get(write.object.as_str())?;
            // The write arrived while the other's step was under way. (A step may begin a
            // moment before the API server stamps the write's completion: the write moved the
            // object into the stepping replica's shard, whose watch had it at once.)
            let other = steps.iter().find(|w| {
                w.replica != write.replica
                    && w.start < write.received
                    && write.received < w.end
                    && (write.label.is_none() || write.label != w.label)
            })?;
            let ms = |t: SystemTime| {
                t.duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_millis()
                    % 100_000
            };
            Some(format!(
                "{}: {} by {} while {} stepped it (write {}–{} ms, step {}–{} ms, of the clock's last 100 s)",
                write.object,
                write.verb,
                write.replica,
                other.replica,
                ms(write.received),
                ms(write.completed),
                ms(other.start),
                ms(other.end)
            ))
        })
        .collect()
}

/// How many replicas wrote.
#[must_use]
pub fn writers(writes: &[Write]) -> usize {
    writes
        .iter()
        .map(|w| w.replica.as_str())
        .collect::<HashSet<_>>()
        .len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(ms: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
    }

    #[test]
    fn a_write_of_one_replica_inside_anothers_step_is_found() {
        let line = serde_json::json!({
            "stage": "ResponseComplete", "verb": "patch", "userAgent": "kube-fsm-chaos/replica-2",
            "objectRef": { "resource": "databases", "namespace": "ns", "name": "db-1", "subresource": "status" },
            "responseStatus": { "code": 200 },
            "requestReceivedTimestamp": "1970-01-01T00:00:01.000100Z",
            "stageTimestamp": "1970-01-01T00:00:01.000200Z",
        });
        let namespaces = HashSet::from(["ns".to_owned()]);
        let write = accepted(&line, &namespaces).expect("a replica's write");
        assert_eq!(write.verb, "patch /status");
        assert_eq!(write.received, at(1_000) + Duration::from_micros(100));
        let mut refused = line.clone();
        refused["responseStatus"]["code"] = 409.into();
        assert!(
            accepted(&refused, &namespaces).is_none(),
            "a conflict did not land"
        );
        let step = |replica: &str, start, end| Window {
            object: "ns/db-1".into(),
            replica: replica.into(),
            start: at(start),
            end: at(end),
            label: Some("3".into()),
        };
        let writes = [write];
        assert!(during_others_steps(&writes, &[step("replica-2", 900, 1_100)]).is_empty());
        assert!(during_others_steps(&writes, &[step("replica-1", 0, 900)]).is_empty());
        // A step that began as the write completed (the write brought the object to it).
        let after = Window {
            start: at(1_000) + Duration::from_micros(150),
            ..step("replica-1", 0, 1_500)
        };
        assert!(during_others_steps(&writes, &[after]).is_empty());
        assert_eq!(
            during_others_steps(&writes, &[step("replica-1", 1_000, 1_500)]),
            [
                "ns/db-1: patch /status by replica-2 while replica-1 stepped it (write 1000–1000 ms, step 1000–1500 ms, of the clock's last 100 s)"
            ]
        );
        // The labeller writing the label the object carries changes nothing; another does.
        let mut label = line.clone();
        label["objectRef"]["subresource"] = Value::Null;
        label["requestObject"] = serde_json::json!({
            "metadata": { "uid": "u", "labels": { SHARD_LABEL: "3" } }
        });
        let same = accepted(&label, &namespaces).expect("a label write");
        assert_eq!(same.label.as_deref(), Some("3"));
        let steps = [step("replica-1", 1_000, 1_500)];
        assert!(during_others_steps(std::slice::from_ref(&same), &steps).is_empty());
        let moved = Write {
            label: Some("5".into()),
            ..same
        };
        assert_eq!(during_others_steps(&[moved], &steps).len(), 1);
    }
}
