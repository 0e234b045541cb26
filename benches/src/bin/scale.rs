//! The scale run (BENCHMARKS.md, "Scale: kube-fsm against a hand-written controller"): the
//! example operator (`example-operator`, a process of its own) and the hand-written
//! `reference-controller` doing the same job, one after the other on the same API server, each
//! driving N Databases spread over M namespaces from creation to Running. Per operator: time
//! until all are Running and p50/p90/p99 per object, the operator process's peak RSS and CPU time,
//! the API server's CPU time, and the requests the API server served (its own counters). The
//! last row is the ratio, so the machine's noise cancels out as far as one run allows.
//!
//! ```text
//! scripts/bench-scale-n [--objects N] [--namespaces M] [--events all|warnings|off]
//!                       [--operators kube-fsm,reference] [--timeout SECS] [--flaky SHARE]
//!                       [--backlog 1]
//! ```
//!
//! An operator `kube-fsm@concurrency=64+handler-latency=50` runs the example with
//! `--concurrency 64 --handler-latency 50`: several settings side by side in one run.
//! `reference@finalizer=1` runs the reference with `--finalizer 1` (its finalizer on);
//! `reference@same-status=1` makes it write kube-fsm's status shape (objects of the same size);
//! `reference@events=1` makes it record an Event of each transition (kube-fsm's `--events all`).
//! `replicas=R` runs R processes of it (add `shards=S` to split the work); RSS is then the
//! largest replica's, CPU the sum of all (the killed one's left out). `kill=1` SIGKILLs the
//! first replica once half the objects are Running and prints how long the rest took.
//! `binary=NAME` runs another build of the example operator, copied beside this binary under
//! NAME (a before/after pair, or a bisection, in one run). With
//! replicas, each writes under its own field manager (`kube-fsm-R`), and the harness's own
//! watch counts the objects whose status more than one replica wrote (from `managedFields`).
//!
//! `--backlog 1` creates every object before the operator starts and counts each object's
//! latency from the operator's start: the same quantity on both sides (in a burst each object's
//! latency counts from its own create, and the creates go as fast as the operator lets the API
//! server answer them).
//!
//! `--flaky SHARE` puts a flaky API server between each operator and the real one (see
//! `kube_fsm_benches::flaky`): SHARE of all requests are answered 429, 500 or 503 at random.
//!
//! Needs `KUBECONFIG` (a dedicated `scripts/envtest`, so that no other client's requests are
//! counted; `KUBE_FSM_ENVTEST_DIR` locates its kube-apiserver's pid for its CPU time) and the
//! release binaries `example-operator` and `reference-controller` beside this one.

use std::collections::{BTreeSet, HashMap};
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, DynamicObject, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use kube_fsm_benches::example::{BoxError, apiserver_pid, install_crd, process_stats, sibling};
use kube_fsm_benches::flaky::FlakyProxy;
use kube_fsm_testkit::cluster;
use kube_fsm_testkit::prometheus::Requests;
use serde_json::json;

#[derive(Clone, Debug)]
struct Options {
    objects: usize,
    namespaces: usize,
    events: String,
    operators: Vec<String>,
    timeout: Duration,
    /// The share of requests a flaky API server refuses (0: none, the operators talk to the
    /// server directly).
    flaky: f64,
    /// Every object created before the operator starts (`--backlog 1`).
    backlog: bool,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        objects: 1000,
        namespaces: 50,
        events: "all".into(),
        operators: vec!["kube-fsm".into(), "reference".into()],
        timeout: Duration::from_secs(600),
        flaky: 0.0,
        backlog: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| format!("{flag}: not a number"))
        };
        match flag.as_str() {
            "--objects" => {
                options.objects = usize::try_from(number()?).map_err(|e| e.to_string())?
            }
            "--namespaces" => {
                options.namespaces = usize::try_from(number()?)
                    .map_err(|e| e.to_string())?
                    .max(1);
            }
            "--events" => options.events.clone_from(&value),
            "--operators" => options.operators = value.split(',').map(str::to_owned).collect(),
            "--timeout" => options.timeout = Duration::from_secs(number()?),
            "--flaky" => {
                options.flaky = value
                    .parse::<f64>()
                    .ok()
                    .filter(|share| (0.0..1.0).contains(share))
                    .ok_or(format!("{flag}: a share in [0, 1)"))?;
            }
            "--backlog" => options.backlog = number()? == 1,
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(options)
}

