//! `bench-scale`: N Databases created at once against a real API server, the operator running
//! until all are Running, then idle, then a controller restart (every object re-reconciled),
//! then deletion. The API server's own request counters say what each window cost.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use kube::Client;

use crate::database::{Counters, DatabasePhase, Handlers};
use crate::metrics::Requests;
use crate::operator::Running;
use crate::tracker::Tracker;
use crate::{BoxError, cluster};

/// Options of `bench-scale`.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// How many Databases.
    pub objects: usize,
    /// Where (must hold no Databases).
    pub namespace: String,
    /// How long to idle after convergence.
    pub idle: Duration,
    /// How long all objects may take to reach Running.
    pub timeout: Duration,
    /// Update this markdown file with the results (atomically).
    pub record: Option<String>,
    /// The command line to record.
    pub command: String,
}

/// Handler runs and child requests, read from [`Counters`].
#[derive(Clone, Copy, Debug, Default)]
struct Runs {
    pending: u64,
    provisioning: u64,
    running: u64,
    degraded: u64,
    cleanup: u64,
    child_applied: u64,
    child_unchanged: u64,
    child_deleted: u64,
}

impl Runs {
    fn read(c: &Counters) -> Self {
        Runs {
            pending: Counters::get(&c.pending),
            provisioning: Counters::get(&c.provisioning),
            running: Counters::get(&c.running),
            degraded: Counters::get(&c.degraded),
            cleanup: Counters::get(&c.cleanup),
            child_applied: Counters::get(&c.child_applied),
            child_unchanged: Counters::get(&c.child_unchanged),
            child_deleted: Counters::get(&c.child_deleted),
        }
    }

    fn since(self, earlier: Runs) -> Runs {
        Runs {
            pending: self.pending - earlier.pending,
            provisioning: self.provisioning - earlier.provisioning,
            running: self.running - earlier.running,
            degraded: self.degraded - earlier.degraded,
            cleanup: self.cleanup - earlier.cleanup,
            child_applied: self.child_applied - earlier.child_applied,
            child_unchanged: self.child_unchanged - earlier.child_unchanged,
            child_deleted: self.child_deleted - earlier.child_deleted,
        }
    }
}

/// One measured window.
struct Window {
    name: &'static str,
    requests: Requests,
    runs: Runs,
    status_changes: u64,
    seconds: f64,
}

/// A reading of everything at one instant.
struct Reading {
    at: Instant,
    requests: Requests,
    runs: Runs,
    status_changes: u64,
}

struct Bench {
    client: Client,
    handlers: Handlers,
    tracker: Tracker,
}

impl Bench {
    async fn read(&self) -> Result<Reading, BoxError> {
        Ok(Reading {
            at: Instant::now(),
            requests: Requests::scrape(&self.client).await?,
            runs: Runs::read(self.handlers.counters()),
            status_changes: self.tracker.snapshot().status_changes,
        })
    }

    fn window(name: &'static str, from: &Reading, to: &Reading) -> Window {
        Window {
            name,
            requests: &to.requests - &from.requests,
            runs: to.runs.since(from.runs),
            status_changes: to.status_changes - from.status_changes,
            seconds: (to.at - from.at).as_secs_f64(),
        }
    }

    async fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        done: impl FnMut(&crate::tracker::Snapshot) -> bool,
    ) -> Result<(), BoxError> {
        let mut snapshots = self.tracker.snapshots.clone();
        match tokio::time::timeout(timeout, snapshots.wait_for(done)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(_)) => Err("the watch of Databases ended".into()),
            Err(_) => Err(format!(
                "timed out after {timeout:?} waiting for {what}: {}",
                self.tracker.snapshot().summary()
            )
            .into()),
        }
    }

    /// Waits until the handlers have run `count` more times in Running than `from` says.
    async fn wait_for_runs(&self, from: Runs, count: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if Runs::read(self.handlers.counters()).running >= from.running + count {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }
}

