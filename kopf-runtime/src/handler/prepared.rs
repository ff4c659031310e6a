//! One invocation as generated code runs it: injection context, the per-object span, the
//! patch, and turning the user's return value into an [`Output`].

use std::future::Future;
use std::sync::{Arc, OnceLock};

use serde::Serialize;
use serde_json::Value;
use tracing::Instrument;

use super::patch::Patch;
use crate::core::erased::{Call, Invocation, Output};
use crate::core::outcome::HandlerError;

/// Per-invocation values that injection reads from the invocation's scoped service. The patch
/// is made when a parameter asks for it: most handlers never patch their object.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    patch: OnceLock<Patch>,
}

impl Scratch {
    /// The invocation's patch, made on first use.
    pub(crate) fn patch(&self, invocation: &Invocation) -> Patch {
        self.patch
            .get_or_init(|| Patch::for_invocation(invocation))
            .clone()
    }
}

/// One invocation being prepared by generated code: the [`Invocation`] its parameters are
/// injected from, the per-invocation scratch space that makes the [`Patch`] injectable, and the
/// instance's span the handler runs in. `#[daemon]` and `#[timer]` make one in every
/// `invoke`, inject the parameters from [`PreparedCall::invocation`], then turn the user's call
/// into a [`Call`] with [`PreparedCall::run_async`] or [`PreparedCall::run_blocking`]. Not for
/// direct use: a hand-written handler builds its [`Call`] itself.
#[derive(Debug)]
pub struct PreparedCall {
    /// Its span is moved into the call (not cloned): the rest is dropped before the handler runs.
    invocation: Invocation,
    scratch: Arc<Scratch>,
}

impl PreparedCall {
    /// Prepares the invocation: the patch becomes injectable, and the handler will run in the
    /// instance's span.
    #[must_use]
    pub fn new(mut invocation: Invocation) -> Self {
        let scratch = Arc::new(Scratch::default());
        // Scoped: inserting into the shared map would copy it on every invocation.
        invocation.services.insert_scoped_arc(Arc::clone(&scratch));
        Self {
            invocation,
            scratch,
        }
    }

    /// What parameters are injected from.
    #[must_use]
    pub fn invocation(&self) -> &Invocation {
        &self.invocation
    }

    /// Wraps an async handler's future (already converted by [`HandlerReturn`]).
    pub fn run_async<F>(self, future: F) -> Call
    where
        F: Future<Output = Result<Option<Value>, HandlerError>> + Send + 'static,
    {
        let Self {
            scratch,
            invocation,
        } = self;
        let span = invocation.span;
        Call::Async(Box::pin(
            async move { finish(&scratch, future.await) }.instrument(span),
        ))
    }

    /// Wraps a blocking handler's body (already converted by [`HandlerReturn`]).
    pub fn run_blocking<F>(self, body: F) -> Call
    where
        F: FnOnce() -> Result<Option<Value>, HandlerError> + Send + 'static,
    {
        let Self {
            scratch,
            invocation,
        } = self;
        let span = invocation.span;
        Call::Blocking(Box::new(move || span.in_scope(|| finish(&scratch, body()))))
    }
}

fn finish(
    scratch: &Scratch,
    result: Result<Option<Value>, HandlerError>,
) -> Result<Output, HandlerError> {
    let patch = match scratch.patch.get() {
        Some(patch) => patch.take(),
        None => Ok(None),
    };
    // The pending patch is applied after every attempt, a failed one's too (as kopf does).
    match (result, patch) {
        (Ok(result), Ok(patch)) => Ok(Output { result, patch }),
        (Err(err), Ok(Some(patch))) => Err(err.with_patch(patch)),
        (Err(err), _) => Err(err),
        (Ok(_), Err(invalid)) => Err(HandlerError::permanent(invalid)),
    }
}

/// Converts a handler's return value: `()` or `Result<(), E>` for daemons, and also
/// `Result<T, E>` with `T: Serialize` for timers and change handlers (`Kind` is
/// [`DaemonKind`], [`TimerKind`] or [`ChangeHandlerKind`]).
///
/// ```
/// use kopf_runtime::__private::{DaemonKind, HandlerReturn, TimerKind};
/// assert_eq!(HandlerReturn::<DaemonKind>::into_result(()).unwrap(), None);
/// let ok: Result<u32, std::io::Error> = Ok(7);
/// assert_eq!(HandlerReturn::<TimerKind>::into_result(ok).unwrap(), Some(serde_json::json!(7)));
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a valid return type for this handler",
    label = "invalid handler return type",
    note = "daemons return `()` or `Result<(), E>`; timers and change handlers return `()` or \
            `Result<T, E>` with `T: serde::Serialize` (stored under `status.<handler id>`); `E` must convert into \
            `kopf_runtime::HandlerError` (any `std::error::Error + Send + Sync + 'static` does)"
)]
pub trait HandlerReturn<Kind> {
    /// The value to store (`None`: nothing), or the error.
    ///
    /// # Errors
    /// The handler's error, converted.
    fn into_result(self) -> Result<Option<Value>, HandlerError>;
}

/// Marker for [`HandlerReturn`]: the rules for `#[daemon]`.
#[derive(Debug)]
pub enum DaemonKind {}

/// Marker for [`HandlerReturn`]: the rules for `#[timer]`.
#[derive(Debug)]
pub enum TimerKind {}

/// Marker for [`HandlerReturn`]: the rules for the change handlers (`#[on_create]`,
/// `#[on_update]`, `#[on_delete]`, `#[on_resume]`), which are the timers' rules: `()`, or a
/// value to store under `status.<handler id>`.
///
/// ```
/// use kopf_runtime::__private::{ChangeHandlerKind, HandlerReturn};
/// let ok: Result<&str, std::io::Error> = Ok("made");
/// assert_eq!(HandlerReturn::<ChangeHandlerKind>::into_result(ok).unwrap(), Some(serde_json::json!("made")));
/// ```
#[derive(Debug)]
pub enum ChangeHandlerKind {}

#[diagnostic::do_not_recommend]
impl<T: Serialize, E: Into<HandlerError>> HandlerReturn<ChangeHandlerKind> for Result<T, E> {
    fn into_result(self) -> Result<Option<Value>, HandlerError> {
        <Self as HandlerReturn<TimerKind>>::into_result(self)
    }
}

impl<Kind> HandlerReturn<Kind> for () {
    fn into_result(self) -> Result<Option<Value>, HandlerError> {
        Ok(None)
    }
}

#[diagnostic::do_not_recommend]
impl<E: Into<HandlerError>> HandlerReturn<DaemonKind> for Result<(), E> {
    fn into_result(self) -> Result<Option<Value>, HandlerError> {
        self.map(|()| None).map_err(Into::into)
    }
}

#[diagnostic::do_not_recommend]
impl<T: Serialize, E: Into<HandlerError>> HandlerReturn<TimerKind> for Result<T, E> {
    fn into_result(self) -> Result<Option<Value>, HandlerError> {
        let value = self.map_err(Into::into)?;
        let value = serde_json::to_value(value).map_err(|e| {
            HandlerError::permanent("the timer's result cannot be serialized").with_source(e)
        })?;
        Ok((!value.is_null()).then_some(value))
    }
}