/// The API server's request counters that the table reports.
#[derive(Clone, Copy, Debug, Default)]
struct Counters {
    status_writes: u64,
    child_writes: u64,
    gets: u64,
    errors_5xx: u64,
    conflicts: u64,
    events: u64,
    finalizer_writes: u64,
}

async fn counters(client: &Client) -> Result<Counters, BoxError> {
    let r = Requests::scrape(client).await?;
    let writes = |resource: &str| -> u64 {
        ["APPLY", "POST", "PATCH", "PUT"]
            .iter()
            .map(|verb| r.count(verb, resource, None, ""))
            .sum()
    };
    Ok(Counters {
        status_writes: r.count("PATCH", "databases", Some("status"), ""),
        child_writes: writes("configmaps"),
        gets: r.sum(|k| k.verb == "GET"),
        errors_5xx: r.sum(|k| ["500", "502", "503", "504"].contains(&k.code.as_str())),
        conflicts: r.sum(|k| k.code == "409"),
        events: r.count("POST", "events", None, "") + r.count("PATCH", "events", None, ""),
        finalizer_writes: r.count("PATCH", "databases", Some(""), ""),
    })
}

impl std::ops::Sub for Counters {
    type Output = Counters;
    fn sub(self, o: Counters) -> Counters {
        Counters {
            status_writes: self.status_writes - o.status_writes,
            child_writes: self.child_writes - o.child_writes,
            gets: self.gets - o.gets,
            errors_5xx: self.errors_5xx - o.errors_5xx,
            conflicts: self.conflicts - o.conflicts,
            events: self.events - o.events,
            finalizer_writes: self.finalizer_writes - o.finalizer_writes,
        }
    }
}

/// What one operator's run measured.
#[derive(Debug)]
struct Run {
    operator: String,
    converge: Duration,
    /// From the first create until the harness's last create was answered: a controller that
    /// loads the API server slows the creates, and so shortens each object's own latency.
    created: Duration,
    p50: Duration,
    p90: Duration,
    p99: Duration,
    rss: u64,
    cpu: f64,
    apiserver_cpu: Option<f64>,
    requests: Counters,
    idle_writes: u64,
    running: usize,
    /// With `--flaky`: the requests the flaky server refused, and those it forwarded.
    injected: Option<(u64, u64)>,
    /// From deleting every object until the last is gone (its finalizer removed).
    cleanup: Duration,
}

/// The field managers that own fields of `object`'s status (1.20 has no `subresource` in
/// managedFields: the owned `f:status` says it).
fn status_writers(object: &DynamicObject) -> Vec<String> {
    object
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|entry| {
            entry.subresource.as_deref() == Some("status")
                || entry
                    .fields_v1
                    .as_ref()
                    .is_some_and(|fields| fields.0.get("f:status").is_some())
        })
        .filter_map(|entry| entry.manager.clone())
        .collect()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

/// The example operator's or the reference's processes (`replicas` of them), with the
/// operator's settings, and their pids.
fn spawn_operators(
    program: &str,
    flags: &[String],
    replicas: usize,
    binary: Option<&str>,
    options: &Options,
    flaky: &Option<(FlakyProxy, std::path::PathBuf)>,
) -> Result<(Vec<tokio::process::Child>, Vec<u32>), BoxError> {
    let mut children = Vec::new();
    for replica in 0..replicas {
        let mut command = match program {
            "kube-fsm" => {
                let binary = binary.unwrap_or("example-operator");
                let mut c = tokio::process::Command::new(sibling(binary)?);
                c.args([
                    "--metrics-addr",
                    "127.0.0.1:0",
                    "--events",
                    &options.events,
                    "--identity",
                    &format!("scale-{replica}"),
                ]);
                if replicas > 1 {
                    // Each replica its own field manager, so that the watch below sees who
                    // wrote each object's status.
                    c.args(["--field-manager", &format!("kube-fsm-{replica}")]);
                }
                c.args(flags);
                c
            }
            "reference" => {
                let mut c = tokio::process::Command::new(sibling("reference-controller")?);
                c.args(flags);
                c
            }
            other => return Err(format!("unknown operator {other}").into()),
        };
        if let Some((_, kubeconfig)) = flaky {
            command.env("KUBECONFIG", kubeconfig);
        }
        children.push(
            command
                .env("RUST_LOG", "error")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()?,
        );
    }
    let pids: Vec<u32> = children
        .iter()
        .map(|c| c.id().ok_or("the operator exited at once"))
        .collect::<Result<_, _>>()?;
    Ok((children, pids))
}

