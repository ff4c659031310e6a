//! Installing a `tracing` subscriber: human-readable by default, JSON on request.

use tracing::level_filters::LevelFilter;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt;

/// The format of the operator's log lines.
///
/// ```
/// assert_eq!(kopf_runtime::LogFormat::default(), kopf_runtime::LogFormat::Human);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// One human-readable line per event, with the span fields (object, handler).
    #[default]
    Human,
    /// One JSON object per line, with the current span and the span list.
    Json,
}

/// Why logging could not be installed.
///
/// ```
/// let err = kopf_runtime::LoggingError::AlreadyInstalled;
/// assert_eq!(err.to_string(), "a global tracing subscriber is already installed");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoggingError {
    /// `RUST_LOG` is not a valid filter.
    #[error("RUST_LOG is not a valid filter")]
    Filter(#[source] tracing_subscriber::filter::FromEnvError),
    /// Another global subscriber is already installed.
    #[error("a global tracing subscriber is already installed")]
    AlreadyInstalled,
}

/// The filter without `RUST_LOG`: the operator's own lines at `info`, none of kube's client and
/// watcher (which, during an API-server outage, log an error per failed connection: the
/// operator reports the outage once, and its recovery once).
pub(crate) const DEFAULT_FILTER: &str = "info,kube_client=off,kube_runtime=off";

/// Whether human log lines get ANSI colours: only on a terminal, and not with `NO_COLOR` set
/// to anything but the empty string (<https://no-color.org>).
fn colours(terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Installs a global `tracing` subscriber that writes to stderr, filtered by `RUST_LOG`
/// (default: the operator's own lines at `info`; kube's client and watcher are silent unless
/// `RUST_LOG` names them, e.g. `RUST_LOG=info,kube=debug`). Human lines are coloured only on a
/// terminal, and never with `NO_COLOR` set.
///
/// # Errors
/// [`LoggingError`] if `RUST_LOG` is invalid or a subscriber is already installed.
///
/// ```
/// use kopf_runtime::{LogFormat, init_logging};
/// init_logging(LogFormat::Json).unwrap();
/// assert!(init_logging(LogFormat::Human).is_err()); // only once per process
/// ```
pub fn init_logging(format: LogFormat) -> Result<(), LoggingError> {
    init_logging_at(format, None)
}

/// [`init_logging`], with the operator's own lines at `level` (default `info`) when `RUST_LOG`
/// is not set.
pub(crate) fn init_logging_at(
    format: LogFormat,
    level: Option<LevelFilter>,
) -> Result<(), LoggingError> {
    let filter = match (std::env::var(EnvFilter::DEFAULT_ENV), level) {
        (Ok(_), _) => EnvFilter::try_from_default_env().map_err(LoggingError::Filter)?,
        (Err(_), None) => EnvFilter::new(DEFAULT_FILTER),
        (Err(_), Some(level)) => {
            EnvFilter::new(DEFAULT_FILTER.replacen("info", &level.to_string(), 1))
        }
    };
    let ansi = colours(
        std::io::IsTerminal::is_terminal(&std::io::stderr()),
        std::env::var_os("NO_COLOR"),
    );
    let builder = fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    let installed = match format {
        LogFormat::Human => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .try_init(),
    };
    installed.map_err(|_| LoggingError::AlreadyInstalled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_only_on_a_terminal_and_never_with_no_color() {
        assert!(colours(true, None));
        assert!(
            colours(true, Some("".into())),
            "an empty NO_COLOR does not count"
        );
        assert!(!colours(true, Some("1".into())));
        assert!(!colours(false, None), "a file or a pipe");
    }

    #[test]
    fn the_default_filter_silences_kube_but_not_the_operator() {
        let filter: EnvFilter = DEFAULT_FILTER.parse().unwrap();
        let text = filter.to_string();
        assert!(
            text.contains("kube_client=off") && text.contains("kube_runtime=off"),
            "{text}"
        );
        assert_eq!(
            filter.max_level_hint(),
            Some(tracing::level_filters::LevelFilter::INFO)
        );
    }
}
