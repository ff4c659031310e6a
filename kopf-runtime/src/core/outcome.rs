//! What a handler invocation produced: a value, or an error that says how to go on.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

/// The boxed cause of a [`HandlerError`].
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// How the framework should go on after a failed invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Retry after `delay` (daemons: in the same instance; timers: instead of the interval).
    /// Delays under one second are clamped to one second so a failing handler cannot busy-loop.
    Temporary {
        /// How long to wait before the next attempt.
        delay: Duration,
    },
    /// Do not retry: a daemon is done for this process, a timer stops for this object.
    Permanent,
    /// An arbitrary error, handled according to the handler's `errors` mode and `backoff`.
    Other,
    /// The invocation ran past the handler's `timeout` (handled like [`ErrorKind::Other`]).
    Timeout,
}

/// The error type of daemon and timer handlers.
///
/// Any `std::error::Error + Send + Sync` converts into it with `?` (as an arbitrary error);
/// [`HandlerError::temporary`] and [`HandlerError::permanent`] ask for a specific treatment.
///
/// ```
/// use kopf_runtime::{ErrorKind, HandlerError};
/// use std::time::Duration;
///
/// fn parse(s: &str) -> Result<u32, HandlerError> {
///     let n: u32 = s.parse()?; // ParseIntError -> arbitrary error
///     if n == 0 {
///         return Err(HandlerError::temporary("not ready yet", Duration::from_secs(10)));
///     }
///     Ok(n)
/// }
/// assert_eq!(parse("x").unwrap_err().kind(), ErrorKind::Other);
/// assert_eq!(
///     parse("0").unwrap_err().kind(),
///     ErrorKind::Temporary { delay: Duration::from_secs(10) }
/// );
/// ```
pub struct HandlerError {
    kind: ErrorKind,
    message: String,
    source: Option<BoxError>,
    /// The patch the failed invocation left pending, applied after the attempt.
    patch: Option<serde_json::Value>,
}

impl HandlerError {
    /// A temporary error: retry after `delay` (at least one second).
    ///
    /// ```
    /// # use kopf_runtime::HandlerError; use std::time::Duration;
    /// let e = HandlerError::temporary("busy", Duration::from_secs(5));
    /// assert_eq!(e.to_string(), "busy");
    /// ```
    #[must_use]
    pub fn temporary(message: impl fmt::Display, delay: Duration) -> Self {
        Self {
            kind: ErrorKind::Temporary { delay },
            message: message.to_string(),
            source: None,
            patch: None,
        }
    }

    /// A permanent error: no retries.
    ///
    /// ```
    /// # use kopf_runtime::{ErrorKind, HandlerError};
    /// assert_eq!(HandlerError::permanent("bad spec").kind(), ErrorKind::Permanent);
    /// ```
    #[must_use]
    pub fn permanent(message: impl fmt::Display) -> Self {
        Self {
            kind: ErrorKind::Permanent,
            message: message.to_string(),
            source: None,
            patch: None,
        }
    }

    /// An arbitrary error with a message, handled per the handler's `errors` mode.
    ///
    /// ```
    /// # use kopf_runtime::{ErrorKind, HandlerError};
    /// assert_eq!(HandlerError::msg("boom").kind(), ErrorKind::Other);
    /// ```
    #[must_use]
    pub fn msg(message: impl fmt::Display) -> Self {
        Self {
            kind: ErrorKind::Other,
            message: message.to_string(),
            source: None,
            patch: None,
        }
    }

    /// The error the framework reports when an invocation overran its `timeout`.
    ///
    /// ```
    /// # use kopf_runtime::{ErrorKind, HandlerError}; use std::time::Duration;
    /// let e = HandlerError::timeout(Duration::from_secs(3));
    /// assert_eq!(e.kind(), ErrorKind::Timeout);
    /// assert_eq!(e.to_string(), "the invocation ran past its timeout of 3s");
    /// ```
    #[must_use]
    pub fn timeout(limit: Duration) -> Self {
        Self {
            kind: ErrorKind::Timeout,
            message: format!("the invocation ran past its timeout of {limit:?}"),
            source: None,
            patch: None,
        }
    }

    /// Attaches a cause, kept as [`std::error::Error::source`].
    ///
    /// ```
    /// # use kopf_runtime::HandlerError;
    /// let io = std::io::Error::other("disk");
    /// let e = HandlerError::permanent("cannot store").with_source(io);
    /// assert_eq!(e.source().unwrap().to_string(), "disk");
    /// ```
    #[must_use]
    pub fn with_source(mut self, source: impl Into<BoxError>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// The failed invocation's pending patch, to apply after the attempt (as after a
    /// successful one).
    pub(crate) fn with_patch(mut self, patch: serde_json::Value) -> Self {
        self.patch = Some(patch);
        self
    }

    /// The patch a failed invocation left pending (see [`HandlerError::with_patch`]).
    pub(crate) fn patch(&self) -> Option<&serde_json::Value> {
        self.patch.as_ref()
    }

    /// How the framework treats this error.
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// Shortcut: whether this is [`ErrorKind::Permanent`].
    ///
    /// ```
    /// # use kopf_runtime::HandlerError;
    /// assert!(HandlerError::permanent("x").is_permanent());
    /// ```
    #[must_use]
    pub fn is_permanent(&self) -> bool {
        self.kind == ErrorKind::Permanent
    }

    /// The message and the chain of causes, joined with `: ` (for logs and Events).
    ///
    /// ```
    /// # use kopf_runtime::HandlerError;
    /// let e = HandlerError::msg("sync failed").with_source(std::io::Error::other("refused"));
    /// assert_eq!(e.report(), "sync failed: refused");
    /// ```
    #[must_use]
    pub fn report(&self) -> String {
        let mut out = self.message.clone();
        let mut next = self
            .source
            .as_deref()
            .map(|e| e as &(dyn StdError + 'static));
        while let Some(e) = next {
            out.push_str(": ");
            out.push_str(&e.to_string());
            next = e.source();
        }
        out
    }

    /// The source error as a trait object, for callers that need `std::error::Error`.
    #[must_use]
    pub fn source(&self) -> Option<&(dyn StdError + Send + Sync + 'static)> {
        self.source.as_deref()
    }
}

impl<E: StdError + Send + Sync + 'static> From<E> for HandlerError {
    fn from(err: E) -> Self {
        Self {
            kind: ErrorKind::Other,
            message: err.to_string(),
            source: err.source().map(|s| s.to_string().into()),
            patch: None,
        }
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerError")
            .field("kind", &self.kind)
            .field("message", &self.message)
            .field("source", &self.source)
            .finish()
    }
}

/// The result type of handlers: `HandlerResult` is `Result<(), HandlerError>`, and
/// `HandlerResult<T>` carries a value (timers store it under `status.<handler id>`).
pub type HandlerResult<T = ()> = Result<T, HandlerError>;
