//! Parameter injection: every handler parameter is built from the invocation by its type.

use std::any::type_name;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use tokio::time::Instant;

use super::live::Live;
use super::patch::Patch;
use super::prepared::Scratch;
use crate::core::erased::Invocation;
use crate::core::object::ObjectRef;
use crate::core::outcome::HandlerError;
use crate::core::stop::Stopper;

/// A type a handler parameter can have: it is built from the [`Invocation`] for handlers whose
/// resource type is `K`.
///
/// The framework implements it for `Arc<K>`, [`Live<K>`], [`Stopper`], [`Patch`],
/// `kube::Client`, [`ObjectRef`], `tracing::Span`, [`Retry`], [`Started`], [`Runtime`],
/// [`Events`](crate::Events), [`Memo<T>`](crate::Memo), [`Data<T>`] and
/// [`Children<K>`](crate::Children). Implement it for your
/// own types to inject them too.
///
/// ```
/// use kopf_runtime::{HandlerError, Inject};
/// use kopf_runtime::engine::Invocation;
///
/// /// The object's name, as a parameter.
/// struct Name(String);
///
/// impl<K> Inject<K> for Name {
///     fn inject(invocation: &Invocation) -> Result<Self, HandlerError> {
///         Ok(Name(invocation.object.reference().name.to_string()))
///     }
/// }
///
/// # let object = std::sync::Arc::new(kopf_runtime::engine::ObjectState::from_json(
/// #     serde_json::json!({"metadata": {"name": "a", "uid": "u"}})).unwrap());
/// # let (_tx, live) = kopf_runtime::engine::ObjectWatch::channel(object.clone());
/// # let invocation = Invocation { object, live, stopper: kopf_runtime::Stopper::new(),
/// #     retry: 0, started: tokio::time::Instant::now(), services: Default::default(),
/// #     span: tracing::Span::none(), memo: Default::default(), occurrence: None, change: None };
/// let Name(name) = <Name as Inject<()>>::inject(&invocation).unwrap();
/// assert_eq!(name, "a");
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be injected into a handler of `{K}`",
    label = "not an injectable parameter type",
    note = "handler parameters are injected by type; injectable are: `Arc<{K}>` (the object), \
            `Live<{K}>` (the latest object), `Stopper`, `Patch`, `kube::Client`, `ObjectRef`, \
            `tracing::Span` (the per-object logger), `Retry`, `Started`, `Runtime`, `Events`, \
            `Memo<T>` (per-object state), `Data<T>` (shared state inserted into the operator), \
            and in `#[on_update]` handlers `Old<{K}>`, `Diff` and `FieldChange<T>`"
)]
pub trait Inject<K>: Sized {
    /// Builds the parameter for this invocation.
    ///
    /// # Errors
    /// A [`HandlerError`] when the value is not available (e.g. a missing service); the
    /// invocation then fails without running the handler.
    fn inject(invocation: &Invocation) -> Result<Self, HandlerError>;
}

/// Marks parameter types that blocking (`fn`) handlers may take. Every injectable the
/// framework provides has it (in a blocking handler, `Live::get` and `Events::info_blocking` are
/// the ways to use `Live` and `Events`); an injectable of your own that only works in async code
/// leaves it out, and a blocking handler taking it does not compile.
///
/// ```
/// fn blocking_safe<T: kopf_runtime::BlockingSafe>() {}
/// blocking_safe::<kopf_runtime::Stopper>();
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` can only be used in an `async fn` handler",
    label = "async-only parameter in a blocking handler",
    note = "a plain `fn` handler runs on its own thread and cannot await; this type works only \
            in async code (it does not implement `BlockingSafe`): make the handler an `async fn`"
)]
pub trait BlockingSafe {}

/// Compile-time check emitted for each parameter of a blocking handler.
#[doc(hidden)]
pub const fn assert_blocking_safe<T: BlockingSafe>() {}

/// Which attempt of the current cycle this is, from 0 (kopf's `retry`).
///
/// ```
/// let retry = kopf_runtime::Retry(0);
/// assert!(retry.is_first());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Retry(pub u32);

impl Retry {
    /// Whether this is the first attempt.
    #[must_use]
    pub fn is_first(self) -> bool {
        self.0 == 0
    }
}

/// When the first attempt of the current cycle started (kopf's `started`), in tokio time.
///
/// ```
/// let started = kopf_runtime::Started(tokio::time::Instant::now());
/// assert!(started.0.elapsed() < std::time::Duration::from_secs(60));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Started(pub Instant);

/// How long the current cycle has been running when this invocation started (kopf's
/// `runtime`): the time since [`Started`].
///
/// ```
/// let runtime = kopf_runtime::Runtime(std::time::Duration::from_secs(5));
/// assert_eq!(runtime.0.as_secs(), 5);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Runtime(pub Duration);

/// The occurrence a cron timer's run is for (`#[timer(cron = ...)]`): the wall-clock time the
/// schedule named, also when the run starts later (jitter, a retry, or `missed = "run_once"`
/// catching up). Only cron timers have one; another handler asking for it fails.
///
/// ```
/// let occurrence = kopf_runtime::Occurrence("2026-12-02T03:00:00Z".parse().unwrap());
/// assert_eq!(occurrence.0.to_string(), "2026-12-02T03:00:00Z");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Occurrence(pub jiff::Timestamp);

