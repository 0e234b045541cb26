//! `demo`: install the CRDs, create N Databases, run the operator in-process, print each
//! transition as the API server stores it while their StatefulSets' pods become ready, take
//! a node away and bring one back, run two migrations as Jobs, and clean up.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use kube::Client;

use kube_fsm_examples::database::{self, DatabasePhase, DatabaseStatus};
use kube_fsm_examples::migration;
use kube_fsm_testkit::operator::Running;

use crate::tracker::{Snapshot, Tracker};
use crate::{BoxError, cluster, node_loss, webhook};

/// Options of `demo`.
#[derive(Clone, Debug)]
pub struct DemoOptions {
    /// Serve and register the admission webhook, and show it refusing an illegal patch.
    pub webhook: bool,
    /// How many Databases to create.
    pub objects: usize,
    /// How many replicas each runs (one per node).
    pub replicas: u32,
    /// Where to create them.
    pub namespace: String,
    /// How long all of them may take to reach Running.
    pub timeout: Duration,
    /// Leave the objects (and the CRD) in place at the end.
    pub keep: bool,
    /// The operator runs already (the process's Manager runs both machines).
    pub shared: bool,
}

/// Runs the demo; exits 0 when every object reached Running and was cleaned up.
pub async fn run(options: DemoOptions) -> Result<ExitCode, BoxError> {
    let start = Instant::now();
    let client = cluster::client().await?;
    let server = client.apiserver_version().await?;
    let ns = options.namespace.as_str();
    let nodes = cluster::schedulable_nodes(&client).await?;
    println!(
        "kube-fsm demo: {} Databases of {} replica(s) in namespace {ns} (Kubernetes {}.{}, {nodes} node(s))",
        options.objects, options.replicas, server.major, server.minor
    );
    if nodes < options.replicas as usize {
        return Err(format!(
            "the cluster has {nodes} node(s) that take pods, and each Database runs one replica \
             per node: with fewer than {} its pods never all run (scripts/demo starts a local \
             control plane with 3 simulated nodes when no cluster is configured; or pass \
             --replicas {nodes})",
            options.replicas
        )
        .into());
    }
    cluster::install_crd(&client, database::crd()).await?;
    cluster::install_crd(&client, migration::crd()).await?;
    cluster::ensure_namespace(&client, ns).await?;
    println!(
        "CRD databases.example.kube-fsm.dev is Established; starting the operator\n\
         machine: Pending -Accept-> Provisioning -when PodsReady && ServiceAvailable-> Running \
         -when !PodsReady-> Degraded; each Database owns a StatefulSet, its headless Service and \
         a credentials Secret, and its conditions come from their status"
    );

    let webhook = if options.webhook {
        let (name, addr) = webhook::start(&client).await?;
        println!(
            "admission webhook {name} registered at https://{addr} (failurePolicy Fail): the API \
             server checks every status write, the operator's too"
        );
        Some(name)
    } else {
        None
    };

    let tracker = Tracker::start(&client, ns, true, start);
    if tokio::time::timeout(options.timeout, tracker.listed())
        .await
        .is_err()
    {
        println!("the watch of Databases has not listed yet; creating them anyway");
    }
    let operator = (!options.shared).then(|| {
        Running::manager(
            kube_fsm::Manager::new(client.clone())
                .machine(database::operator(client.clone(), Some(ns)))
                .machine(migration::operator(client.clone(), Some(ns))),
        )
    });
    cluster::create_databases(&client, ns, options.objects, options.replicas, 16).await?;

    let mut snapshots = tracker.snapshots.clone();
    let all_running = snapshots.wait_for(|s| s.count(DatabasePhase::Running) >= options.objects);
    let outcome = tokio::select! {
        done = tokio::time::timeout(options.timeout, all_running) => match done {
            Ok(Ok(_)) => Outcome::AllRunning,
            Ok(Err(_)) => Outcome::TrackerStopped,
            Err(_) => Outcome::TimedOut,
        },
        _ = tokio::signal::ctrl_c() => Outcome::Interrupted,
    };
    let snapshot = tracker.snapshot();
    print_table(&snapshot);
    let mut code = match outcome {
        Outcome::AllRunning => {
            println!(
                "all {} Databases Running after {:.2} s ({} status writes observed, {} per object)",
                options.objects,
                start.elapsed().as_secs_f64(),
                snapshot.status_changes,
                ratio(snapshot.status_changes, options.objects),
            );
            match day_two(&client, ns, &options, &tracker, webhook.is_some()).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(err) => {
                    eprintln!("error: {err}");
                    ExitCode::FAILURE
                }
            }
        }
        Outcome::TimedOut => {
            eprintln!(
                "error: not every Database reached Running within {:?}: {}",
                options.timeout,
                snapshot.summary()
            );
            ExitCode::FAILURE
        }
        Outcome::TrackerStopped => {
            eprintln!("error: the watch of Databases ended");
            ExitCode::FAILURE
        }
        Outcome::Interrupted => {
            eprintln!("interrupted");
            ExitCode::from(130)
        }
    };

    if options.keep {
        println!("--keep: leaving the Databases and the operator's children in {ns}");
    } else if let Err(err) = clean_up(&client, ns, &tracker).await {
        eprintln!("error: cleanup failed: {err}");
        code = ExitCode::FAILURE;
    }
    if let Some(operator) = operator {
        operator.stop().await;
    }
    tracker.stop();
    if let Some(name) = webhook
        && let Err(err) = webhook::unregister(&client, &name).await
    {
        eprintln!("error: unregistering the admission webhook {name}: {err}");
        code = ExitCode::FAILURE;
    }
    Ok(code)
}

