//! `api-economy`: the API-economy run of BENCHMARKS.md ("Scale: N objects on a real API
//! server"), run by `scripts/bench-scale`. N Databases are created at once on the example
//! operator (`example-operator`, a process of its own) until all are Running; then it
//! settles, idles, the operator is restarted (SIGTERM, a new process; every object is
//! reconciled again) and the objects are deleted. Each window is measured by the API server's
//! `apiserver_request_total` and by the operator's own engine metrics; the report is a markdown
//! section (see `kube_fsm_benches::economy`).
//!
//! ```text
//! scripts/bench-scale [--objects N] [--namespace NS] [--idle SECS] [--timeout SECS]
//!                     [--record FILE]
//! ```
//!
//! Needs `KUBECONFIG` (a dedicated `scripts/envtest`, so that no other client's requests are
//! counted) and the release binary `example-operator` beside this one. Exit status: 0 within
//! the per-object limits, 2 over them (or on bad arguments), 1 on errors.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{DynamicObject, ListParams};
use kube::{Api, ResourceExt as _};
use kube_fsm_benches::economy::engine::Engine;
use kube_fsm_benches::economy::record;
use kube_fsm_benches::economy::report::Report;
use kube_fsm_benches::economy::watch::{Databases, Snapshot};
use kube_fsm_benches::economy::{self, Options, Reading, USAGE, Window};
use kube_fsm_benches::example::{BoxError, Operator, install_crd};
use kube_fsm_testkit::cluster;
use kube_fsm_testkit::prometheus::Requests;

/// The run's state: the API server, the harness's watch, and the operator process now running
/// with what the processes before it counted.
struct Bench {
    client: Client,
    watch: Databases,
    args: Vec<String>,
    operator: Option<Operator>,
    /// The last readings of the processes stopped so far, added up.
    before: Engine,
}

impl Bench {
    fn operator(&self) -> Result<&Operator, BoxError> {
        self.operator
            .as_ref()
            .ok_or_else(|| "the operator is not running".into())
    }

    /// The running process's engine counters (it counts from zero).
    async fn engine(&self) -> Result<Engine, BoxError> {
        Ok(Engine::parse(&self.operator()?.metrics().await?))
    }

    async fn read(&self) -> Result<Reading, BoxError> {
        let at = Instant::now();
        let requests = Requests::scrape(&self.client).await?;
        let engine = &self.before + &self.engine().await?;
        Ok(Reading {
            at,
            requests,
            engine,
            status_changes: self.watch.snapshot().status_changes,
        })
    }

    /// Stops the operator (SIGTERM, up to 10 s) after a last reading of its counters.
    async fn stop(&mut self) -> Result<(), BoxError> {
        let last = self.engine().await?;
        self.before = &self.before + &last;
        if let Some(operator) = self.operator.take()
            && !operator.stop(Duration::from_secs(10)).await?
        {
            eprintln!("api-economy: warning: the operator did not stop within 10 s (killed)");
        }
        Ok(())
    }

    async fn start(&mut self) -> Result<(), BoxError> {
        self.operator = Some(Operator::start(&self.args).await?);
        Ok(())
    }

    /// Waits up to `timeout` until the running process has reconciled `count` objects in
    /// `phase`; returns whether it did.
    async fn wait_for_reconciles(
        &self,
        phase: &str,
        count: u64,
        timeout: Duration,
    ) -> Result<bool, BoxError> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.engine().await?.phase(phase) >= count {
                return Ok(true);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(false)
    }
}