/// Runs the scale benchmark and prints (and optionally records) a markdown report.
pub async fn run(options: BenchOptions) -> Result<ExitCode, BoxError> {
    let client = Client::try_default().await?;
    let ns = options.namespace.as_str();
    let n = options.objects;
    let settle = Duration::from_secs(5);
    let version = client.apiserver_version().await?;
    cluster::install_crd(&client, crate::database::crd()).await?;
    cluster::ensure_namespace(&client, ns).await?;
    // Probe the metrics endpoint before doing anything that would need cleaning up.
    Requests::scrape(&client).await.map_err(|err| {
        format!("cannot read the API server's /metrics (run against scripts/envtest): {err}")
    })?;

    let start = Instant::now();
    let tracker = Tracker::start(&client, ns, false, start);
    let bench = Bench {
        handlers: Handlers::new(client.clone()),
        client: client.clone(),
        tracker,
    };
    bench
        .wait_for("the first list", Duration::from_secs(10), |_| true)
        .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    if !bench.tracker.snapshot().objects.is_empty() {
        return Err(format!("namespace {ns} already holds Databases; use a fresh one").into());
    }

    let mut operator = Running::start(client.clone(), bench.handlers.clone(), ns);
    // Let the operator's watches start, so that the objects arrive as a burst on a running
    // controller rather than as one initial list.
    tokio::time::sleep(Duration::from_secs(2)).await;

    eprintln!("bench-scale: creating {n} Databases in {ns}");
    let r0 = bench.read().await?;
    cluster::create_databases(&client, ns, n, 50).await?;
    let created = r0.at.elapsed();
    let progress = tokio::spawn(progress(bench.tracker.snapshots.clone(), n));
    let converged = bench
        .wait_for("all Running", options.timeout, |s| {
            s.count(DatabasePhase::Running) >= n
        })
        .await;
    progress.abort();
    converged?;
    let r1 = bench.read().await?;
    let to_running = r1.at - r0.at;
    eprintln!(
        "bench-scale: all {n} Running {:.2} s after the first create; settling {settle:?}",
        to_running.as_secs_f64()
    );
    tokio::time::sleep(settle).await;
    let r2 = bench.read().await?;

    eprintln!("bench-scale: idling {:?}", options.idle);
    tokio::time::sleep(options.idle).await;
    let r3 = bench.read().await?;

    eprintln!("bench-scale: restarting the operator (every object is reconciled again)");
    if !operator.stop(Duration::from_secs(10)).await {
        eprintln!("bench-scale: warning: the operator did not stop within 10 s");
    }
    let before_restart = Runs::read(bench.handlers.counters());
    operator = Running::start(client.clone(), bench.handlers.clone(), ns);
    let all_reconciled = bench
        .wait_for_runs(before_restart, n as u64, options.timeout)
        .await;
    tokio::time::sleep(settle).await;
    let r4 = bench.read().await?;

    eprintln!("bench-scale: deleting the {n} Databases");
    cluster::delete_databases(&client, ns).await?;
    bench
        .wait_for("deletion", options.timeout, |s| s.objects.is_empty())
        .await?;
    let children_left = cluster::count_children(&client, ns).await?;
    let r5 = bench.read().await?;
    if !operator.stop(Duration::from_secs(10)).await {
        eprintln!("bench-scale: warning: the operator did not stop within 10 s");
    }
    bench.tracker.stop();

    let windows = [
        Bench::window("create → all Running", &r0, &r1),
        Bench::window("settle 5 s", &r1, &r2),
        Bench::window("idle", &r2, &r3),
        Bench::window("restart", &r3, &r4),
        Bench::window("delete all", &r4, &r5),
    ];
    let report = Report {
        options: &options,
        server: format!("{}.{}", version.major, version.minor),
        git_version: version.git_version,
        created_in: created,
        to_running,
        windows: &windows,
        all_reconciled,
        children_left,
    };
    let markdown = report.markdown();
    println!("{markdown}");
    if let Some(path) = &options.record {
        record(path, &report.heading(), &markdown)?;
        eprintln!("bench-scale: recorded in {path}");
    }
    Ok(if report.within_limits() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}

async fn progress(mut snapshots: tokio::sync::watch::Receiver<crate::tracker::Snapshot>, n: usize) {
    let start = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let snapshot = snapshots.borrow_and_update().clone();
        eprintln!(
            "bench-scale: {:5.1} s: {}/{n} Running ({})",
            start.elapsed().as_secs_f64(),
            snapshot.count(DatabasePhase::Running),
            snapshot.summary()
        );
    }
}

struct Report<'a> {
    options: &'a BenchOptions,
    server: String,
    git_version: String,
    created_in: Duration,
    to_running: Duration,
    windows: &'a [Window],
    all_reconciled: bool,
    children_left: usize,
}

/// The Databases of this example (other groups' `databases` do not count).
const DATABASES: &str = "databases.example.kube-fsm.dev";

