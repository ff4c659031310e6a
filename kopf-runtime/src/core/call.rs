//! What a handler's invocation hands back to the supervisor: the started work ([`Call`]) and
//! what a successful run produced ([`Output`]). Plain data, below the handler interface
//! (`erased.rs`) that returns it and the kinds' loops that pass it on.

use std::fmt;

use futures::future::BoxFuture;
use serde_json::Value;

use super::outcome::HandlerError;

/// What one successful invocation produced.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Output {
    /// A timer's result, stored under `status.<handler id>` (`None`: nothing to store).
    pub result: Option<Value>,
    /// A JSON merge patch the handler built, applied to the object after the run.
    pub patch: Option<Value>,
}

/// A started invocation: a future for async handlers, a closure for a dedicated thread for
/// blocking ones.
pub enum Call {
    /// An async handler's future. Dropping it cancels the handler at its next `.await`.
    Async(BoxFuture<'static, Result<Output, HandlerError>>),
    /// A blocking handler's body, run on its own thread; it can only be asked to stop.
    Blocking(Box<dyn FnOnce() -> Result<Output, HandlerError> + Send + 'static>),
}

impl fmt::Debug for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Async(_) => "Call::Async",
            Self::Blocking(_) => "Call::Blocking",
        })
    }
}
