//! The chaos run: two kinds — `Database`, and `InlineDatabase` (the same machine under another
//! kind, half as many objects) — driven by operator replicas that each run both machines in one
//! `Manager` (one Lease or one shard set for both), against the real API server, under faults,
//! with an independent observer of both kinds.
//!
//! ```text
//! cargo run --release -p kube-fsm-benches --bin chaos -- [--objects 1000] [--namespaces 20]
//!     [--faults 300] [--converge-limit 180] [--server-faults] [--sharded] [--webhook]
//! ```
//!
//! With `--sharded`: three replicas share 12 shards instead of electing a leader, each handler
//! step takes 1.5 s (longer than the 1 s grace a shard given up leaves its reconciles), and
//! every 15–30 s one replica is killed mid-handler or leaves gracefully (SIGTERM's path: it
//! gives its shards up) and a new one joins. Half-way through the faults the shard count
//! changes from 12 to 8 as a rolling update does it: the replicas are replaced one by one by
//! replicas of the new count, old and new running side by side meanwhile. The handlers record
//! which replica steps which object: two replicas stepping one object at once is a violation,
//! and so is an object left without the label of its shard of the final count once the run
//! has converged.
//!
//! For `--faults` seconds: every request of the replicas may be delayed, refused (429 with
//! Retry-After, 503), answered with 500 after it landed, or reset (before or after the server
//! saw it); watches stall or drop; the leader is killed (its task aborted: it releases nothing,
//! its memory is gone) every 15–30 s and a new replica started; replicas that stop on a lost
//! Lease are restarted. With `--server-faults` (needs `scripts/envtest`), the API server is
//! restarted with etcd kept, and etcd is compacted (watches then meet 410 Gone and relist).
//! External writers meanwhile make legal and illegal status edits, change specs, delete objects
//! in every phase, and create objects with an undeclared phase (corrected once faults stop).
//! Then faults stop and the run waits until every object is where its handlers lead.
//!
//! With `--webhook`: the machine's admission webhook is served (in this process, behind a
//! proxy) and registered under `Fail` for the run's namespaces; 10–20 s into the faults and
//! then every 20–40 s it goes away for 5–15 s (every status write of the kind is refused meanwhile, the operator's
//! and the writers'). Its invariant: no move that is not an edge is admitted, whoever writes.
//!
//! Each replica sends its identity as its User-Agent; with the API server's audit log
//! (`KUBE_FSM_AUDIT_LOG`, which `scripts/envtest env` sets) every write that landed on an
//! object of either kind is attributed to its replica, and a write landing while another replica stepped
//! the same object is a violation. Without the log that check is skipped, and the report
//! says so.
//!
//! Prints the invariants as counts and exits non-zero if any is violated.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client};
use kube_fsm::admission::FailurePolicy;
use kube_fsm::replicas::{LeaderElection, Sharding};
use kube_fsm::{Manager, Operator, StateMachine, Stopped};
use kube_fsm_benches::chaos::checker::{Observer, declared};
use kube_fsm_benches::chaos::faults::{FaultLayer, FaultPlan};
use kube_fsm_benches::chaos::writers::{Expect, LABEL, WRITER, act, new_db, unconverged};
use kube_fsm_benches::chaos::{ChaosHandler, audit};
use kube_fsm_testkit::metrics::Recorded;
use kube_fsm_testkit::resources::{Database, InlineDatabase, InlineDatabaseSpec, sample};
use kube_fsm_testkit::{admission, cluster};
use serde_json::json;
use tokio::task::JoinHandle;
use tracing::Instrument;

const OPERATOR: &str = "kube-fsm-chaos";

#[derive(Debug)]
struct Options {
    objects: usize,
    namespaces: usize,
    faults: Duration,
    converge_limit: Duration,
    server_faults: bool,
    sharded: bool,
    webhook: bool,
}

const SHARDS: u32 = 12;
/// The shard count after the rolling change half-way through the faults.
const RESHARDED: u32 = 8;
use audit::SHARD_LABEL;