#[allow(clippy::too_many_lines)] // one run, window by window
async fn run(options: Options) -> Result<ExitCode, BoxError> {
    let client = Client::try_default().await?;
    let ns = options.namespace.as_str();
    let n = options.objects;
    let settle = Duration::from_secs(5);
    let version = client.apiserver_version().await?;
    install_crd(&client).await;
    economy::ensure_namespace(&client, ns).await?;
    // Probe the metrics endpoint before doing anything that would need cleaning up.
    Requests::scrape(&client).await.map_err(|err| {
        format!("cannot read the API server's /metrics (run against scripts/envtest): {err}")
    })?;
    let existing =
        Api::<DynamicObject>::namespaced_with(client.clone(), ns, &cluster::example_databases())
            .list_metadata(&ListParams::default())
            .await?;
    if let Some(object) = existing.items.first() {
        return Err(format!(
            "namespace {ns} already holds Databases ({} …); use a fresh one",
            object.name_any()
        )
        .into());
    }

    let watch = Databases::start(&client, ns);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut bench = Bench {
        client: client.clone(),
        watch,
        args: options.operator_args(),
        operator: None,
        before: Engine::default(),
    };
    bench.start().await?;
    // Let the operator's watches start, so that the objects arrive as a burst on a running
    // controller rather than as one initial list.
    tokio::time::sleep(Duration::from_secs(2)).await;

    eprintln!("api-economy: creating {n} Databases in {ns}");
    let r0 = bench.read().await?;
    economy::create_databases(&client, ns, n, 50).await?;
    let created = r0.at.elapsed();
    let progress = tokio::spawn(progress(bench.watch.snapshots.clone(), n));
    let converged = bench
        .watch
        .wait_for("all Running", options.timeout, |s| s.count("Running") >= n)
        .await;
    progress.abort();
    converged?;
    let r1 = bench.read().await?;
    let to_running = r1.at - r0.at;
    eprintln!(
        "api-economy: all {n} Running {:.2} s after the first create; settling {settle:?}",
        to_running.as_secs_f64()
    );
    tokio::time::sleep(settle).await;
    let r2 = bench.read().await?;

    eprintln!("api-economy: idling {:?}", options.idle);
    tokio::time::sleep(options.idle).await;
    let r3 = bench.read().await?;

    eprintln!("api-economy: restarting the operator (every object is reconciled again)");
    bench.stop().await?;
    bench.start().await?;
    let all_reconciled = bench
        .wait_for_reconciles("Running", n as u64, options.timeout)
        .await?;
    tokio::time::sleep(settle).await;
    let r4 = bench.read().await?;

    eprintln!("api-economy: deleting the {n} Databases");
    economy::delete_databases(&client, ns).await?;
    bench
        .watch
        .wait_for("deletion", options.timeout, |s| s.objects.is_empty())
        .await?;
    let children_left = economy::count_children(&client, ns).await?;
    let r5 = bench.read().await?;
    bench.stop().await?;
    bench.watch.stop();

    let windows = [
        Window::between("create → all Running", &r0, &r1),
        Window::between("settle 5 s", &r1, &r2),
        Window::between("idle", &r2, &r3),
        Window::between("restart", &r3, &r4),
        Window::between("delete all", &r4, &r5),
    ];
    let report = Report {
        options: &options,
        server: format!("{}.{}", version.major, version.minor),
        git_version: version.git_version,
        created_in: created,
        to_running,
        windows: &windows,
        convergence: Window::between("convergence", &r0, &r2),
        all_reconciled,
        children_left,
    };
    let markdown = report.markdown();
    println!("{markdown}");
    if let Some(path) = &options.record {
        record::record(path, &report.heading(), &markdown)?;
        eprintln!("api-economy: recorded in {path}");
    }
    Ok(if report.within_limits() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}

/// Prints every second how many objects are Running.
async fn progress(mut snapshots: tokio::sync::watch::Receiver<Snapshot>, n: usize) {
    let start = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let snapshot = snapshots.borrow_and_update().clone();
        eprintln!(
            "api-economy: {:5.1} s: {}/{n} Running ({})",
            start.elapsed().as_secs_f64(),
            snapshot.count("Running"),
            snapshot.summary()
        );
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    // scripts/bench-scale names itself; otherwise record this binary's command line.
    let command = std::env::var("KUBE_FSM_BENCH_COMMAND").unwrap_or_else(|_| {
        format!("api-economy {}", args.join(" "))
            .trim_end()
            .to_owned()
    });
    let options = match Options::parse(args, command) {
        Ok(options) => options,
        Err(message) => {
            eprintln!("error: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(options).await {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}
