//! Installing a `tracing` subscriber: human-readable by default, JSON on request.

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
pub enum LoggingError {
    /// `RUST_LOG` is not a valid filter.
    #[error("RUST_LOG is not a valid filter")]
    Filter(#[source] tracing_subscriber::filter::FromEnvError),
    /// Another global subscriber is already installed.
    #[error("a global tracing subscriber is already installed")]
    AlreadyInstalled,
}

/// Installs a global `tracing` subscriber that writes to stderr, filtered by `RUST_LOG`
/// (default `info`).
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
    let filter = match std::env::var(EnvFilter::DEFAULT_ENV) {
        Ok(_) => EnvFilter::try_from_default_env().map_err(LoggingError::Filter)?,
        Err(_) => EnvFilter::new("info"),
    };
    let builder = fmt().with_env_filter(filter).with_writer(std::io::stderr);
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
