//! `run`'s log lines: a filter (a level or `RUST_LOG` directives) and a format, on stderr.

use tracing_subscriber::EnvFilter;

use super::CliError;
use super::args::LogFormat;

/// Installs the process's subscriber; one already installed (the program's own) is kept.
pub(super) fn init(level: &str, format: LogFormat) -> Result<(), CliError> {
    let filter = EnvFilter::try_new(level).map_err(|err| {
        CliError::Invalid(format!("--log-level {level:?} is not a filter: {err}"))
    })?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    if installed.is_err() {
        tracing::debug!(
            "a tracing subscriber was already installed; --log-level and --log-format do not apply"
        );
    }
    Ok(())
}