/// Per-object limits of the API economy (ARCHITECTURE.md), checked on the first two windows together.
const STATUS_WRITES_PER_OBJECT: u64 = 2;
const CHILD_WRITES_PER_OBJECT: u64 = 1;

fn status_patches(r: &Requests, code: &str) -> u64 {
    r.count("PATCH", DATABASES, Some("status"), code)
}

fn child_writes(r: &Requests, code: &str) -> u64 {
    ["POST", "PATCH", "PUT", "APPLY"]
        .iter()
        .map(|verb| r.count(verb, "configmaps", None, code))
        .sum()
}

fn database_gets(r: &Requests) -> u64 {
    r.count("GET", DATABASES, None, "")
}

impl Report<'_> {
    fn heading(&self) -> String {
        format!(
            "## Scale: {} objects on a real API server",
            self.options.objects
        )
    }

    fn n(&self) -> u64 {
        self.options.objects as u64
    }

    /// The convergence windows (create → Running, and the settle after it) as one.
    fn convergence(&self) -> Requests {
        let mut sum = self.windows[0].requests.clone();
        for (k, v) in &self.windows[1].requests.0 {
            *sum.0.entry(k.clone()).or_insert(0) += v;
        }
        sum
    }

    fn within_limits(&self) -> bool {
        let c = self.convergence();
        status_patches(&c, "") <= STATUS_WRITES_PER_OBJECT * self.n()
            && child_writes(&c, "") <= CHILD_WRITES_PER_OBJECT * self.n()
            && database_gets(&c) == 0
            && self.windows[..4]
                .iter()
                .all(|w| w.requests.count("GET", "configmaps", None, "") == 0)
            && self.windows[2..4]
                .iter()
                .all(|w| status_patches(&w.requests, "") + child_writes(&w.requests, "") == 0)
            && self.all_reconciled
            && self.children_left == 0
    }

    #[allow(clippy::too_many_lines)]
    fn markdown(&self) -> String {
        let n = self.n();
        let mut out = String::new();
        let w = self.windows;
        let _ = writeln!(out, "{}\n", self.heading());
        let _ = writeln!(
            out,
            "Command: `{}` (the `bench-scale` subcommand of `examples/`, {} build). \
             Server: kube-apiserver {} (Kubernetes {}) + etcd from a dedicated `scripts/envtest` instance on loopback (no other clients). \
             Machine: {}. Recorded {}.\n",
            self.options.command,
            if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            },
            self.git_version,
            self.server,
            machine(),
            today()
        );
        let _ = writeln!(
            out,
            "The example operator (`examples/src/database.rs`, machine `specs/database.yaml`, one \
             child ConfigMap per object, kube 5 `Controller` defaults, unbounded concurrency) \
             runs in-process. {n} Databases are created at once (50 requests in flight) on the \
             running controller; the figures are deltas of the API server's \
             `apiserver_request_total` between readings, so they count what the server served, \
             from the operator and from the harness (which creates and deletes the objects and \
             watches them). Status changes are counted by that separate watch: each is a stored \
             status that differs from the previous one.\n"
        );
        let _ = writeln!(
            out,
            "Objects created in {:.2} s; all {n} Running {:.2} s after the first create.\n",
            self.created_in.as_secs_f64(),
            self.to_running.as_secs_f64()
        );
        let _ = write!(out, "| | limit |");
        for window in w {
            let _ = write!(out, " {} ({:.1} s) |", window.name, window.seconds);
        }
        let _ = write!(out, "\n|---|---|");
        for _ in w {
            let _ = write!(out, "---:|");
        }
        out.push('\n');
        let mut row = |label: &str, limit: &str, value: &dyn Fn(&Window) -> String| {
            let _ = write!(out, "| {label} | {limit} |");
            for window in w {
                let _ = write!(out, " {} |", value(window));
            }
            out.push('\n');
        };
        let split = |ok: u64, bad: u64| {
            if bad == 0 {
                ok.to_string()
            } else {
                format!("{ok} + {bad} conflicts")
            }
        };
        row(
            "status PATCH (databases/status)",
            &format!("{} then 0", STATUS_WRITES_PER_OBJECT * n),
            &|w| {
                split(
                    status_patches(&w.requests, "2"),
                    status_patches(&w.requests, "409"),
                )
            },
        );
        row(
            "status changes seen by a watch",
            &format!("{}", 2 * n),
            &|w| w.status_changes.to_string(),
        );
        row(
            "child writes (configmaps APPLY/POST/PATCH/PUT)",
            &format!("{} then 0", CHILD_WRITES_PER_OBJECT * n),
            &|w| {
                let ok = child_writes(&w.requests, "2");
                let exists = child_writes(&w.requests, "409");
                if exists == 0 {
                    ok.to_string()
                } else {
                    format!("{ok} + {exists} refused (409)")
                }
            },
        );
        row("GET databases", "0", &|w| {
            database_gets(&w.requests).to_string()
        });
        row("metadata PATCH databases (finalizer)", "–", &|w| {
            split(
                w.requests.count("PATCH", DATABASES, Some(""), "2"),
                w.requests.count("PATCH", DATABASES, Some(""), "409"),
            )
        });
        row("GET configmaps (children come from the cache)", "0", &|w| {
            w.requests.count("GET", "configmaps", None, "").to_string()
        });
        row("DELETE configmaps (cleanup)", "–", &|w| {
            w.requests
                .count("DELETE", "configmaps", None, "")
                .to_string()
        });
        row("Events written (events POST/PATCH)", "–", &|w| {
            (w.requests.count("POST", "events", None, "")
                + w.requests.count("PATCH", "events", None, ""))
            .to_string()
        });
        row("harness: POST / DELETE databases", "–", &|w| {
            format!(
                "{} / {}",
                w.requests.count("POST", DATABASES, None, ""),
                w.requests.count("DELETE", DATABASES, None, "")
            )
        });
        row(
            "LIST + WATCH, all resources (a watch counts when it ends)",
            "–",
            &|w| {
                let lists: u64 = w
                    .requests
                    .0
                    .iter()
                    .filter(|(k, _)| k.verb == "LIST" || k.verb == "WATCH")
                    .map(|(_, v)| v)
                    .sum();
                lists.to_string()
            },
        );
        row("child applies sent / skipped as unchanged", "–", &|w| {
            format!("{} / {}", w.runs.child_applied, w.runs.child_unchanged)
        });
        row(
            "handler runs: Pending / Provisioning / Running / Degraded / cleanup",
            "–",
            &|w| {
                let r = w.runs;
                format!(
                    "{} / {} / {} / {} / {}",
                    r.pending, r.provisioning, r.running, r.degraded, r.cleanup
                )
            },
        );
        out.push('\n');

        let c = self.convergence();
        let conv_status = status_patches(&c, "");
        let conv_child = child_writes(&c, "");
        let after = self.windows[2..4]
            .iter()
            .map(|w| status_patches(&w.requests, "") + child_writes(&w.requests, ""))
            .sum::<u64>();
        let _ = writeln!(
            out,
            "Per object to reach Running: {} status writes (limit {STATUS_WRITES_PER_OBJECT}), \
             {} child writes (limit {CHILD_WRITES_PER_OBJECT}), {} GETs of Databases (limit 0); \
             writes while idle and after the restart: {after} (limit 0). {}",
            per(conv_status, n),
            per(conv_child, n),
            database_gets(&c),
            if self.within_limits() {
                "**Within the limits.**"
            } else {
                "**Over the limits; see below.**"
            }
        );
        let extra = self.analysis(&c);
        if !extra.is_empty() {
            let _ = writeln!(out, "\n{extra}");
        }
        out
    }

    /// Explains what the figures show beyond the limits.
    fn analysis(&self, c: &Requests) -> String {
        let n = self.n();
        let mut notes = Vec::new();
        let finalizer = c.count("PATCH", DATABASES, Some(""), "");
        if finalizer > 0 {
            notes.push(format!(
                "- The finalizer costs one more write per object outside the status limit: \
                 {finalizer} metadata PATCHes (the engine adds `example.com/cleanup` before the \
                 first handler runs; a status-subresource patch cannot carry metadata)."
            ));
        }
        let conflicts = status_patches(c, "409") + c.count("PATCH", DATABASES, Some(""), "409");
        if conflicts > 0 {
            notes.push(format!(
                "- {conflicts} writes were refused with 409 Conflict: the step ran on a cached \
                 object older than the server's (each costs a GET and a redone step)."
            ));
        }
        let runs = self.windows[0].runs.since(Runs::default());
        let settle = self.windows[1].runs;
        let provisioning = runs.provisioning + settle.provisioning;
        if provisioning > n {
            notes.push(format!(
                "- Provisioning ran {provisioning} times for {n} objects: {} steps ran on a \
                 cache that did not yet hold the object's last status write (the stale-cache \
                 case in ARCHITECTURE.md).",
                provisioning - n
            ));
        }
        let pending = runs.pending + settle.pending;
        if pending > n {
            notes.push(format!(
                "- Pending ran {pending} times for {n} objects ({} stale duplicates).",
                pending - n
            ));
        }
        let reads = c.count("GET", "configmaps", None, "")
            + self.windows[3]
                .requests
                .count("GET", "configmaps", None, "");
        if reads > 0 {
            notes.push(format!(
                "- {reads} GETs of configmaps (convergence and restart): the handlers read \
                 their children from the operator's cache, so these came from elsewhere."
            ));
        }
        let events = c.count("POST", "events", None, "") + c.count("PATCH", "events", None, "");
        if events > 0 {
            notes.push(format!(
                "- The engine also wrote {events} Kubernetes Events while converging (one per \
                 transition); the API-economy limits do not count them."
            ));
        }
        let deletion = &self.windows[4];
        if deletion.runs.cleanup > n {
            let gone = deletion.requests.count("PATCH", DATABASES, Some(""), "404");
            notes.push(format!(
                "- Deletion: cleanup ran {} times for {n} objects and {gone} finalizer-removal \
                 PATCHes answered 404 (the object was already gone).",
                deletion.runs.cleanup
            ));
        }
        if !self.all_reconciled {
            notes.push("- After the restart, fewer than N Running reconciles were seen.".into());
        }
        if self.children_left > 0 {
            notes.push(format!(
                "- {} child ConfigMaps were left after deletion.",
                self.children_left
            ));
        }
        notes.join("\n")
    }
}

