//! `ChildError`: why a child could not be written or read, naming the child and its owner, and
//! how it becomes a [`HandlerError`] (temporary, permanent, or arbitrary).

use std::fmt;
use std::time::Duration;

use crate::core::outcome::HandlerError;

/// Why a child could not be written (or read), naming the child and its owner.
///
/// With `?` in a handler it becomes a [`HandlerError`]: temporary for a 409 conflict, a 429
/// (after its `Retry-After`), a 5xx and a transport failure; permanent for a 422 (the child
/// is invalid: the server's message says why), for a child that cannot belong to the owner,
/// and for one that does not encode; any other failure (403, 404, a request deadline, a write
/// refused because the replica does not lead) an arbitrary error, retried with the handler's
/// backoff.
///
/// It deliberately does not implement `std::error::Error`: [`HandlerError`] converts from any
/// error type as an arbitrary error, which would lose that mapping.
///
/// ```
/// use kopf_runtime::{ChildError, ErrorKind, HandlerError};
///
/// let err = ChildError::Unfit {
///     child: "ConfigMap other/app-config".into(),
///     owner: "App ns/app".into(),
///     reason: "a namespaced owner can only own children in its own namespace".into(),
/// };
/// let handler_error: HandlerError = err.into();
/// assert_eq!(handler_error.kind(), ErrorKind::Permanent);
/// assert!(handler_error.to_string().contains("ConfigMap other/app-config"));
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum ChildError {
    /// The API server refused the request, or it did not reach the server.
    Api {
        /// The child, as `Kind namespace/name`.
        child: String,
        /// The owner, as `Kind namespace/name`.
        owner: String,
        /// The client's error.
        source: kube::Error,
    },
    /// The child cannot belong to the owner (scopes, namespaces, another controller).
    Unfit {
        /// The child, as `Kind namespace/name`.
        child: String,
        /// The owner, as `Kind namespace/name`.
        owner: String,
        /// Why.
        reason: String,
    },
    /// The child does not encode to JSON, or the server's answer does not decode into its type.
    Encoding {
        /// The child, as `Kind namespace/name`.
        child: String,
        /// The owner, as `Kind namespace/name`.
        owner: String,
        /// The serializer's message.
        reason: String,
    },
}

impl ChildError {
    /// The HTTP status of the API server's answer, if it gave one.
    ///
    /// ```
    /// let err = kopf_runtime::ChildError::Encoding {
    ///     child: "ConfigMap ns/a".into(), owner: "App ns/a".into(), reason: "bad".into() };
    /// assert_eq!(err.status_code(), None);
    /// ```
    #[must_use]
    pub fn status_code(&self) -> Option<u16> {
        match self {
            Self::Api {
                source: kube::Error::Api(status),
                ..
            } => Some(status.code),
            _ => None,
        }
    }

    /// How a handler goes on after this error (see [`ChildError`]).
    fn handling(&self) -> Handling {
        let Self::Api { source, .. } = self else {
            return Handling::Permanent;
        };
        match source {
            kube::Error::Api(status) => {
                let after = status
                    .details
                    .as_ref()
                    .map(|d| d.retry_after_seconds)
                    .filter(|s| *s > 0)
                    .map(|s| Duration::from_secs(u64::from(s)));
                match status.code {
                    409 => Handling::Temporary(CONFLICT_RETRY),
                    429 | 500..=599 => Handling::Temporary(after.unwrap_or(BUSY_RETRY)),
                    422 => Handling::Permanent,
                    _ => Handling::Other,
                }
            }
            kube::Error::HyperError(_) | kube::Error::ReadEvents(_) => {
                Handling::Temporary(BUSY_RETRY)
            }
            // A request deadline, or the fence of a replica that does not lead: the handler's
            // own backoff.
            _ => Handling::Other,
        }
    }
}

/// How soon a write that lost a conflict is tried again.
const CONFLICT_RETRY: Duration = Duration::from_secs(1);
/// How soon a write the server was too busy for (without a `Retry-After`) is tried again.
const BUSY_RETRY: Duration = Duration::from_secs(5);

enum Handling {
    Temporary(Duration),
    Permanent,
    Other,
}

impl fmt::Display for ChildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Api {
                child,
                owner,
                source,
            } => {
                write!(f, "cannot write {child} (a child of {owner}): ")?;
                match source {
                    kube::Error::Api(s) if !s.message.is_empty() => {
                        write!(f, "{} ({}): {}", s.code, s.reason, s.message)
                    }
                    other => write!(f, "{other}"),
                }
            }
            Self::Unfit {
                child,
                owner,
                reason,
            } => write!(f, "{child} cannot be a child of {owner}: {reason}"),
            Self::Encoding {
                child,
                owner,
                reason,
            } => write!(
                f,
                "cannot encode or decode {child} (a child of {owner}): {reason}"
            ),
        }
    }
}

impl From<ChildError> for HandlerError {
    fn from(err: ChildError) -> Self {
        let message = err.to_string();
        match err.handling() {
            Handling::Temporary(delay) => Self::temporary(message, delay),
            Handling::Permanent => Self::permanent(message),
            Handling::Other => Self::msg(message),
        }
    }
}
