//! The report of the API-economy run: the markdown section (the table of windows and the
//! per-object limits of book/src/internals/engine.md, "API economy"), whether the run kept
//! within them, and recording the section in a markdown file.

use std::fmt::Write as _;
use std::time::Duration;

use kube_fsm_testkit::prometheus::Requests;

use super::engine::{Engine, PHASES};
use super::record::{machine, today};
use super::{Options, Window};

/// The Databases of the example (other groups' `databases` do not count).
const DATABASES: &str = "databases.example.kube-fsm.dev";

/// Per-object limits of the API economy, checked on the first two windows together.
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

fn finalizer_patches(r: &Requests, code: &str) -> u64 {
    r.count("PATCH", DATABASES, Some(""), code)
}

/// What a run measured.
#[derive(Debug)]
pub struct Report<'a> {
    /// The run's options.
    pub options: &'a Options,
    /// `major.minor` of the API server.
    pub server: String,
    /// Its git version.
    pub git_version: String,
    /// How long the creates took.
    pub created_in: Duration,
    /// From the first create until all were Running.
    pub to_running: Duration,
    /// create → all Running, settle, idle, restart, delete all.
    pub windows: &'a [Window],
    /// The first two windows as one (the limits are checked on it).
    pub convergence: Window,
    /// Whether the restarted operator reconciled every object in Running.
    pub all_reconciled: bool,
    /// Children left after deletion.
    pub children_left: usize,
}