/// Once every Database runs: the webhook's refusal (with `--webhook`), a node taken away and
/// one back, and two migrations.
async fn day_two(
    client: &Client,
    ns: &str,
    options: &DemoOptions,
    tracker: &Tracker,
    webhook: bool,
) -> Result<(), BoxError> {
    let first = cluster::object_name(0, options.objects);
    if webhook {
        illegal_patch_is_refused(client, ns, &first).await?;
    }
    node_loss::run(client, ns, &first, tracker, options.timeout).await?;
    crate::migration::run(client, ns, options.timeout).await
}

/// What `kubectl patch --subresource=status --dry-run=server` of a move the machine has no
/// edge for gets from the API server with the webhook registered: a refusal naming both
/// phases. (A configuration reaches the API server a moment after it is written: retried for
/// up to 10 s.)
async fn illegal_patch_is_refused(client: &Client, ns: &str, name: &str) -> Result<(), BoxError> {
    use kube::api::{Api, Patch, PatchParams};
    let api: Api<database::Database> = Api::namespaced(client.clone(), ns);
    let params = PatchParams {
        dry_run: true,
        field_manager: Some("kubectl-edit".into()),
        ..PatchParams::default()
    };
    let patch = Patch::Merge(serde_json::json!({ "status": { "phase": "Pending" } }));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match api.patch_status(name, &params, &patch).await {
            Err(kube::Error::Api(status)) if status.code == 422 => {
                println!(
                    "an illegal status patch of {name} (Running -> Pending) is refused by the API server:\n  {}",
                    status.message
                );
                return Ok(());
            }
            Err(err) => return Err(err.into()),
            Ok(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await
            }
            Ok(_) => {
                return Err(
                    "the API server admitted Running -> Pending: the webhook is not called".into(),
                );
            }
        }
    }
}

enum Outcome {
    AllRunning,
    TimedOut,
    TrackerStopped,
    Interrupted,
}

/// Deletes the Databases while the operator still runs (it removes their finalizer), waits
/// until they are gone, and until the garbage collector has taken their workloads.
async fn clean_up(client: &Client, ns: &str, tracker: &Tracker) -> Result<(), BoxError> {
    println!(
        "deleting the Databases; the garbage collector takes their StatefulSets, Services, Secrets and pods"
    );
    cluster::delete_databases(client, ns).await?;
    let mut snapshots = tracker.snapshots.clone();
    tokio::time::timeout(
        Duration::from_secs(60),
        snapshots.wait_for(|s| s.objects.is_empty()),
    )
    .await
    .map_err(|_| "Databases still present 60 s after deletion")??;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let children = cluster::count_children(client, ns).await?;
        if children == 0 {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{children} StatefulSets, Services or Secrets of the Databases are left 60 s \
                 after them: does this cluster run a garbage collector?"
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    println!("all Databases and their workloads are gone; stopping the operator");
    Ok(())
}

fn ratio(count: u64, objects: usize) -> String {
    #[allow(clippy::cast_precision_loss)]
    let per = count as f64 / objects.max(1) as f64;
    format!("{per:.2}")
}

fn print_table(snapshot: &Snapshot) {
    let width = snapshot
        .objects
        .keys()
        .map(String::len)
        .max()
        .unwrap_or(4)
        .max(4);
    println!(
        "{:width$}  {:12}  {:9}  {:16}  MESSAGE",
        "NAME", "PHASE", "PODSREADY", "SERVICEAVAILABLE"
    );
    for (name, status) in &snapshot.objects {
        let phase = status
            .as_ref()
            .and_then(|s| s.machine.phase.as_ref())
            .map_or_else(|| "-".to_owned(), ToString::to_string);
        let condition = |type_: &str| {
            condition(status.as_ref(), type_).map_or(("-".to_owned(), String::new()), |c| {
                (c.status.clone(), c.message.clone())
            })
        };
        let (pods, _) = condition("PodsReady");
        let (service, message) = condition("ServiceAvailable");
        println!("{name:width$}  {phase:12}  {pods:9}  {service:16}  {message}");
    }
}

fn condition<'a>(
    status: Option<&'a DatabaseStatus>,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    status?.machine.condition(type_)
}
