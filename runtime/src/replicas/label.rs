//! Text made into a name other systems accept as an identifier part (a Lease's name, a
//! Grafana dashboard's uid).

/// `text` in lower case, every character outside `[a-z0-9]` a dash, at most `max` characters,
/// no dash at either end: a DNS label's part.
pub fn dns_label(text: &str, max: usize) -> String {
    let label: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(max)
        .collect();
    label.trim_matches('-').to_owned()
}

#[cfg(test)]
mod tests {
    use super::dns_label;

    #[test]
    fn lower_case_dashes_bounded_and_trimmed() {
        assert_eq!(dns_label("Pod_A.1", 63), "pod-a-1");
        assert_eq!(dns_label("-Database operator-", 63), "database-operator");
        assert_eq!(dns_label("abcdef-gh", 7), "abcdef");
        assert_eq!(dns_label("", 5), "");
    }
}