impl Report<'_> {
    /// The section's heading (what `--record` replaces).
    #[must_use]
    pub fn heading(&self) -> String {
        format!(
            "## Scale: {} objects on a real API server",
            self.options.objects
        )
    }

    fn n(&self) -> u64 {
        self.options.objects as u64
    }

    /// Writes while idle and after the restart.
    fn later_writes(&self) -> u64 {
        self.windows[2..4]
            .iter()
            .map(|w| status_patches(&w.requests, "") + child_writes(&w.requests, ""))
            .sum()
    }

    /// Whether the run kept within the per-object limits.
    #[must_use]
    pub fn within_limits(&self) -> bool {
        let c = &self.convergence.requests;
        status_patches(c, "") <= STATUS_WRITES_PER_OBJECT * self.n()
            && child_writes(c, "") <= CHILD_WRITES_PER_OBJECT * self.n()
            && database_gets(c) == 0
            && self.windows[..4]
                .iter()
                .all(|w| w.requests.count("GET", "configmaps", None, "") == 0)
            && self.later_writes() == 0
            && self.all_reconciled
            && self.children_left == 0
    }

    /// The markdown section: how it was measured, the table, the limits and notes.
    #[must_use]
    pub fn markdown(&self) -> String {
        let n = self.n();
        let mut out = String::new();
        let _ = writeln!(out, "{}\n", self.heading());
        let _ = writeln!(
            out,
            "Command: `{}` (`benches/src/bin/api-economy.rs`, {} build). \
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
             child ConfigMap per object) runs as a process of its own, `example-operator {} \
             --metrics-addr 127.0.0.1:PORT` (otherwise `run`'s defaults); the restart stops it \
             with SIGTERM and starts a new one. {n} Databases are created at once (50 requests \
             in flight) on the running controller. The figures are deltas between readings of \
             the API server's `apiserver_request_total`, so they count what the server served, \
             from the operator and from the harness (which creates and deletes the objects and \
             watches them), and, in the engine rows, of the operator's own `/metrics`, summed \
             over both processes. Status changes are counted by the harness's watch: each is a \
             stored status that differs from the previous one. A reconcile counts in the phase \
             stored when it started; \"no status\" is a reconcile of an object without one.\n",
            self.options.operator_args().join(" ")
        );
        let _ = writeln!(
            out,
            "Objects created in {:.2} s; all {n} Running {:.2} s after the first create.\n",
            self.created_in.as_secs_f64(),
            self.to_running.as_secs_f64()
        );
        self.table(&mut out);
        out.push('\n');
        let c = &self.convergence.requests;
        let _ = writeln!(
            out,
            "Per object to reach Running: {} status writes (limit {STATUS_WRITES_PER_OBJECT}), \
             {} child writes (limit {CHILD_WRITES_PER_OBJECT}), {} GETs of Databases (limit 0); \
             writes while idle and after the restart: {} (limit 0). {}",
            per(status_patches(c, ""), n),
            per(child_writes(c, ""), n),
            database_gets(c),
            self.later_writes(),
            if self.within_limits() {
                "**Within the limits.**"
            } else {
                "**Over the limits; see below.**"
            }
        );
        let notes = self.notes();
        if !notes.is_empty() {
            let _ = writeln!(out, "\n{}", notes.join("\n"));
        }
        out
    }

    fn table(&self, out: &mut String) {
        let n = self.n();
        let w = self.windows;
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
        let split = |ok: u64, refused: u64, what: &str| {
            if refused == 0 {
                ok.to_string()
            } else {
                format!("{ok} + {refused} {what}")
            }
        };
        row(
            "status PATCH (databases/status)",
            &format!("{} then 0", STATUS_WRITES_PER_OBJECT * n),
            &|w| {
                split(
                    status_patches(&w.requests, "2"),
                    status_patches(&w.requests, "409"),
                    "conflicts",
                )
            },
        );
        row(
            "status changes seen by a watch",
            &format!("{}", STATUS_WRITES_PER_OBJECT * n),
            &|w| w.status_changes.to_string(),
        );
        row(
            "child writes (configmaps APPLY/POST/PATCH/PUT)",
            &format!("{} then 0", CHILD_WRITES_PER_OBJECT * n),
            &|w| {
                split(
                    child_writes(&w.requests, "2"),
                    child_writes(&w.requests, "409"),
                    "refused (409)",
                )
            },
        );
        row("child applies (configmaps APPLY)", "–", &|w| {
            w.requests
                .count("APPLY", "configmaps", None, "")
                .to_string()
        });
        row("GET databases", "0", &|w| {
            database_gets(&w.requests).to_string()
        });
        row("metadata PATCH databases (finalizer)", "–", &|w| {
            split(
                finalizer_patches(&w.requests, "2"),
                finalizer_patches(&w.requests, "409"),
                "conflicts",
            )
        });
        row("GET configmaps", "0", &|w| {
            w.requests.count("GET", "configmaps", None, "").to_string()
        });
        row("DELETE configmaps (cleanup)", "–", &|w| {
            w.requests
                .count("DELETE", "configmaps", None, "")
                .to_string()
        });
        row("Events written (events POST/PATCH)", "–", &|w| {
            events(&w.requests).to_string()
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
                w.requests
                    .sum(|k| k.verb == "LIST" || k.verb == "WATCH")
                    .to_string()
            },
        );
        row(
            "engine: status writes / conflicts / transitions / failed reconciles",
            "–",
            &|w| {
                let e = &w.engine;
                format!(
                    "{} / {} / {} / {}",
                    e.status_writes, e.conflicts, e.transitions, e.errors
                )
            },
        );
        row(
            &format!(
                "engine: reconciles per phase (no status / {})",
                PHASES.join(" / ")
            ),
            "–",
            &|w| w.engine.per_phase(),
        );
    }

    /// Computed remarks on what the figures show beyond the table.
    fn notes(&self) -> Vec<String> {
        let n = self.n();
        let c = &self.convergence.requests;
        let e: &Engine = &self.convergence.engine;
        let mut notes = Vec::new();
        let finalizer = finalizer_patches(c, "");
        if finalizer > 0 {
            notes.push(format!(
                "- Outside the status limit: {finalizer} metadata PATCHes of Databases (the \
                 finalizer) while converging."
            ));
        }
        let conflicts = status_patches(c, "409") + finalizer_patches(c, "409");
        if conflicts > 0 || e.conflicts > 0 {
            notes.push(format!(
                "- While converging, the API server refused {conflicts} writes of Databases \
                 with 409 Conflict; the engine counted {} status conflicts.",
                e.conflicts
            ));
        }
        for phase in PHASES {
            let runs = e.phase(phase);
            if runs > n {
                notes.push(format!(
                    "- While converging, {runs} reconciles started in {phase} for {n} objects."
                ));
            }
        }
        if e.errors > 0 {
            notes.push(format!(
                "- {} reconciles failed while converging (retried with backoff).",
                e.errors
            ));
        }
        let reads = c.count("GET", "configmaps", None, "")
            + self.windows[3]
                .requests
                .count("GET", "configmaps", None, "");
        if reads > 0 {
            notes.push(format!(
                "- {reads} GETs of configmaps while converging and after the restart."
            ));
        }
        let written = events(c);
        if written > 0 {
            notes.push(format!(
                "- {written} Kubernetes Events written while converging ({} per object); the \
                 API-economy limits do not count them.",
                per(written, n)
            ));
        }
        let gone = finalizer_patches(&self.windows[4].requests, "404");
        if gone > 0 {
            notes.push(format!(
                "- Deletion: {gone} metadata PATCHes of Databases answered 404 (the object was \
                 already gone)."
            ));
        }
        if !self.all_reconciled {
            notes.push(format!(
                "- After the restart, the new operator process reconciled fewer than {n} \
                 objects in Running within {:?} (its engine metrics).",
                self.options.timeout
            ));
        }
        if self.children_left > 0 {
            notes.push(format!(
                "- {} child ConfigMaps were left after deletion.",
                self.children_left
            ));
        }
        notes
    }
}

