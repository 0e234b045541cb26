//! The API-economy run (`src/bin/api-economy.rs`, run by `scripts/bench-scale`; BENCHMARKS.md,
//! "Scale: N objects on a real API server"): N Databases created at once on the example
//! operator, a process of its own (`example-operator`), until all are Running; then idle,
//! a restart of the operator (every object reconciled again) and deletion. Each window is
//! measured by the API server's own request counters and by the operator's engine metrics.
//!
//! This module holds the options, the objects' setup and the readings; [`watch`] is the
//! harness's own watch of the objects, [`engine`] reads the operator's `/metrics`, [`report`]
//! writes the markdown and checks the per-object limits, [`record`] writes it into a file.

pub mod engine;
pub mod record;
pub mod report;
pub mod watch;

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{DeleteParams, DynamicObject, ListParams, ObjectMeta, PostParams};
use kube::{Api, Client};
use kube_fsm_testkit::cluster;
use kube_fsm_testkit::prometheus::Requests;
use serde_json::json;

use crate::example::BoxError;
use engine::Engine;

/// The options of `api-economy`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// How many Databases.
    pub objects: usize,
    /// Where (must hold no Databases).
    pub namespace: String,
    /// How long to idle after convergence.
    pub idle: Duration,
    /// How long all objects may take to reach Running (and each later wait).
    pub timeout: Duration,
    /// Update this markdown file with the results (atomically).
    pub record: Option<String>,
    /// The command line to record.
    pub command: String,
}

/// The usage line.
pub const USAGE: &str = "usage: api-economy [--objects N] [--namespace NS] [--idle SECS] \
                         [--timeout SECS] [--record FILE]";

impl Options {
    /// Parses `--flag value` arguments (without the program name); `command` is the command
    /// line to record.
    ///
    /// # Errors
    /// On an unknown flag, a missing value or a value that is not a whole number.
    pub fn parse(args: impl IntoIterator<Item = String>, command: String) -> Result<Self, String> {
        let mut options = Options {
            objects: 200,
            namespace: "kube-fsm-bench".into(),
            idle: Duration::from_secs(30),
            timeout: Duration::from_secs(300),
            record: None,
            command,
        };
        let mut args = args.into_iter();
        while let Some(flag) = args.next() {
            let value = args.next().ok_or(format!("{flag} needs a value"))?;
            let number = || {
                value
                    .parse::<u64>()
                    .map_err(|_| format!("{flag} takes a whole number, not {value:?}"))
            };
            match flag.as_str() {
                "--objects" => {
                    options.objects = usize::try_from(number()?).map_err(|e| e.to_string())?;
                }
                "--namespace" => options.namespace.clone_from(&value),
                "--idle" => options.idle = Duration::from_secs(number()?),
                "--timeout" => options.timeout = Duration::from_secs(number()?),
                "--record" => options.record = Some(value),
                other => return Err(format!("unknown option {other}")),
            }
        }
        Ok(options)
    }

    /// The arguments of `example-operator` (besides `--metrics-addr`).
    #[must_use]
    pub fn operator_args(&self) -> Vec<String> {
        ["--namespace", &self.namespace, "--events", "all"]
            .map(str::to_owned)
            .to_vec()
    }
}

/// The label selector of the example's children (`MANAGED_BY` in `examples/src/database.rs`).
pub const CHILD_SELECTOR: &str = "app.kubernetes.io/managed-by=kube-fsm-examples";

/// Creates `namespace` unless it exists.
///
/// # Errors
/// When the API server refuses it.
pub async fn ensure_namespace(client: &Client, namespace: &str) -> Result<(), BoxError> {
    let object = Namespace {
        metadata: ObjectMeta {
            name: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &object)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.is_already_exists() => Ok(()),
        Err(err) => Err(err.into()),
    }
}

/// The name of the `index`-th object of a run of `count`, zero-padded so that they sort.
#[must_use]
pub fn object_name(index: usize, count: usize) -> String {
    let width = count.saturating_sub(1).max(1).to_string().len();
    format!("db-{index:0width$}")
}