fn options() -> Result<Options, String> {
    let mut options = Options {
        objects: 1_000,
        namespaces: 20,
        faults: Duration::from_secs(300),
        converge_limit: Duration::from_secs(180),
        server_faults: false,
        sharded: false,
        webhook: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut number = |name: &str| -> Result<u64, String> {
            args.next()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{name} takes a number"))
        };
        match arg.as_str() {
            "--objects" => {
                options.objects =
                    usize::try_from(number("--objects")?).map_err(|e| e.to_string())?
            }
            "--namespaces" => {
                options.namespaces = usize::try_from(number("--namespaces")?)
                    .map_err(|e| e.to_string())?
                    .max(1);
            }
            "--faults" => options.faults = Duration::from_secs(number("--faults")?),
            "--converge-limit" => {
                options.converge_limit = Duration::from_secs(number("--converge-limit")?)
            }
            "--server-faults" => options.server_faults = true,
            "--sharded" => options.sharded = true,
            "--webhook" => options.webhook = true,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(options)
}

/// Everything a replica needs; replicas come and go, these stay.
#[derive(Clone)]
struct Shared {
    config: kube::Config,
    plan: Arc<FaultPlan>,
    handler: ChaosHandler,
    metrics: kube_fsm::metrics::Metrics,
    run: String,
    lease_ns: String,
    sharded: bool,
    /// The shard count new replicas get (it changes half-way, as a rolling update does).
    shards: Arc<AtomicU32>,
}

struct Replica {
    identity: String,
    task: JoinHandle<Stopped>,
    /// Stops it gracefully (as SIGTERM does).
    stop: tokio::sync::oneshot::Sender<()>,
}

fn spawn_replica(shared: &Shared, n: usize) -> Replica {
    let identity = format!("replica-{n}");
    // Its identity as its User-Agent: the API server's audit log attributes its writes.
    let mut config = shared.config.clone();
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_str(&format!("{}{identity}", audit::AGENT)).expect("ASCII"),
    ));
    let client = kube::client::ClientBuilder::try_from(config)
        .expect("client")
        .with_layer(&FaultLayer(shared.plan.clone()))
        .build();
    let selector = format!("{LABEL}={}", shared.run);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let handler = shared.handler.in_replica(&identity);
    let databases = Operator::<Database, _>::new(client.clone(), handler.clone())
        .watcher_config(watcher::Config::default().labels(&selector))
        .field_manager(OPERATOR)
        .reporter(identity.clone());
    let inline = Operator::<InlineDatabase, _>::new(client.clone(), handler)
        .watcher_config(watcher::Config::default().labels(&selector))
        .field_manager(OPERATOR)
        .reporter(identity.clone());
    let manager = Manager::new(client)
        .machine(databases)
        .machine(inline)
        .record_into(&shared.metrics)
        .shutdown_on(async move {
            let _ = stopped.await;
        });
    let manager = if shared.sharded {
        manager.replicas(
            Sharding::new(
                "chaos",
                shared.lease_ns.clone(),
                shared.shards.load(Ordering::SeqCst),
            )
            .identity(identity.clone())
            .duration(Duration::from_secs(6))
            .renew_deadline(Duration::from_secs(4))
            .retry_period(Duration::from_secs(1)),
        )
    } else {
        manager.replicas(
            LeaderElection::new(format!("chaos-{}", shared.run), shared.lease_ns.clone())
                .identity(identity.clone())
                .duration(Duration::from_secs(6))
                .renew_deadline(Duration::from_secs(4))
                .retry_period(Duration::from_secs(1)),
        )
    };
    // Its log lines name it (RUST_LOG=kube_fsm=info shows who acquired and released what).
    let task = tokio::spawn(
        manager
            .run()
            .instrument(tracing::info_span!("replica", id = %identity)),
    );
    Replica {
        identity,
        task,
        stop,
    }
}

fn envtest(command: &str) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/envtest");
    match std::process::Command::new(script).arg(command).status() {
        Ok(status) if status.success() => {}
        other => eprintln!("chaos: scripts/envtest {command} failed: {other:?}"),
    }
}

