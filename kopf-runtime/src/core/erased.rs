//! The type-erased handler interface between generated code and the supervisor: what the core
//! calls ([`ErasedHandler`]), with what ([`Invocation`]) and what comes back ([`Call`], [`Output`],
//! plain data kept in `call.rs` and re-exported here for the handler layer).

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

pub(crate) use super::call::{Call, Output};
use super::latest::ObjectWatch;
use super::object::ObjectState;
use super::outcome::HandlerError;
use super::spec::HandlerSpec;
use super::stop::Stopper;

/// Services the operator makes available to handlers, keyed by type: the kube client, the
/// patch sink, the user's shared data. The core never looks inside.
///
/// ```
/// use kopf_runtime::engine::Services;
/// let mut services = Services::default();
/// services.insert(42_u32);
/// assert_eq!(*services.get::<u32>().unwrap(), 42);
/// assert!(services.get::<String>().is_none());
/// ```
#[derive(Clone, Default)]
pub struct Services {
    // Shared: every invocation gets a clone, which must not copy the map.
    map: Arc<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
    /// One value for this clone only (see [`Services::insert_scoped`]).
    scoped: Option<(TypeId, Arc<dyn Any + Send + Sync>)>,
}

impl fmt::Debug for Services {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Services")
            .field("len", &self.map.len())
            .finish()
    }
}

impl Services {
    /// Adds (or replaces) the service of type `T`.
    pub fn insert<T: Any + Send + Sync>(&mut self, value: T) {
        Arc::make_mut(&mut self.map).insert(TypeId::of::<T>(), Arc::new(value));
    }

    /// Adds a value of type `T` to this clone only, without copying the shared map: what one
    /// invocation adds for itself (its patch). A second scoped value replaces the first.
    ///
    /// ```
    /// use kopf_runtime::engine::Services;
    /// let mut shared = Services::default();
    /// shared.insert(1_u8);
    /// let mut mine = shared.clone();
    /// mine.insert_scoped("only here");
    /// assert_eq!(*mine.get::<&str>().unwrap(), "only here");
    /// assert_eq!(*mine.get::<u8>().unwrap(), 1);
    /// assert!(shared.get::<&str>().is_none());
    /// ```
    pub fn insert_scoped<T: Any + Send + Sync>(&mut self, value: T) {
        self.insert_scoped_arc(Arc::new(value));
    }

    /// [`Services::insert_scoped`] with a value the caller keeps a handle to.
    pub(crate) fn insert_scoped_arc<T: Any + Send + Sync>(&mut self, value: Arc<T>) {
        self.scoped = Some((TypeId::of::<T>(), value));
    }

    /// The service of type `T`, if one was inserted (a scoped value first).
    #[must_use]
    pub fn get<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        let tid = TypeId::of::<T>();
        let found = match &self.scoped {
            Some((t, value)) if *t == tid => Some(value),
            _ => self.map.get(&tid),
        };
        found.cloned().and_then(|a| a.downcast::<T>().ok())
    }
}

/// Everything one invocation of a handler gets from the supervisor.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// The object as it was when this invocation started.
    pub object: Arc<ObjectState>,
    /// The latest version of the object (updated on every watch event).
    pub live: ObjectWatch,
    /// This invocation's stop flag: it gets the instance's stop reasons (deleted, mismatch,
    /// pausing, exiting) as they happen, plus `HANDLER_TIMEOUT` and the ladder's steps for this
    /// invocation only; a retry gets a fresh flag.
    pub stopper: Stopper,
    /// The attempt number within the current cycle, from 0.
    pub retry: u32,
    /// When the first attempt of the current cycle started.
    pub started: Instant,
    /// The operator's services.
    pub services: Services,
    /// The instance's span (kind, handler, namespace, name, uid): the handler runs inside it, so
    /// its log lines carry the object. Made once per instance, not per invocation.
    pub span: tracing::Span,
    /// The object's memo, shared by its handlers (see [`ObjectMemo`](crate::engine::ObjectMemo)).
    pub memo: std::sync::Arc<crate::core::memo::ObjectMemo>,
    /// A cron timer's occurrence this run is for (`None` for other handlers).
    pub occurrence: Option<jiff::Timestamp>,
    /// The change a change handler is called for (`None` for daemons and timers).
    pub change: Option<Arc<crate::core::diff::ChangeContext>>,
}

/// Why a handler's filters could not be evaluated for an object.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum MatchError {
    /// The object does not deserialize into the handler's resource type.
    #[error("the object does not deserialize into `{type_name}`")]
    Decode {
        /// The Rust type the handler expects.
        type_name: &'static str,
        /// The deserialization error.
        #[source]
        source: Arc<serde_json::Error>,
    },
}

/// A registered handler with its type erased. Implemented by the code `#[daemon]` and
/// `#[timer]` generate; the supervisor only sees this trait.
pub trait ErasedHandler: Send + Sync + 'static {
    /// The static description (id, options, declarative filters).
    fn spec(&self) -> &'static HandlerSpec;

    /// Whether the object matches the handler's filters (declarative and `when`).
    ///
    /// # Errors
    /// [`MatchError`] when the object cannot be evaluated (e.g. it does not deserialize).
    fn matches(&self, object: &ObjectState) -> Result<bool, MatchError>;

    /// The delay before the first invocation for this object (the fixed `initial_delay`, or the
    /// result of the user's function of the object).
    fn initial_delay(&self, object: &ObjectState) -> Option<Duration> {
        let _ = object;
        self.spec().initial_delay
    }

    /// Starts one invocation.
    ///
    /// # Errors
    /// A [`HandlerError`] if a parameter cannot be injected (e.g. a missing service); the
    /// supervisor treats it like a failed invocation.
    fn invoke(&self, invocation: Invocation) -> Result<Call, HandlerError>;

    /// Starts one invocation of a reconcile handler's cleanup (`#[reconcile(cleanup = f)]`),
    /// which runs under the finalizer once the object is being deleted. Called only when
    /// `spec().reconcile.cleanup` is set; the default has no cleanup to run.
    ///
    /// # Errors
    /// A [`HandlerError`] if a parameter cannot be injected, or (the default) a permanent one:
    /// the handler has no cleanup.
    fn cleanup(&self, invocation: Invocation) -> Result<Call, HandlerError> {
        let _ = invocation;
        Err(HandlerError::permanent(format!(
            "the handler `{}` has no cleanup",
            self.spec().id
        )))
    }
}

impl fmt::Debug for dyn ErasedHandler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ErasedHandler")
            .field("id", &self.spec().id)
            .finish()
    }
}
