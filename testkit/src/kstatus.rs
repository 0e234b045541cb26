//! kstatus itself on stored objects: the Go command `testkit/kstatus` (built by
//! `scripts/kstatus`), which calls `sigs.k8s.io/cli-utils/pkg/kstatus/status.Compute` — the
//! verdict kpt, Flux and Argo CD read — so that a test checks the status the engine stores
//! against kstatus, not against a restatement of its rules.

use std::process::Stdio;

use serde_json::Value;
use tokio::io::AsyncWriteExt;

use crate::cluster::tool;

/// kstatus's verdict on one object: its status (`Current`, `InProgress`, `Failed`,
/// `Terminating`, …) and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The status kstatus computes.
    pub status: String,
    /// Its message.
    pub message: String,
}

/// kstatus's verdicts on `objects` (as the API server returns them, `apiVersion` and `kind`
/// included), in order; `None` (after a loud message) when `KUBE_FSM_KSTATUS` is unset and the
/// run does not require a cluster.
///
/// # Panics
/// When the command cannot run or refuses an object.
pub async fn verdicts(test: &str, objects: &[Value]) -> Option<Vec<Verdict>> {
    let command = tool(
        test,
        "KUBE_FSM_KSTATUS",
        "scripts/kstatus ensure; eval \"$(scripts/kstatus env)\"",
    )?;
    let mut child = tokio::process::Command::new(command)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kstatus");
    let mut input = Vec::new();
    for object in objects {
        serde_json::to_writer(&mut input, object).expect("json");
        input.push(b'\n');
    }
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(&input).await.expect("write to kstatus");
    drop(stdin);
    let output = child.wait_with_output().await.expect("kstatus");
    assert!(
        output.status.success(),
        "kstatus failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let verdicts: Vec<Verdict> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| {
            let (status, message) = line.split_once('\t').unwrap_or((line, ""));
            Verdict {
                status: status.to_owned(),
                message: message.to_owned(),
            }
        })
        .collect();
    assert_eq!(verdicts.len(), objects.len(), "one verdict per object");
    Some(verdicts)
}
