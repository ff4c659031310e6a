//! Why an owner is triggered ([`ChildCause`]), the callbacks that trigger it, and how a failed
//! watch of children or related objects is logged.

use std::fmt;
use std::sync::Arc;

use kube::runtime::watcher;
use tracing::{debug, error};

use crate::operator::write::{Failure, classify, describe};

/// Why an owner is triggered: which object of which kind changed, and how it relates to it.
///
/// ```
/// use kopf_runtime::__private::children::{ChildCause, Via};
/// let cause = ChildCause {
///     via: Via::Child,
///     kind: "ConfigMap".into(),
///     namespace: Some("ns".into()),
///     name: "app-config".into(),
/// };
/// assert_eq!(cause.to_string(), "child ConfigMap ns/app-config");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildCause {
    /// A child or a related object.
    pub via: Via,
    /// The object's kind.
    pub kind: Arc<str>,
    /// The object's namespace (`None`: cluster-scoped).
    pub namespace: Option<String>,
    /// The object's name.
    pub name: String,
}

/// How the object that changed relates to the owner.
///
/// ```
/// assert_ne!(kopf_runtime::__private::children::Via::Child,
///     kopf_runtime::__private::children::Via::Related);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// Its `ownerReferences` name the owner.
    Child,
    /// The user's map function named the owner.
    Related,
}

impl fmt::Display for ChildCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let via = match self.via {
            Via::Child => "child",
            Via::Related => "related",
        };
        match &self.namespace {
            Some(ns) => write!(f, "{via} {} {ns}/{}", self.kind, self.name),
            None => write!(f, "{via} {} {}", self.kind, self.name),
        }
    }
}

/// Triggers the owner with this UID (a no-op for an owner the operator does not serve).
pub type OwnerTrigger = Arc<dyn Fn(&str, &ChildCause) + Send + Sync>;

/// Triggers the owner with this namespace and name (resolving it to a served owner, if any).
pub type NamedTrigger = Arc<dyn Fn(Option<&str>, &str, &ChildCause) + Send + Sync>;

/// Logs a failed watch stream, naming the kind: each new failure as an error, repeats of the
/// same one at debug level (the stream is retried with backoff). Returns what it failed with,
/// unless it merely expired.
pub(super) fn report_error(
    what: &str,
    err: &watcher::Error,
    last: &mut Option<String>,
) -> Option<String> {
    if let watcher::Error::WatchError(status) = err
        && status.code == 410
    {
        debug!(watch = %what, "the watch expired; relisting");
        return None;
    }
    let inner = match err {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => Some(e),
        _ => None,
    };
    let message = match inner {
        Some(e) => match classify(e) {
            Failure::NotFound => format!("{what}: the kind is not served (is its CRD applied?)"),
            Failure::Forbidden => format!("{what}: not permitted to list/watch: {}", describe(e)),
            _ => format!("{what}: {}", describe(e)),
        },
        None => format!("{what}: {err}"),
    };
    if last.as_deref() == Some(&message) {
        debug!(error = %message, "the watch failed again; retrying");
    } else {
        error!(error = %message, "the watch failed; retrying with backoff (the owners are still served)");
        *last = Some(message.clone());
    }
    Some(message)
}