/// Shared state of the operator, of type `T`, given to every handler that asks for it. Put
/// the value into the operator's services (`services.insert(value)`); a handler asking for a
/// type nobody inserted fails with an error naming it.
///
/// ```
/// use kopf_runtime::{Data, Inject, Stopper};
/// use kopf_runtime::engine::{Invocation, Services};
/// # use std::sync::Arc;
/// struct Settings { greeting: String }
///
/// let mut services = Services::default();
/// services.insert(Settings { greeting: "hi".into() });
/// # let object = Arc::new(kopf_runtime::engine::ObjectState::from_json(
/// #     serde_json::json!({"metadata": {"name": "a", "uid": "u"}})).unwrap());
/// # let (_tx, live) = kopf_runtime::engine::ObjectWatch::channel(object.clone());
/// # let invocation = Invocation { object, live, stopper: Stopper::new(), retry: 0,
/// #     started: tokio::time::Instant::now(), services, span: tracing::Span::none(),
/// #     memo: Default::default(), occurrence: None, change: None };
/// let settings = <Data<Settings> as Inject<()>>::inject(&invocation).unwrap();
/// assert_eq!(settings.greeting, "hi");
/// ```
pub struct Data<T: ?Sized>(Arc<T>);

impl<T: ?Sized> Data<T> {
    /// Wraps shared state (as injection does).
    #[must_use]
    pub fn new(value: Arc<T>) -> Self {
        Self(value)
    }

    /// The shared `Arc`.
    #[must_use]
    pub fn into_inner(self) -> Arc<T> {
        self.0
    }
}

impl<T: ?Sized> Clone for Data<T> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<T: ?Sized> Deref for Data<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for Data<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Data").field(&&*self.0).finish()
    }
}

fn service<T: Send + Sync + 'static>(invocation: &Invocation) -> Result<Arc<T>, HandlerError> {
    invocation.services.get::<T>().ok_or_else(|| {
        HandlerError::permanent(format!(
            "no `{}` was given to the operator; insert it into the operator's services",
            type_name::<T>()
        ))
    })
}

impl<K, T: Send + Sync + 'static> Inject<K> for Data<T> {
    fn inject(invocation: &Invocation) -> Result<Self, HandlerError> {
        service::<T>(invocation).map(Data)
    }
}

impl<K: DeserializeOwned + Send + Sync + 'static> Inject<K> for Arc<K> {
    fn inject(invocation: &Invocation) -> Result<Self, HandlerError> {
        invocation
            .object
            .decode::<K>()
            .map_err(|e| decode_error::<K>(invocation, &e))
    }
}

impl<K: DeserializeOwned + Send + Sync + 'static> Inject<K> for Live<K> {
    fn inject(invocation: &Invocation) -> Result<Self, HandlerError> {
        Self::new(invocation.live.clone()).map_err(|e| decode_error::<K>(invocation, &e))
    }
}

fn decode_error<K>(invocation: &Invocation, error: &serde_json::Error) -> HandlerError {
    HandlerError::permanent(format!(
        "{} does not deserialize into `{}`: {error}",
        invocation.object.reference(),
        type_name::<K>()
    ))
}

impl<K> Inject<K> for Stopper {
    fn inject(invocation: &Invocation) -> Result<Self, HandlerError> {
        Ok(invocation.stopper.clone())
    }
}

impl<K> Inject<K> for ObjectRef {
    fn inject(invocation: &Invocation) -> Result<Self, HandlerError> {
        Ok(invocation.object.reference().clone())
    }
}

impl<K> Inject<K> for Retry {
    fn inject(invocation: &Invocation) -> Result<Self, HandlerError> {
        Ok(Self(invocation.retry))
    }
}

impl<K> Inject<K> for Started {
    fn inject(invocation: &Invocation) -> Result<Self, HandlerError> {
        Ok(Self(invocation.started))
    }
}

impl<K> Inject<K> for Occurrence {
    fn inject(invocation: &Invocation) -> Result<Self, HandlerError> {
        invocation.occurrence.map(Self).ok_or_else(|| {
            HandlerError::permanent(
                "only a cron timer (`#[timer(cron = ...)]`) has an `Occurrence`",
            )
        })
    }
}

impl<K> Inject<K> for Runtime {
    fn inject(invocation: &Invocation) -> Result<Self, HandlerError> {
        Ok(Self(invocation.started.elapsed()))
    }
}

impl<K> Inject<K> for kube::Client {
    fn inject(invocation: &Invocation) -> Result<Self, HandlerError> {
        service::<Self>(invocation).map(|client| (*client).clone())
    }
}

impl<K> Inject<K> for Patch {
    fn inject(invocation: &Invocation) -> Result<Self, HandlerError> {
        match invocation.services.get::<Scratch>() {
            Some(scratch) => Ok(scratch.patch(invocation)),
            None => Err(HandlerError::permanent(
                "`Patch` can only be injected within a handler invocation",
            )),
        }
    }
}

impl<K> Inject<K> for tracing::Span {
    fn inject(invocation: &Invocation) -> Result<Self, HandlerError> {
        Ok(invocation.span.clone())
    }
}

impl<K> BlockingSafe for Arc<K> {}
/// In a blocking handler, [`Live::get`] gives the latest version ([`Live::changed`] is async).
impl<K> BlockingSafe for Live<K> {}
impl<T: ?Sized> BlockingSafe for Data<T> {}
impl BlockingSafe for Stopper {}
impl BlockingSafe for ObjectRef {}
impl BlockingSafe for Retry {}
impl BlockingSafe for Occurrence {}
impl BlockingSafe for Started {}
impl BlockingSafe for Runtime {}
impl BlockingSafe for kube::Client {}
impl BlockingSafe for Patch {}
impl BlockingSafe for tracing::Span {}
