//! Reading Prometheus text as a `/metrics` endpoint serves it, with one parser for tests and
//! benchmarks: the API server's request counters ([`Requests`], from `apiserver_request_total`,
//! to count what an operator really asked of the server) and the samples of any other family
//! ([`samples`], [`sum`]), e.g. an operator process's own metrics.

use std::collections::BTreeMap;
use std::ops::Sub;

use kube::Client;

/// The labels of one sample, by name.
pub type Labels = BTreeMap<String, String>;

/// The samples of `metric` in `text` (the Prometheus text format, prometheus-client's flavour
/// too): each series' labels and value. Only lines whose name is exactly `metric` count (`x_total` is not
/// `x_total_created`); comments, other families and unparsable lines are skipped.
#[must_use]
pub fn samples(text: &str, metric: &str) -> Vec<(Labels, f64)> {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(metric)?;
            let (labels, rest) = match rest.strip_prefix('{') {
                Some(inner) => parse_labels(inner)?,
                None if rest.starts_with(' ') => (Labels::new(), rest),
                None => return None,
            };
            let value = rest.split_whitespace().next()?.parse::<f64>().ok()?;
            Some((labels, value))
        })
        .collect()
}

/// The sum of the samples of `metric` in `text` whose labels include every `name = value`
/// pair of `labels`.
#[must_use]
pub fn sum(text: &str, metric: &str, labels: &[(&str, &str)]) -> f64 {
    samples(text, metric)
        .iter()
        .filter(|(have, _)| {
            labels
                .iter()
                .all(|(name, value)| have.get(*name).is_some_and(|v| v == value))
        })
        .map(|(_, value)| value)
        .sum()
}

/// Parses the labels after a series' `{` (`a="x",b="y\"z"}`), up to the closing `}`; returns
/// them and the text after the brace, or `None` when the braces or quotes do not close.
fn parse_labels(text: &str) -> Option<(Labels, &str)> {
    let mut labels = Labels::new();
    let mut rest = text;
    loop {
        rest = rest.trim_start_matches([',', ' ']);
        if let Some(after) = rest.strip_prefix('}') {
            return Some((labels, after));
        }
        let (name, after) = rest.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    let (_, escaped) = chars.next()?;
                    value.push(if escaped == 'n' { '\n' } else { escaped });
                }
                '"' => {
                    end = Some(i + 1);
                    break;
                }
                c => value.push(c),
            }
        }
        labels.insert(name.trim().to_owned(), value);
        rest = &after[end?..];
    }
}

/// One series of `apiserver_request_total`, without the labels we do not split by.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    /// `GET`, `LIST`, `WATCH`, `POST`, `PATCH`, `PUT`, `DELETE`, `APPLY`, ...
    pub verb: String,
    /// e.g. `databases`, `configmaps`, `events`.
    pub resource: String,
    /// The API group: `""` for the core group.
    pub group: String,
    /// e.g. `status`, or empty.
    pub subresource: String,
    /// The HTTP status code.
    pub code: String,
}

impl Key {
    /// The value of the label `name`, for the labels a key keeps.
    fn label(&self, name: &str) -> Option<&str> {
        Some(match name {
            "verb" => &self.verb,
            "resource" => &self.resource,
            "group" => &self.group,
            "subresource" => &self.subresource,
            "code" => &self.code,
            _ => return None,
        })
    }
}

/// A reading of the API server's request counters (`apiserver_request_total`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Requests(pub BTreeMap<Key, u64>);

impl Requests {
    /// Reads the counters now from the API server's `/metrics`, with `client`'s credentials.
    ///
    /// # Errors
    /// When `/metrics` cannot be read (a managed cluster may not serve it to this user).
    pub async fn scrape(client: &Client) -> Result<Self, kube::Error> {
        let request = http::Request::get("/metrics")
            .body(Vec::new())
            .map_err(kube::Error::HttpError)?;
        Ok(Self::parse(&client.request_text(request).await?))
    }

