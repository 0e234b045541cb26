//! The API server's own request counters (`apiserver_request_total` on `/metrics`), read
//! through the client's credentials, to count what an operator really asked for.

use std::collections::BTreeMap;
use std::ops::Sub;

use kube::Client;

use crate::BoxError;

/// One series of `apiserver_request_total`, without the labels we do not split by.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
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

/// A reading of the counters.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Requests(pub BTreeMap<Key, u64>);

impl Requests {
    /// Reads the counters now.
    pub async fn scrape(client: &Client) -> Result<Self, BoxError> {
        let request = http::Request::get("/metrics").body(Vec::new())?;
        let text = client.request_text(request).await?;
        Ok(Self::parse(&text))
    }

    /// Parses the Prometheus text format, keeping `apiserver_request_total` only.
    pub fn parse(text: &str) -> Self {
        let mut out = BTreeMap::new();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
                continue;
            };
            let Some((labels, value)) = rest.rsplit_once('}') else {
                continue;
            };
            let Some(value) = value
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<f64>().ok())
            else {
                continue;
            };
            let labels = parse_labels(labels);
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

    /// The sum over series matching `verb`, `resource`, `subresource` (`None`: any) and a code
    /// starting with `code` (`""`: any). `resource` is `plural.group` for one group
    /// (`databases.example.kube-fsm.dev`) or a bare plural for any group (`configmaps`).
    pub fn count(&self, verb: &str, resource: &str, subresource: Option<&str>, code: &str) -> u64 {
        self.0
            .iter()
            .filter(|(k, _)| {
                k.verb == verb
                    && matches_resource(k, resource)
                    && subresource.is_none_or(|s| k.subresource == s)
                    && k.code.starts_with(code)
            })
            .map(|(_, v)| v)
            .sum()
    }

    /// The non-zero series, one per line: `PATCH databases/status 200: 400`.
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

/// `a="x",b="y\"z"` → {a: x, b: y"z}.
fn parse_labels(text: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut rest = text;
    while let Some((name, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, escaped)) = chars.next() {
                        value.push(if escaped == 'n' { '\n' } else { escaped });
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        labels.insert(name.trim_start_matches(',').trim().to_owned(), value);
        rest = &after[end..];
    }
    labels
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
        let later = Requests::parse(&SAMPLE.replace("} 400", "} 401"));
        let delta = &later - &r;
        assert_eq!(
            delta.lines(),
            ["PATCH databases.example.kube-fsm.dev/status 200: 1"]
        );
    }

    #[test]
    fn label_values_may_hold_escapes() {
        let labels = parse_labels(r#"a="x",b="y\"z,w",c="""#);
        assert_eq!(labels["a"], "x");
        assert_eq!(labels["b"], "y\"z,w");
        assert_eq!(labels["c"], "");
    }
}