/// The run's objects (of both kinds) without the label of their shard of `shards` (as FNV-1a
/// of their UID gives it).
async fn unlabelled(client: &Client, run: &str, shards: u32) -> usize {
    let selector = kube::api::ListParams::default().labels(&format!("{LABEL}={run}"));
    let (databases, inline) = (
        Api::<Database>::all(client.clone()),
        Api::<InlineDatabase>::all(client.clone()),
    );
    let both = futures::future::join(
        databases.list_metadata(&selector),
        inline.list_metadata(&selector),
    );
    let (Ok(databases), Ok(inline)) = both.await else {
        return usize::MAX;
    };
    let metadata = databases.items.iter().map(|o| &o.metadata);
    metadata
        .chain(inline.items.iter().map(|o| &o.metadata))
        .filter(|metadata| {
            let uid = metadata.uid.clone().unwrap_or_default();
            let shard = kube_fsm::replicas::shard_of(&uid, shards);
            metadata.labels.as_ref().and_then(|l| l.get(SHARD_LABEL)) != Some(&shard.to_string())
        })
        .count()
}

/// The run's InlineDatabases not Running (nobody but the operator writes them).
async fn inline_unconverged(client: &Client, run: &str) -> Result<Vec<String>, kube::Error> {
    let selector = kube::api::ListParams::default().labels(&format!("{LABEL}={run}"));
    let listed = Api::<InlineDatabase>::all(client.clone())
        .list(&selector)
        .await?;
    Ok(listed
        .items
        .iter()
        .filter_map(|object| {
            let phase = object.machine_status().and_then(|m| m.phase.as_ref());
            let phase = phase.map(|p| p.as_str().to_owned());
            (phase.as_deref() != Some("Running")).then(|| {
                let name = object.metadata.name.as_deref().unwrap_or_default();
                format!("InlineDatabase {name} is {phase:?}")
            })
        })
        .collect())
}

/// Creates `count` objects, `make(i, namespace)`, spread over `namespaces`, 50 at a time;
/// returns how many the API server took.
async fn create_all<K>(
    client: &Client,
    namespaces: &[String],
    count: usize,
    make: impl Fn(usize, &str) -> K,
) -> usize
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let mut created = 0;
    for start in (0..count).step_by(50) {
        let batch = (start..(start + 50).min(count)).map(|i| {
            let ns = &namespaces[i % namespaces.len()];
            let api: Api<K> = Api::namespaced(client.clone(), ns);
            let object = make(i, ns);
            async move { api.create(&PostParams::default(), &object).await.is_ok() }
        });
        let results = futures::future::join_all(batch).await;
        created += results.into_iter().filter(|ok| *ok).count();
    }
    created
}

async fn holder(leases: &Api<Lease>, name: &str) -> Option<String> {
    leases.get(name).await.ok()?.spec?.holder_identity
}