    /// Parses the Prometheus text format, keeping `apiserver_request_total` only.
    #[must_use]
    pub fn parse(text: &str) -> Self {
        let mut out = BTreeMap::new();
        for (labels, value) in samples(text, "apiserver_request_total") {
            let get = |name: &str| labels.get(name).cloned().unwrap_or_default();
            let key = Key {
                verb: get("verb"),
                resource: get("resource"),
                group: get("group"),
                subresource: get("subresource"),
                code: get("code"),
            };
            // Counters are integral; f64 holds them exactly far beyond what a run makes.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let value = value as u64;
            *out.entry(key).or_insert(0) += value;
        }
        Requests(out)
    }

    /// The sum over the series for which `keep` holds.
    pub fn sum(&self, keep: impl Fn(&Key) -> bool) -> u64 {
        self.0.iter().filter(|(k, _)| keep(k)).map(|(_, v)| v).sum()
    }

    /// The sum over series matching `verb`, `resource`, `subresource` (`None`: any) and a code
    /// starting with `code` (`""`: any). `resource` is `plural.group` for one group
    /// (`databases.example.kube-fsm.dev`) or a bare plural for any group (`configmaps`).
    #[must_use]
    pub fn count(&self, verb: &str, resource: &str, subresource: Option<&str>, code: &str) -> u64 {
        self.sum(|k| {
            k.verb == verb
                && matches_resource(k, resource)
                && subresource.is_none_or(|s| k.subresource == s)
                && k.code.starts_with(code)
        })
    }

    /// The sum over series whose labels have every `name = value` pair given, e.g.
    /// `[("resource", "databases"), ("subresource", "status"), ("verb", "PATCH")]`.
    ///
    /// # Panics
    /// When a name is not one of the labels kept: `verb`, `resource`, `group`, `subresource`,
    /// `code`.
    #[must_use]
    pub fn matching(&self, labels: &[(&str, &str)]) -> u64 {
        for (name, _) in labels {
            assert!(
                Key::default().label(name).is_some(),
                "apiserver_request_total is read without its {name:?} label"
            );
        }
        self.sum(|k| {
            labels
                .iter()
                .all(|(name, value)| k.label(name) == Some(*value))
        })
    }

    /// The non-zero series, one per line: `PATCH databases/status 200: 400`.
    #[must_use]
    pub fn lines(&self) -> Vec<String> {
        self.0
            .iter()
            .filter(|(_, v)| **v > 0)
            .map(|(k, v)| {
                let sub = if k.subresource.is_empty() {
                    String::new()
                } else {
                    format!("/{}", k.subresource)
                };
                let group = if k.group.is_empty() {
                    String::new()
                } else {
                    format!(".{}", k.group)
                };
                format!("{} {}{group}{sub} {}: {v}", k.verb, k.resource, k.code)
            })
            .collect()
    }
}

impl Sub for &Requests {
    type Output = Requests;

    /// The requests made between two readings.
    fn sub(self, earlier: &Requests) -> Requests {
        Requests(
            self.0
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v.saturating_sub(earlier.0.get(k).copied().unwrap_or(0)),
                    )
                })
                .filter(|(_, v)| *v > 0)
                .collect(),
        )
    }
}