fn per(count: u64, n: u64) -> String {
    #[allow(clippy::cast_precision_loss)]
    let per = count as f64 / n.max(1) as f64;
    format!("{per:.2}")
}

/// `2 × Intel(R) Xeon(R) Processor, rustc 1.95.0 (...)`.
fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let rustc = std::process::Command::new("rustc")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map_or_else(|| "rustc (unknown)".into(), |v| v.trim().to_owned());
    format!("{cpus} × {model}, {rustc}")
}

fn today() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%d")
        .to_string()
}

/// Replaces the section under `heading` in the markdown file at `path` (or appends it), with
/// one atomic rename, so a concurrent reader never sees half a file.
fn record(path: &str, heading: &str, section: &str) -> Result<(), BoxError> {
    let current = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => "# Benchmarks\n".into(),
        Err(err) => return Err(err.into()),
    };
    let updated = replace_section(&current, heading, section);
    let tmp = format!("{path}.tmp.{}", std::process::id());
    std::fs::write(&tmp, updated)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// `text` with the `## heading` section (up to the next `## ` heading) replaced by `section`,
/// or with `section` appended.
fn replace_section(text: &str, heading: &str, section: &str) -> String {
    let section = section.trim_end();
    let Some(start) = text
        .match_indices(heading)
        .map(|(i, _)| i)
        .find(|&i| i == 0 || text[..i].ends_with('\n'))
    else {
        let mut out = text.trim_end().to_owned();
        out.push_str("\n\n");
        out.push_str(section);
        out.push('\n');
        return out;
    };
    let after = start + heading.len();
    let end = text[after..]
        .find("\n## ")
        .map_or(text.len(), |i| after + i + 1);
    let mut out = text[..start].to_owned();
    out.push_str(section);
    out.push('\n');
    if end < text.len() {
        out.push('\n');
        out.push_str(&text[end..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::replace_section;

    #[test]
    fn sections_are_replaced_or_appended() {
        let h = "## Scale: 2 objects on a real API server";
        let appended = replace_section("# Benchmarks\n\n## Build\nx\n", h, &format!("{h}\n\nold"));
        assert_eq!(
            appended,
            format!("# Benchmarks\n\n## Build\nx\n\n{h}\n\nold\n")
        );
        let replaced = replace_section(
            &format!("{appended}\n## Later\ny\n"),
            h,
            &format!("{h}\n\nnew\n"),
        );
        assert_eq!(
            replaced,
            format!("# Benchmarks\n\n## Build\nx\n\n{h}\n\nnew\n\n## Later\ny\n")
        );
    }
}