fn databases(client: &Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &cluster::example_databases())
}

/// Creates `count` Databases (version 16, one replica), `parallel` requests at a time.
///
/// # Errors
/// When a create fails (an existing object is kept).
pub async fn create_databases(
    client: &Client,
    namespace: &str,
    count: usize,
    parallel: usize,
) -> Result<(), BoxError> {
    let api = databases(client, namespace);
    stream::iter(0..count)
        .map(|i| {
            let api = api.clone();
            async move {
                let mut db =
                    DynamicObject::new(&object_name(i, count), &cluster::example_databases());
                db.data = json!({ "spec": { "version": "16", "replicas": 1 } });
                match api.create(&PostParams::default(), &db).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(status)) if status.is_already_exists() => Ok(()),
                    Err(err) => Err(err),
                }
            }
        })
        .buffer_unordered(parallel.max(1))
        .try_collect::<()>()
        .await?;
    Ok(())
}

/// Deletes every Database of `namespace` with one request (their finalizer keeps them until
/// the operator has cleaned up).
///
/// # Errors
/// When the API server refuses it.
pub async fn delete_databases(client: &Client, namespace: &str) -> Result<(), BoxError> {
    databases(client, namespace)
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await?;
    Ok(())
}

/// How many of the example's children (ConfigMaps with its label) `namespace` holds.
///
/// # Errors
/// When they cannot be listed.
pub async fn count_children(client: &Client, namespace: &str) -> Result<usize, BoxError> {
    let list = Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .list_metadata(&ListParams::default().labels(CHILD_SELECTOR))
        .await?;
    Ok(list.items.len())
}

/// Everything read at one instant.
#[derive(Clone, Debug)]
pub struct Reading {
    /// When.
    pub at: Instant,
    /// The API server's request counters.
    pub requests: Requests,
    /// The engine's counters, summed over the operator processes so far.
    pub engine: Engine,
    /// Status changes the harness's watch has seen.
    pub status_changes: u64,
}

/// One measured window: what happened between two readings.
#[derive(Clone, Debug)]
pub struct Window {
    /// The column's name.
    pub name: &'static str,
    /// Requests the API server served.
    pub requests: Requests,
    /// What the engine counted.
    pub engine: Engine,
    /// Status changes the watch saw.
    pub status_changes: u64,
    /// How long it lasted.
    pub seconds: f64,
}

impl Window {
    /// The window `name` from `from` to `to`.
    #[must_use]
    pub fn between(name: &'static str, from: &Reading, to: &Reading) -> Self {
        Window {
            name,
            requests: &to.requests - &from.requests,
            engine: &to.engine - &from.engine,
            status_changes: to.status_changes - from.status_changes,
            seconds: (to.at - from.at).as_secs_f64(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn parses_options_with_the_old_defaults() {
        let options = Options::parse(args("--idle 5 --record B.md"), "cmd".into()).expect("parses");
        assert_eq!(
            (
                options.objects,
                options.namespace.as_str(),
                options.idle,
                options.timeout
            ),
            (
                200,
                "kube-fsm-bench",
                Duration::from_secs(5),
                Duration::from_secs(300)
            )
        );
        assert_eq!(options.record.as_deref(), Some("B.md"));
        assert_eq!(
            options.operator_args(),
            ["--namespace", "kube-fsm-bench", "--events", "all"]
        );
        assert_eq!(
            Options::parse(args("--objects many"), String::new()),
            Err("--objects takes a whole number, not \"many\"".into())
        );
        assert!(Options::parse(args("--objects"), String::new()).is_err());
        assert!(Options::parse(args("--frobnicate 1"), String::new()).is_err());
    }

    #[test]
    fn names_sort_in_creation_order() {
        assert_eq!(object_name(3, 5), "db-3");
        assert_eq!(object_name(7, 200), "db-007");
        assert_eq!(object_name(199, 200), "db-199");
        assert_eq!(object_name(0, 1), "db-0");
    }
}
