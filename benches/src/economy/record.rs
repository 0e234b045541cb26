//! Recording a run: the machine and date it names, and replacing its section of a markdown
//! file (e.g. BENCHMARKS.md) in place.

use crate::example::BoxError;

/// The machine, as the report names it: `2 × Intel(R) Xeon(R) Processor, rustc 1.95.0 (...)`.
#[must_use]
pub fn machine() -> String {
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

/// Today's date, `2026-11-30`.
#[must_use]
pub fn today() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%d")
        .to_string()
}

/// Replaces the section under `heading` in the markdown file at `path` (or appends it), with
/// one atomic rename, so a concurrent reader never sees half a file.
///
/// # Errors
/// When the file cannot be read or written.
pub fn record(path: &str, heading: &str, section: &str) -> Result<(), BoxError> {
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