fn events(r: &Requests) -> u64 {
    r.count("POST", "events", None, "") + r.count("PATCH", "events", None, "")
}

fn per(count: u64, n: u64) -> String {
    #[allow(clippy::cast_precision_loss)]
    let per = count as f64 / n.max(1) as f64;
    format!("{per:.2}")
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::economy::Reading;

    /// A reading whose API-server and engine counters are the given Prometheus text.
    fn reading(apiserver: &str, engine: &str, status_changes: u64) -> Reading {
        Reading {
            at: Instant::now(),
            requests: Requests::parse(apiserver),
            engine: Engine::parse(engine),
            status_changes,
        }
    }

    fn request(verb: &str, group: &str, resource: &str, sub: &str, code: &str, n: u64) -> String {
        format!(
            "apiserver_request_total{{code=\"{code}\",group=\"{group}\",resource=\"{resource}\",\
             subresource=\"{sub}\",verb=\"{verb}\"}} {n}\n"
        )
    }

    #[test]
    fn the_table_and_the_limits_come_from_the_counters() {
        let options = Options::parse(Vec::new(), "scripts/bench-scale".into()).expect("defaults");
        let g = "example.kube-fsm.dev";
        let converged = [
            request("PATCH", g, "databases", "status", "200", 400),
            request("PATCH", g, "databases", "", "200", 200),
            request("APPLY", "", "configmaps", "", "200", 200),
            request("POST", g, "databases", "", "201", 200),
        ]
        .concat();
        let engine = "controller_runtime_reconcile_total{controller=\"database\",result=\"success\"} 600\n\
                      kube_fsm_reconcile_duration_seconds_count{machine=\"Database\",phase=\"Provisioning\"} 200\n\
                      kube_fsm_reconcile_duration_seconds_count{machine=\"Database\",phase=\"Running\"} 200\n\
                      kube_fsm_status_writes_total{machine=\"Database\"} 400\n";
        let r0 = reading("", "", 0);
        let r1 = reading(&converged, engine, 400);
        let windows: Vec<Window> = [
            "create → all Running",
            "settle 5 s",
            "idle",
            "restart",
            "delete all",
        ]
        .into_iter()
        .map(|name| {
            Window::between(
                name,
                &r0,
                if name.starts_with("create") { &r1 } else { &r0 },
            )
        })
        .collect();
        let mut report = Report {
            options: &options,
            server: "1.20".into(),
            git_version: "v1.20.2".into(),
            created_in: Duration::from_millis(500),
            to_running: Duration::from_millis(1400),
            windows: &windows,
            convergence: Window::between("convergence", &r0, &r1),
            all_reconciled: true,
            children_left: 0,
        };
        assert!(report.within_limits());
        let markdown = report.markdown();
        for line in [
            "| status PATCH (databases/status) | 400 then 0 | 400 | 0 | 0 | 0 | 0 |",
            "| child applies (configmaps APPLY) | – | 200 | 0 | 0 | 0 | 0 |",
            "| engine: status writes / conflicts / transitions / failed reconciles | – | 400 / 0 / 0 / 0 | 0 / 0 / 0 / 0 |",
            "| engine: reconciles per phase (no status / Pending / Provisioning / Running / Degraded / Failed) | – | 200 / 0 / 200 / 200 / 0 / 0 | 0 / 0 / 0 / 0 / 0 / 0 |",
            "Per object to reach Running: 2.00 status writes (limit 2), 1.00 child writes (limit 1), 0 GETs of Databases (limit 0); writes while idle and after the restart: 0 (limit 0). **Within the limits.**",
            "- Outside the status limit: 200 metadata PATCHes of Databases (the finalizer) while converging.",
        ] {
            assert!(markdown.contains(line), "{line}\n---\n{markdown}");
        }
        report.all_reconciled = false;
        assert!(!report.within_limits());
        assert!(
            report
                .markdown()
                .contains("**Over the limits; see below.**")
        );
    }
}