#[tokio::main]
async fn main() {
    let options = match options() {
        Ok(options) => options,
        Err(err) => {
            eprintln!("chaos: {err}");
            std::process::exit(2);
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error")),
        )
        .with_writer(std::io::stderr)
        .init();
    let panics = Arc::new(AtomicU64::new(0));
    {
        let panics = panics.clone();
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            panics.fetch_add(1, Ordering::SeqCst);
            default(info);
        }));
    }
    let config = kube::Config::infer()
        .await
        .expect("a kubeconfig (scripts/envtest env)");
    let client = Client::try_from(config.clone()).expect("client");
    kube_fsm_testkit::cluster::install_crds(&client).await;
    kube_fsm_testkit::cluster::install_crd(&client, kube_fsm::crd::<InlineDatabase>()).await;
    // The CRD as an older version of the operator installed it (no phase enum), so that objects
    // with a phase of an older spec can exist.
    kube_fsm_testkit::cluster::install_crd(
        &client,
        kube_fsm_testkit::cluster::older_spec_crd(kube_fsm::crd::<Database>()),
    )
    .await;
    let run = format!("{:06x}", fastrand::u32(..0x00ff_ffff));
    // The run's namespaces carry its label: the webhook is registered for them alone.
    let mut namespaces = Vec::new();
    for _ in 0..options.namespaces {
        let name = cluster::fresh_name(&format!("chaos-{run}"));
        cluster::create_namespace(&client, &name, [(LABEL.to_owned(), run.clone())].into()).await;
        namespaces.push(name);
    }
    eprintln!("chaos {run}: {options:?}");
    let webhook = if options.webhook {
        Some(
            admission::serve_behind_proxy(
                &client,
                &namespaces[0],
                (LABEL, &run),
                sample(admission::PROBE),
                kube_fsm::admission::Policy::default(),
                FailurePolicy::Fail,
            )
            .await,
        )
    } else {
        None
    };

    let observer = Arc::new(Observer::default());
    let observed = watcher::Config::default().labels(&format!("{LABEL}={run}"));
    let watch = tokio::spawn(futures::future::join(
        observer.clone().run(
            Api::<Database>::all(client.clone()),
            observed.clone(),
            OPERATOR.to_owned(),
        ),
        observer.clone().run(
            Api::<InlineDatabase>::all(client.clone()),
            observed,
            OPERATOR.to_owned(),
        ),
    ));
    let recorded = Recorded::default();
    let shared = Shared {
        config,
        plan: Arc::new(FaultPlan::chaos()),
        handler: ChaosHandler::new(
            observer.clone(),
            Duration::from_millis(if options.sharded { 1_500 } else { 0 }),
        ),
        metrics: recorded.metrics().clone(),
        run: run.clone(),
        lease_ns: namespaces[0].clone(),
        sharded: options.sharded,
        shards: Arc::new(AtomicU32::new(SHARDS)),
    };
    let mut next_replica = 0;
    let mut replicas: Vec<Replica> = (0..if options.sharded { 3 } else { 2 })
        .map(|_| {
            next_replica += 1;
            spawn_replica(&shared, next_replica)
        })
        .collect();

    // Objects, created while faults are already on.
    shared.plan.on.store(true, Ordering::SeqCst);
    let started = Instant::now();
    let mut created = create_all(&client, &namespaces, options.objects, |i, ns| {
        new_db(&format!("db-{i}"), ns, &run)
    })
    .await;
    // The second kind: half as many, written by nobody but the operator.
    let inline_objects = options.objects / 2;
    created += create_all(&client, &namespaces, inline_objects, |i, _| {
        let mut object = InlineDatabase::new(&format!("inline-{i}"), InlineDatabaseSpec {});
        object.metadata.labels = Some([(LABEL.to_owned(), run.clone())].into());
        object
    })
    .await;
    eprintln!(
        "chaos {run}: created {created} objects of two kinds in {:?}",
        started.elapsed()
    );

    // The fault phase.
    let leases: Api<Lease> = Api::namespaced(client.clone(), &namespaces[0]);
    let lease = format!("chaos-{run}");
    let mut expect = Expect::default();
    let mut serial = 0;
    let mut kills = 0;
    let mut leaves = 0;
    let mut restarts_after_loss = 0;
    let mut server_restarts = 0;
    let mut compactions = 0;
    let mut next_kill = Instant::now() + Duration::from_secs(15 + fastrand::u64(..15));
    let mut last_requests = shared.plan.requests.load(Ordering::Relaxed);
    let mut max_rate = 0u64;
    let mut busiest = (String::new(), 0.0f64);
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let fault_start = Instant::now();
    let milestones = [
        options.faults / 4,
        options.faults / 2,
        options.faults * 3 / 4,
    ];
    let mut milestone = 0;
    // Webhook outages: when the next starts, and when the one under way ends.
    let mut next_outage = Instant::now() + Duration::from_secs(10 + fastrand::u64(..10));
    let mut outage_ends: Option<Instant> = None;
    let mut outages = 0;
    let mut webhook_down = Duration::ZERO;
    // The rolling change of the shard count: replicas still to replace, and when the next goes.
    let mut to_reshard = 0usize;
    let mut next_reshard = Instant::now();
    let mut resharded = 0;
    let actions_per_tick = (options.objects as f64 / 4.0) / (options.faults.as_secs_f64() * 4.0);
    let mut owed_actions = 0.0;
    let mut last_sample = Instant::now();
    while fault_start.elapsed() < options.faults {
        tick.tick().await;
        owed_actions += actions_per_tick;
        while owed_actions >= 1.0 {
            owed_actions -= 1.0;
            act(&client, &run, &namespaces, &mut expect, &mut serial).await;
        }
        if last_sample.elapsed() >= Duration::from_secs(1) {
            let requests = shared.plan.requests.load(Ordering::Relaxed);
            let rate = (requests - last_requests) as f64 / last_sample.elapsed().as_secs_f64();
            max_rate = max_rate.max(rate as u64);
            if let Some((object, count)) = shared.plan.busiest() {
                let rate = count as f64 / last_sample.elapsed().as_secs_f64();
                if rate > busiest.1 {
                    busiest = (object, rate);
                }
            }
            last_requests = requests;
            last_sample = Instant::now();
        }
        // Replicas that stopped (a lost Lease) are restarted, as Kubernetes restarts a Pod.
        for replica in &mut replicas {
            if replica.task.is_finished() {
                restarts_after_loss += 1;
                next_replica += 1;
                *replica = spawn_replica(&shared, next_replica);
            }
        }
        if Instant::now() >= next_kill {
            next_kill = Instant::now() + Duration::from_secs(15 + fastrand::u64(..15));
            if options.sharded {
                // One replica goes, killed mid-handler or gracefully, and a new one joins.
                let at = fastrand::usize(..replicas.len());
                next_replica += 1;
                let gone =
                    std::mem::replace(&mut replicas[at], spawn_replica(&shared, next_replica));
                if fastrand::bool() {
                    gone.task.abort();
                    kills += 1;
                } else {
                    let _ = gone.stop.send(());
                    leaves += 1;
                }
            } else if let Some(leader) = holder(&leases, &lease).await
                && let Some(replica) = replicas.iter_mut().find(|r| r.identity == leader)
            {
                replica.task.abort();
                kills += 1;
                next_replica += 1;
                *replica = spawn_replica(&shared, next_replica);
            }
        }
        if options.sharded
            && resharded == 0
            && to_reshard == 0
            && fault_start.elapsed() >= options.faults / 2
        {
            shared.shards.store(RESHARDED, Ordering::SeqCst);
            to_reshard = replicas.len();
        }
        if to_reshard > 0 && Instant::now() >= next_reshard {
            // One old replica leaves gracefully and one of the new count takes its place.
            to_reshard -= 1;
            resharded += 1;
            next_replica += 1;
            let gone = std::mem::replace(
                &mut replicas[to_reshard],
                spawn_replica(&shared, next_replica),
            );
            let _ = gone.stop.send(());
            next_reshard = Instant::now() + Duration::from_secs(3);
        }
        if let Some((_, proxy)) = &webhook {
            match outage_ends {
                Some(end) if Instant::now() >= end => {
                    proxy.heal();
                    outage_ends = None;
                    next_outage = Instant::now() + Duration::from_secs(20 + fastrand::u64(..20));
                }
                None if Instant::now() >= next_outage => {
                    let length = Duration::from_secs(5 + fastrand::u64(..10));
                    proxy.down();
                    outages += 1;
                    webhook_down += length;
                    outage_ends = Some(Instant::now() + length);
                }
                _ => {}
            }
        }
        if options.server_faults
            && milestone < milestones.len()
            && fault_start.elapsed() >= milestones[milestone]
        {
            if milestone == 1 {
                envtest("restart-apiserver");
                server_restarts += 1;
            } else {
                envtest("compact");
                compactions += 1;
            }
            milestone += 1;
        }
    }
    shared.plan.on.store(false, Ordering::SeqCst);
    if let Some((_, proxy)) = &webhook {
        proxy.heal();
    }
    let faults_stopped = Instant::now();
    // Objects of an older spec, held meanwhile, are corrected by hand.
    let params = PatchParams {
        field_manager: Some(WRITER.into()),
        ..PatchParams::default()
    };
    for (ns, name) in &expect.undeclared {
        let api: Api<Database> = Api::namespaced(client.clone(), ns);
        let held = api.get_opt(name).await.ok().flatten();
        if let Some(db) = held {
            let phase = db
                .status
                .as_ref()
                .and_then(|s| s.machine.phase.as_ref())
                .map(|p| p.as_str().to_owned());
            if phase.as_deref().is_some_and(|p| !declared(p)) {
                let _ = api
                    .patch_status(
                        name,
                        &params,
                        &Patch::Merge(&json!({ "status": { "phase": "Pending" } })),
                    )
                    .await;
            }
        }
    }

    // Convergence.
    let mut left = Vec::new();
    let mut converged = None;
    while faults_stopped.elapsed() < options.converge_limit {
        let both = futures::future::join(
            unconverged(&client, &run, &expect),
            inline_unconverged(&client, &run),
        );
        let now = match both.await {
            (Ok(mut databases), Ok(inline)) => Ok({
                databases.extend(inline);
                databases
            }),
            (Err(err), _) | (_, Err(err)) => Err(err),
        };
        match now {
            Ok(now) if now.is_empty() => {
                converged = Some(faults_stopped.elapsed());
                break;
            }
            Ok(now) => left = now,
            Err(err) => eprintln!("chaos: list failed: {err}"),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Idle: nothing more is written once converged.
    let moves_before = observer.findings().operator_moves;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let idle_moves = observer.findings().operator_moves - moves_before;
    // With sharding, every object carries the label of its shard of the final count within
    // 60 s after the faults stopped (an object of an old shard moves once that shard's Lease,
    // held by a killed replica of the old count, has expired).
    let mut unlabelled_left = 0;
    if options.sharded {
        loop {
            unlabelled_left = unlabelled(&client, &run, shared.shards.load(Ordering::SeqCst)).await;
            if unlabelled_left == 0 || faults_stopped.elapsed() >= Duration::from_secs(60) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    let unlabelled = unlabelled_left;
    // The API server's record of every write: none by one replica while another stepped the
    // object.
    // Where scripts/test provisions the API server (and so its audit log), the audit check
    // must run, not score 0.
    let flag = |name: &str| std::env::var(name).is_ok_and(|v| v == "1");
    let audit_required = flag("KUBE_FSM_REQUIRE_CLUSTER") && !flag("KUBE_FSM_USE_EXISTING_CLUSTER");
    let audited = match std::env::var("KUBE_FSM_AUDIT_LOG") {
        Ok(path) => {
            let namespaces: std::collections::HashSet<String> =
                namespaces.iter().cloned().collect();
            let windows = shared
                .handler
                .active
                .lock()
                .expect("active")
                .windows
                .clone();
            match audit::writes(&path, &namespaces) {
                Ok(writes) => Some((audit::during_others_steps(&writes, &windows), writes)),
                Err(err) => {
                    eprintln!("chaos: cannot read the audit log {path}: {err}");
                    None
                }
            }
        }
        Err(_) => None,
    };
    for replica in &replicas {
        replica.task.abort();
    }
    watch.abort();
    if let Some((registration, _)) = webhook {
        registration.remove().await;
    }

    let findings = observer.findings();
    let overlaps = shared
        .handler
        .active
        .lock()
        .expect("active")
        .overlaps
        .clone();
    let runs = shared.handler.runs.lock().expect("runs").clone();
    let mut per_object: Vec<u64> = runs.values().copied().collect();
    per_object.sort_unstable();
    let max_runs = per_object.last().copied().unwrap_or(0);
    let p50_runs = per_object.get(per_object.len() / 2).copied().unwrap_or(0);
    let drift = recorded.sum("kube_fsm_drift_total", &[]);
    // Every new leader lists and reconciles every object once, so an object's handler runs grow
    // with leader changes (and relists); a hot loop would exceed this by far.
    // With sharding a replica that goes and one that joins each move shards: two handovers.
    let per_change = if options.sharded { 2 } else { 1 };
    let max_handler_runs = 10
        + 2 * (per_change * (kills + leaves + resharded) + restarts_after_loss + findings.relists);
    // A hot loop retries an object many times a second; the engine's backoff starts at 0.5 s.
    const MAX_RATE_PER_OBJECT: f64 = 10.0;
    let checks = [
        (
            "operator moves that are not edges",
            findings.illegal_operator_moves as f64,
            0.0,
        ),
        (
            "finalizers removed before cleanup said Done",
            findings.finalizer_before_cleanup as f64,
            0.0,
        ),
        (
            "objects not where their handlers lead (lost transitions, stuck finalizers)",
            left.len() as f64 * f64::from(u8::from(converged.is_none())),
            0.0,
        ),
        ("panics", panics.load(Ordering::SeqCst) as f64, 0.0),
        (
            "handler runs of the busiest object (limit: 10 + 2 per leader change, handover or relist)",
            max_runs as f64,
            max_handler_runs as f64,
        ),
        (
            "peak requests/s of the busiest object during faults",
            busiest.1,
            MAX_RATE_PER_OBJECT,
        ),
        ("operator phase writes while idle", idle_moves as f64, 0.0),
        (
            "objects stepped by two replicas at once",
            overlaps.len() as f64,
            0.0,
        ),
        (
            "objects without the label of their shard 60 s after the faults",
            unlabelled as f64,
            0.0,
        ),
        (
            "writes arriving at an object while another replica stepped it (the API server's audit log)",
            audited.as_ref().map_or(0, |(bad, _)| bad.len()) as f64,
            0.0,
        ),
        (
            "the audit log unread, or no write attributed to a replica (required when scripts/test provisions the API server)",
            f64::from(u8::from(
                audit_required && audited.as_ref().is_none_or(|(_, writes)| writes.is_empty()),
            )),
            0.0,
        ),
        (
            "moves by other writers that are not edges, admitted by the webhook",
            if options.webhook {
                findings.illegal_other_moves as f64
            } else {
                0.0
            },
            0.0,
        ),
    ];
    println!("\n## chaos run {run}\n");
    println!(
        "objects {created} (+{} created during the run) in {} namespaces; faults {:?}; {}",
        expect.actions.get("create").copied().unwrap_or(0)
            + expect
                .actions
                .get("create undeclared")
                .copied()
                .unwrap_or(0),
        options.namespaces,
        options.faults,
        if options.sharded {
            format!(
                "Databases and InlineDatabases ({inline_objects} of those) in one Manager per replica; 3 replicas sharing {SHARDS} shards, then {RESHARDED} (replicas replaced one by one: {resharded}), 1.5 s handler steps; replicas left gracefully {leaves}"
            )
        } else {
            format!(
                "Databases and InlineDatabases ({inline_objects} of those) in one Manager per replica; 2 replicas with leader election"
            )
        }
    );
    if options.webhook {
        println!(
            "admission webhook registered under Fail: {outages} outages, {webhook_down:?} down in all"
        );
    }
    match &audited {
        Some((_, writes)) => println!(
            "audit log: {} writes to the run's objects accepted from {} replicas",
            writes.len(),
            audit::writers(writes)
        ),
        None => println!(
            "audit log: NONE (KUBE_FSM_AUDIT_LOG unset or unreadable; scripts/envtest env sets it): writes NOT attributed to replicas"
        ),
    }
    println!(
        "requests {} (faults injected {}); leader kills {kills}; replicas restarted after a lost Lease {restarts_after_loss}; API-server restarts {server_restarts}; compactions {compactions}; observer relists {}",
        shared.plan.requests.load(Ordering::Relaxed),
        shared.plan.injected.load(Ordering::Relaxed),
        findings.relists
    );
    println!("external actions: {:?}", expect.actions);
    if !expect.refused.is_empty() {
        println!(
            "external actions refused: {:?} (last: {:?})",
            expect.refused, expect.last_error
        );
    }
    println!(
        "operator phase moves {} (other writers' {}, of which not edges {}); drift reported {drift}; handler runs {} (per object p50 {p50_runs}, max {max_runs}); peak {max_rate} requests/s in all, {:.0}/s for {}",
        findings.operator_moves,
        findings.other_moves,
        findings.illegal_other_moves,
        shared.handler.total.load(Ordering::Relaxed),
        busiest.1,
        busiest.0,
    );
    match converged {
        Some(took) => println!(
            "converged {took:.1?} after faults stopped (limit {:?})",
            options.converge_limit
        ),
        None => println!(
            "NOT converged within {:?}: {} objects, e.g. {:?}",
            options.converge_limit,
            left.len(),
            &left[..left.len().min(5)]
        ),
    }
    println!("\n| invariant | found | limit |\n|---|---|---|");
    let mut failed = converged.is_none();
    for (name, found, limit) in checks {
        let ok = found <= limit;
        failed |= !ok;
        println!(
            "| {name} | {found:.2} | {limit} |{}",
            if ok { "" } else { " **VIOLATED**" }
        );
    }
    let misplaced = audited.iter().flat_map(|(bad, _)| bad.iter().take(5));
    for example in findings
        .examples
        .iter()
        .chain(overlaps.iter().take(5))
        .chain(misplaced)
    {
        println!("- {example}");
    }
    println!(
        "chaos: {}",
        if failed {
            "FAILED"
        } else {
            "all invariants held"
        }
    );
    std::process::exit(i32::from(failed));
}