/// Creates `objects` Databases over `namespaces`, 50 at a time; when each was answered, by
/// `namespace/name`.
async fn create_all(
    client: &Client,
    objects: usize,
    namespaces: &[String],
) -> Result<Arc<Mutex<HashMap<String, Instant>>>, BoxError> {
    let created: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    stream::iter(0..objects)
        .map(|i| {
            let ns = namespaces[i % namespaces.len()].clone();
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &ns, &cluster::example_databases());
            let created = created.clone();
            async move {
                let name = format!("db-{i:05}");
                let mut object = DynamicObject::new(&name, &cluster::example_databases());
                object.data = json!({ "spec": {} });
                api.create(&PostParams::default(), &object).await?;
                created
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(format!("{ns}/{name}"), Instant::now());
                Ok::<_, kube::Error>(())
            }
        })
        .buffer_unordered(50)
        .try_collect::<()>()
        .await?;
    Ok(created)
}

async fn run_one(client: &Client, options: &Options, operator: &str) -> Result<Run, BoxError> {
    let mut namespaces = Vec::new();
    for _ in 0..options.namespaces {
        namespaces.push(cluster::namespace(client, "scale").await);
    }
    let (program, settings) = operator.split_once('@').unwrap_or((operator, ""));
    let mut flags = Vec::new();
    let mut replicas = 1;
    let mut kill = false;
    let mut binary = None;
    for setting in settings.split('+').filter(|s| !s.is_empty()) {
        let (flag, value) = setting
            .split_once('=')
            .ok_or(format!("{setting}: not flag=value"))?;
        match flag {
            "replicas" => {
                replicas = value
                    .parse()
                    .map_err(|_| format!("{setting}: not a number"))?;
            }
            "kill" => kill = value == "1",
            "binary" => binary = Some(value.to_owned()),
            _ => flags.extend([format!("--{flag}"), value.to_owned()]),
        }
    }
    // With --flaky, the operators talk to a flaky server in front of the real one.
    let flaky = if options.flaky > 0.0 {
        let proxy = FlakyProxy::start(client.clone(), options.flaky).await?;
        let path = std::env::temp_dir().join(format!("kube-fsm-flaky-{}.yaml", std::process::id()));
        std::fs::write(&path, proxy.kubeconfig())?;
        Some((proxy, path))
    } else {
        None
    };
    let spawn = || {
        spawn_operators(
            program,
            &flags,
            replicas,
            binary.as_deref(),
            options,
            &flaky,
        )
    };
    // In a backlog, the objects first and the operator after them; else the other way round.
    let backlog = if options.backlog {
        let created = create_all(client, options.objects, &namespaces).await?;
        let names: Vec<String> = created
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect();
        names
    } else {
        Vec::new()
    };
    let started = if options.backlog {
        None
    } else {
        let started = spawn()?;
        // Replicas first share out the shards (a few Lease rounds).
        tokio::time::sleep(Duration::from_secs(if replicas > 1 { 8 } else { 2 })).await;
        Some(started)
    };

    // Who is Running, and since when, seen by a watch of our own; and which field managers
    // wrote each object's status (the replicas', see above).
    let running: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let seen = running.clone();
    let writers: Arc<Mutex<HashMap<String, BTreeSet<String>>>> = Arc::default();
    let written_by = writers.clone();
    let api_all: Api<DynamicObject> = Api::all_with(client.clone(), &cluster::example_databases());
    let namespace_set: std::collections::HashSet<String> = namespaces.iter().cloned().collect();
    let watch = tokio::spawn(
        watcher(api_all, watcher::Config::default())
            .applied_objects()
            .for_each(move |object| {
                if let Ok(object) = object
                    && object
                        .namespace()
                        .is_some_and(|ns| namespace_set.contains(&ns))
                {
                    let key = format!(
                        "{}/{}",
                        object.namespace().unwrap_or_default(),
                        object.name_any()
                    );
                    let managers = status_writers(&object);
                    if !managers.is_empty() {
                        written_by
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .entry(key.clone())
                            .or_default()
                            .extend(managers);
                    }
                    if object.data["status"]["phase"] != "Running" {
                        return std::future::ready(());
                    }
                    seen.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .entry(key)
                        .or_insert_with(Instant::now);
                }
                std::future::ready(())
            }),
    );
    tokio::time::sleep(Duration::from_millis(500)).await;

    let before = counters(client).await?;
    let apiserver_before = apiserver_pid().and_then(process_stats).map(|s| s.0);
    let (mut children, pids) = match started {
        Some(started) => started,
        None => spawn()?,
    };
    let start = Instant::now();
    let created = if options.backlog {
        // Each object's latency counts from the operator's start.
        let now = Instant::now();
        let names = backlog.into_iter().map(|name| (name, now)).collect();
        Arc::new(Mutex::new(names))
    } else {
        create_all(client, options.objects, &namespaces).await?
    };
    let created_all = start.elapsed();
    let deadline = start + options.timeout;
    let mut killed_at = None;
    loop {
        let done = running.lock().unwrap_or_else(PoisonError::into_inner).len();
        if done >= options.objects || Instant::now() >= deadline {
            break;
        }
        // kill=1: SIGKILL the first replica once half the objects are Running.
        if kill && killed_at.is_none() && done >= options.objects / 2 {
            children[0].start_kill()?;
            killed_at = Some(start.elapsed());
            eprintln!("scale: {operator}: killed replica 0 with {done} Running");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Converged when the watch saw the last object Running, not when this loop woke up.
    let converge = {
        let running = running.lock().unwrap_or_else(PoisonError::into_inner);
        match running.values().max() {
            Some(last) if running.len() >= options.objects => last.saturating_duration_since(start),
            _ => start.elapsed(),
        }
    };
    if let Some(at) = killed_at {
        eprintln!(
            "scale: {operator}: replica 0 killed at {:.1} s; all Running {:.1} s after the kill",
            at.as_secs_f64(),
            (converge - at).as_secs_f64()
        );
    }
    if replicas > 1 {
        let writers = writers.lock().unwrap_or_else(PoisonError::into_inner);
        let shared = writers.values().filter(|w| w.len() > 1).count();
        eprintln!(
            "scale: {operator}: objects whose status more than one replica wrote \
             (independent watch of managedFields): {shared} of {}",
            writers.len()
        );
    }
    let after = counters(client).await?;
    let injected = flaky.as_ref().map(|(proxy, _)| proxy.counts());
    let (cpu, rss) = pids
        .iter()
        .filter_map(|pid| process_stats(*pid))
        .fold((0.0, 0), |(cpu, rss), (c, r)| (cpu + c, rss.max(r)));
    let apiserver_cpu = apiserver_pid()
        .and_then(process_stats)
        .zip(apiserver_before)
        .map(|(now, then)| now.0 - then);
    let mut latencies: Vec<Duration> = {
        let running = running.lock().unwrap_or_else(PoisonError::into_inner);
        let created = created.lock().unwrap_or_else(PoisonError::into_inner);
        running
            .iter()
            .filter_map(|(k, at)| Some(at.saturating_duration_since(*created.get(k)?)))
            .collect()
    };
    latencies.sort_unstable();
    let count_running = running.lock().unwrap_or_else(PoisonError::into_inner).len();

    tokio::time::sleep(Duration::from_secs(10)).await;
    let idle = counters(client).await? - after;

    // Clean up while the operator runs (its finalizer), then the children, then stop it.
    let cleanup_started = Instant::now();
    for ns in &namespaces {
        Api::<DynamicObject>::namespaced_with(client.clone(), ns, &cluster::example_databases())
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await?;
    }
    let cleanup_deadline = Instant::now() + options.timeout;
    for ns in &namespaces {
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), ns, &cluster::example_databases());
        while !api
            .list_metadata(&ListParams::default())
            .await?
            .items
            .is_empty()
            && Instant::now() < cleanup_deadline
        {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    let cleanup = cleanup_started.elapsed();
    for ns in &namespaces {
        Api::<ConfigMap>::namespaced(client.clone(), ns)
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await?;
    }
    watch.abort();
    for mut child in children {
        child.kill().await?;
    }
    Ok(Run {
        operator: operator.to_owned(),
        converge,
        created: created_all,
        p50: percentile(&latencies, 0.5),
        p90: percentile(&latencies, 0.9),
        p99: percentile(&latencies, 0.99),
        rss,
        cpu,
        apiserver_cpu,
        requests: after - before,
        idle_writes: idle.status_writes + idle.child_writes,
        running: count_running,
        injected,
        cleanup,
    })
}

#[allow(clippy::cast_precision_loss)]
fn table(options: &Options, runs: &[Run]) -> String {
    let n = options.objects as f64;
    let mut out = String::from(
        "| operator | Running | converge s | created s | p50 / p90 / p99 s | objects/s | peak RSS MiB | MiB per 1 000 | CPU s | CPU ms per object | API server CPU s | status writes | child writes | GETs | 5xx | 409 | Events | finalizer writes | writes while idle | all deleted s |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in runs {
        let q = r.requests;
        out.push_str(&format!(
            "| {} | {}/{} | {:.1} | {:.1} | {:.2} / {:.2} / {:.2} | {:.0} | {:.0} | {:.1} | {:.2} | {:.2} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} |\n",
            r.operator,
            r.running,
            options.objects,
            r.converge.as_secs_f64(),
            r.created.as_secs_f64(),
            r.p50.as_secs_f64(),
            r.p90.as_secs_f64(),
            r.p99.as_secs_f64(),
            r.running as f64 / r.converge.as_secs_f64().max(0.001),
            r.rss as f64 / 1_048_576.0,
            r.rss as f64 / 1_048_576.0 / n * 1000.0,
            r.cpu,
            r.cpu * 1000.0 / n,
            r.apiserver_cpu.map_or("–".into(), |c| format!("{c:.1}")),
            q.status_writes,
            q.child_writes,
            q.gets,
            q.errors_5xx,
            q.conflicts,
            q.events,
            q.finalizer_writes,
            r.idle_writes,
            r.cleanup.as_secs_f64(),
        ));
    }
    if let [a, b] = runs {
        let ratio = |x: f64, y: f64| {
            if y > 0.0 {
                format!("{:.2}×", x / y)
            } else {
                "–".into()
            }
        };
        out.push_str(&format!(
            "| ratio {} / {} | | {} | | {} / {} / {} | | {} | | {} | | {} | | | | | | | | | |\n",
            a.operator,
            b.operator,
            ratio(a.converge.as_secs_f64(), b.converge.as_secs_f64()),
            ratio(a.p50.as_secs_f64(), b.p50.as_secs_f64()),
            ratio(a.p90.as_secs_f64(), b.p90.as_secs_f64()),
            ratio(a.p99.as_secs_f64(), b.p99.as_secs_f64()),
            ratio(a.rss as f64, b.rss as f64),
            ratio(a.cpu, b.cpu),
            match (a.apiserver_cpu, b.apiserver_cpu) {
                (Some(x), Some(y)) => ratio(x, y),
                _ => "–".into(),
            },
        ));
    }
    for r in runs {
        if let Some((refused, forwarded)) = r.injected {
            out.push_str(&format!(
                "\n{}: the flaky server refused {refused} of {} requests (429, 500 or 503 at random)",
                r.operator,
                refused + forwarded
            ));
        }
    }
    out
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let options = options().map_err(|e| format!("{e}\nusage: scale [--objects N] [--namespaces M] [--events all|warnings|off] [--operators kube-fsm,reference] [--timeout SECS] [--flaky SHARE] [--backlog 1]"))?;
    let client = Client::try_default().await?;
    install_crd(&client).await;
    let mut runs = Vec::new();
    for operator in &options.operators {
        eprintln!(
            "scale: {operator}: {} objects in {} namespaces",
            options.objects, options.namespaces
        );
        let run = run_one(&client, &options, operator).await?;
        eprintln!(
            "scale: {operator}: {} Running in {:.1} s",
            run.running,
            run.converge.as_secs_f64()
        );
        runs.push(run);
    }
    println!(
        "N = {}, {} namespaces, kube-fsm Events: {}\n\n{}",
        options.objects,
        options.namespaces,
        options.events,
        table(&options, &runs)
    );
    Ok(())
}