fn matches_resource(key: &Key, resource: &str) -> bool {
    match resource.split_once('.') {
        Some((plural, group)) => key.resource == plural && key.group == group,
        None => key.resource == resource,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",contentType="application/json",dry_run="",group="example.kube-fsm.dev",resource="databases",scope="resource",subresource="status",verb="PATCH",version="v1"} 400
apiserver_request_total{code="409",component="apiserver",contentType="application/json",dry_run="",group="example.kube-fsm.dev",resource="databases",scope="resource",subresource="status",verb="PATCH",version="v1"} 3
apiserver_request_total{code="201",component="apiserver",contentType="application/json",dry_run="",group="",resource="configmaps",scope="resource",subresource="",verb="POST",version="v1"} 2e+02
apiserver_request_total{code="200",component="",contentType="",dry_run="",group="",resource="",scope="",subresource="/metrics",verb="GET",version=""} 7
apiserver_request_total_created{code="200"} 1.7e9
apiserver_request_duration_seconds_bucket{le="0.1"} 9
"#;

    #[test]
    fn parses_and_sums_request_counters() {
        let r = Requests::parse(SAMPLE);
        let dbs = "databases.example.kube-fsm.dev";
        assert_eq!(r.count("PATCH", dbs, Some("status"), ""), 403);
        assert_eq!(r.count("PATCH", dbs, Some("status"), "2"), 400);
        assert_eq!(r.count("PATCH", dbs, Some(""), ""), 0);
        assert_eq!(r.count("PATCH", "databases.other.example", None, ""), 0);
        assert_eq!(r.count("PATCH", "databases", None, ""), 403);
        assert_eq!(r.count("POST", "configmaps", None, ""), 200);
        assert_eq!(r.sum(|k| k.verb == "GET"), 7);
        let later = Requests::parse(&SAMPLE.replace("} 400", "} 401"));
        let delta = &later - &r;
        assert_eq!(
            delta.lines(),
            ["PATCH databases.example.kube-fsm.dev/status 200: 1"]
        );
    }

    #[test]
    fn counts_by_label_pairs() {
        let r = Requests::parse(SAMPLE);
        let patches = [
            ("resource", "databases"),
            ("subresource", "status"),
            ("verb", "PATCH"),
        ];
        assert_eq!(r.matching(&patches), 403);
        assert_eq!(r.matching(&[("code", "409")]), 3);
        assert_eq!(
            r.matching(&[("resource", "configmaps"), ("subresource", "")]),
            200
        );
        assert_eq!(r.matching(&[]), 610);
    }

    #[test]
    #[should_panic(expected = "without its \"scope\" label")]
    fn a_label_not_kept_is_refused() {
        let _ = Requests::parse(SAMPLE).matching(&[("scope", "resource")]);
    }

    #[test]
    fn label_values_may_hold_escapes_and_braces() {
        let (labels, rest) = parse_labels(r#"a="x",b="y\"z,w}",c=""} 5"#).expect("closes");
        assert_eq!(labels["a"], "x");
        assert_eq!(labels["b"], "y\"z,w}");
        assert_eq!(labels["c"], "");
        assert_eq!(rest, " 5");
        assert_eq!(parse_labels(r#"a="x"#), None, "an open quote");
        assert_eq!(parse_labels(r#"a="x""#), None, "no closing brace");
    }

    /// An operator's `/metrics` as prometheus-client encodes it (with `# EOF`, and an exemplar).
    const ENGINE: &str = r#"# HELP controller_runtime_reconcile Reconciliations per controller and result.
# TYPE controller_runtime_reconcile counter
controller_runtime_reconcile_total{controller="database",result="success"} 12
controller_runtime_reconcile_total{controller="database",result="error"} 1
# TYPE kube_fsm_reconcile_duration_seconds histogram
kube_fsm_reconcile_duration_seconds_sum{machine="Database",phase="Running"} 0.25
kube_fsm_reconcile_duration_seconds_count{machine="Database",phase="Running"} 4
kube_fsm_reconcile_duration_seconds_bucket{le="0.005",machine="Database",phase="Running"} 4 # {trace_id="a}"} 0.001
kube_fsm_reconcile_duration_seconds_count{machine="Database",phase="Provisioning"} 5
kube_fsm_status_writes_total{machine="Database"} 10
kube_fsm_connected 1
# EOF
"#;

    #[test]
    #[allow(clippy::float_cmp)] // small whole numbers: exact in f64
    fn reads_any_family() {
        let reconciles = "controller_runtime_reconcile_total";
        assert_eq!(sum(ENGINE, reconciles, &[]), 13.0);
        assert_eq!(sum(ENGINE, reconciles, &[("result", "error")]), 1.0);
        let count = "kube_fsm_reconcile_duration_seconds_count";
        assert_eq!(sum(ENGINE, count, &[("phase", "Running")]), 4.0);
        assert_eq!(sum(ENGINE, count, &[("machine", "Database")]), 9.0);
        assert_eq!(sum(ENGINE, count, &[("machine", "Other")]), 0.0);
        assert_eq!(
            samples(ENGINE, "kube_fsm_connected"),
            [(Labels::new(), 1.0)]
        );
        let buckets = samples(ENGINE, "kube_fsm_reconcile_duration_seconds_bucket");
        assert_eq!(buckets.len(), 1, "the exemplar's braces do not confuse it");
        assert_eq!(buckets[0].1, 4.0);
        assert!(
            samples(ENGINE, "kube_fsm_status_writes").is_empty(),
            "exact names"
        );
    }
}
