//! Messages people read (conditions, Events, the command line): an error as a sentence — the
//! API server's own words for a refused request, not kube's `Debug` dump of its `Status` —
//! bounded to what a condition's message may hold.

use std::error::Error;

/// The longest message a condition may carry (apimachinery's `maxLength`).
pub const CONDITION_MESSAGE_LIMIT: usize = 32_768;

/// `error` as a sentence: its own text, each Kubernetes API error in its chain rewritten as the
/// API server said it (`configmaps "a" is forbidden: exceeded quota: q, … (Forbidden, HTTP
/// 403)`). kube displays such an error as `ApiError: <message>: <reason> (Status { … })`; an
/// error that shows it inline gets the sentence in its place, one that only keeps it as its
/// source gets the sentence after a colon.
pub fn sentence(error: &(dyn Error + 'static)) -> String {
    let mut text = error.to_string();
    let chain = std::iter::successors(Some(error), |&e| e.source());
    for link in chain {
        let Some(kube::Error::Api(status)) = link.downcast_ref::<kube::Error>() else {
            continue;
        };
        let raw = link.to_string();
        let said = refused(status);
        if text.contains(&raw) {
            text = text.replace(&raw, &said);
        } else if !text.contains(&status.message) {
            text = format!("{text}: {said}");
        }
    }
    text
}

/// What the API server said of a request it refused.
fn refused(status: &kube::core::Status) -> String {
    let message = if status.message.is_empty() {
        "the API server refused the request"
    } else {
        status.message.as_str()
    };
    match (status.reason.as_str(), status.code) {
        ("", 0) => message.to_owned(),
        ("", code) => format!("{message} (HTTP {code})"),
        (reason, 0) => format!("{message} ({reason})"),
        (reason, code) => format!("{message} ({reason}, HTTP {code})"),
    }
}

/// `message` cut to at most `limit` bytes (on a character boundary), with an ellipsis when cut.
pub fn bounded(mut message: String, limit: usize) -> String {
    const ELLIPSIS: &str = "…";
    if message.len() <= limit {
        return message;
    }
    let mut end = limit.saturating_sub(ELLIPSIS.len());
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message.truncate(end);
    message.push_str(ELLIPSIS);
    message
}

/// `duration` as the spec writes one: `500ms`, `30s`, `10m`, `1h30m`, `2m5s`.
pub fn duration(duration: std::time::Duration) -> String {
    let ms = duration.as_millis();
    if !ms.is_multiple_of(1000) {
        return format!("{ms}ms");
    }
    let secs = ms / 1000;
    let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    let mut out = String::new();
    for (value, unit) in [(h, "h"), (m, "m"), (s, "s")] {
        if value > 0 {
            out.push_str(&format!("{value}{unit}"));
        }
    }
    if out.is_empty() {
        out.push_str("0s");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_reads_as_the_spec_writes_it() {
        use std::time::Duration;
        for (d, text) in [
            (Duration::from_millis(500), "500ms"),
            (Duration::from_millis(1500), "1500ms"),
            (Duration::from_secs(30), "30s"),
            (Duration::from_secs(600), "10m"),
            (Duration::from_secs(5400), "1h30m"),
            (Duration::from_secs(125), "2m5s"),
            (Duration::ZERO, "0s"),
        ] {
            assert_eq!(duration(d), text);
        }
    }

    #[derive(Debug, thiserror::Error)]
    #[error("could not create its ConfigMap: {0}")]
    struct Inline(#[source] kube::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("could not create its ConfigMap")]
    struct Behind(#[source] kube::Error);

    fn quota() -> kube::Error {
        kube::Error::Api(
            kube::core::Status {
                status: Some(kube::core::response::StatusSummary::Failure),
                code: 403,
                message: r#"configmaps "c" is forbidden: exceeded quota: q"#.into(),
                reason: "Forbidden".into(),
                ..Default::default()
            }
            .boxed(),
        )
    }

    #[test]
    fn an_api_error_reads_as_the_api_server_said_it_wherever_it_sits() {
        let said = r#"could not create its ConfigMap: configmaps "c" is forbidden: exceeded quota: q (Forbidden, HTTP 403)"#;
        assert_eq!(sentence(&Inline(quota())), said);
        assert_eq!(sentence(&Behind(quota())), said);
        assert_eq!(
            sentence(&quota()),
            r#"configmaps "c" is forbidden: exceeded quota: q (Forbidden, HTTP 403)"#
        );
        for text in [sentence(&Inline(quota())), sentence(&quota())] {
            assert!(
                !text.contains("Status {") && !text.contains("ApiError"),
                "{text}"
            );
        }
    }

    #[test]
    fn other_errors_keep_their_own_words() {
        let plain = std::io::Error::other("the database said no");
        assert_eq!(sentence(&plain), "the database said no");
    }

    #[test]
    fn a_long_message_is_cut_on_a_character_boundary_with_an_ellipsis() {
        assert_eq!(bounded("short".into(), 10), "short");
        let cut = bounded("é".repeat(20), 11);
        assert!(cut.len() <= 11, "{}", cut.len());
        assert!(cut.ends_with('…'), "{cut}");
        assert_eq!(cut, "éééé…");
        let huge = bounded("x".repeat(100_000), CONDITION_MESSAGE_LIMIT);
        assert_eq!(huge.len(), CONDITION_MESSAGE_LIMIT);
    }
}
