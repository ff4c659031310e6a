//! The link-time registry of handlers: every `#[daemon]` / `#[timer]` in the binary submits a
//! [`Registration`]; [`Registry::from_inventory`] collects them at start-up.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use super::typed::{TypedHandler, erase};
use crate::core::erased::ErasedHandler;
use crate::core::resource::ResourceInfo;
use crate::core::spec::{HandlerSpec, SourceLocation};

/// One handler as registered at link time. The macros emit one per function; a hand-written
/// [`TypedHandler`] can be registered the same way (see [`Registration::new`]).
pub struct Registration {
    spec: &'static HandlerSpec,
    resource: fn() -> ResourceInfo,
    handler: fn() -> Arc<dyn ErasedHandler>,
}

inventory::collect!(Registration);

impl Registration {
    /// The registration of a typed handler (const, for `inventory::submit!`).
    ///
    /// ```
    /// # use kopf_runtime::{HandlerError, ResourceInfo};
    /// # use kopf_runtime::engine::{Call, HandlerKind, HandlerSpec, Invocation, TypedHandler};
    /// # struct H;
    /// # impl TypedHandler for H {
    /// #     type Resource = serde_json::Value;
    /// #     const SPEC: &'static HandlerSpec = &HandlerSpec::new("h", HandlerKind::Timer);
    /// #     fn resource() -> ResourceInfo { ResourceInfo::new("", "v1", "Pod", "pods", true) }
    /// #     fn invoke(_: Invocation) -> Result<Call, HandlerError> { Err(HandlerError::msg("x")) }
    /// # }
    /// use kopf_runtime::engine::Registration;
    /// static REGISTRATION: Registration = Registration::new::<H>();
    /// assert_eq!(REGISTRATION.spec().id, "h");
    /// assert_eq!(REGISTRATION.resource().plural, "pods");
    /// ```
    #[must_use]
    pub const fn new<H: TypedHandler>() -> Self {
        Self {
            spec: H::SPEC,
            resource: H::resource,
            handler: erase::<H>,
        }
    }

    /// The handler's static description.
    #[must_use]
    pub fn spec(&self) -> &'static HandlerSpec {
        self.spec
    }

    /// The resource the handler serves.
    #[must_use]
    pub fn resource(&self) -> ResourceInfo {
        (self.resource)()
    }

    /// A new type-erased instance of the handler, for the supervisor.
    #[must_use]
    pub fn handler(&self) -> Arc<dyn ErasedHandler> {
        (self.handler)()
    }
}

impl fmt::Debug for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration")
            .field("id", &self.spec.id)
            .field("kind", &self.spec.kind)
            .field("location", &self.spec.location)
            .finish_non_exhaustive()
    }
}

/// Why a set of handlers cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// Two handlers have the same id (ids key the running instances and `status` results).
    #[error(
        "two handlers have the id `{id}` (at {first} and at {second}); give one of them another \
         `id = \"...\"`"
    )]
    DuplicateId {
        /// The id.
        id: &'static str,
        /// Where the first handler is defined.
        first: SourceLocation,
        /// Where the second handler is defined.
        second: SourceLocation,
    },
    /// A resource kind's change handlers cannot work together (e.g. an `#[on_update]` watches
    /// the `status.<id>` where a change handler stores its result, so every result would
    /// trigger it again).
    #[error("the change handlers of {resource} cannot run: {reason}")]
    ChangeHandlers {
        /// The resource kind.
        resource: String,
        /// Why.
        reason: String,
    },
    /// Two different indexes have the same name (`#[index] fn pods` in two modules): their
    /// watches' health and logs would be confused.
    #[error("two different indexes are named `{id}`; rename one of the `#[index]` functions")]
    DuplicateIndex {
        /// The name.
        id: &'static str,
    },
    /// A selected id belongs to no registered handler.
    #[error("no handler has the id `{id}` (registered: {known})")]
    UnknownId {
        /// The id asked for.
        id: String,
        /// The registered ids, comma-separated.
        known: String,
    },
}

/// A set of handlers, sorted by id. By default an operator runs all linked handlers
/// ([`Registry::from_inventory`]); [`Registry::select`] and [`Registry::retain`] narrow it, so
/// one binary can run several operators with different handlers.
///
/// ```rust,standalone_crate
/// // A crate of its own (doctests are merged otherwise), with no handlers in it:
/// let registry = kopf_runtime::Registry::from_inventory().unwrap();
/// assert!(registry.is_empty());
/// ```
#[derive(Clone, Default)]
pub struct Registry {
    handlers: Vec<&'static Registration>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.handlers.iter().map(|r| r.spec.id))
            .finish()
    }
}

fn location_key(location: &SourceLocation) -> (&'static str, u32, u32) {
    (location.file, location.line, location.column)
}

impl Registry {
    /// All handlers linked into the binary, sorted by id. Zero handlers is not an error here.
    ///
    /// # Errors
    /// [`RegistryError::DuplicateId`] naming both definitions if two handlers share an id.
    ///
    /// ```rust,standalone_crate
    /// # let registry = kopf_runtime::Registry::from_inventory().unwrap();
    /// let ids: Vec<_> = registry.iter().map(|r| r.spec().id).collect();
    /// assert!(ids.windows(2).all(|w| w[0] < w[1]));
    /// ```
    pub fn from_inventory() -> Result<Self, RegistryError> {
        let handlers: Vec<&'static Registration> = inventory::iter::<Registration>().collect();
        Self::from_registrations(handlers)
    }

    /// A registry of the given registrations (sorted and checked as by `from_inventory`).
    ///
    /// # Errors
    /// [`RegistryError::DuplicateId`] if two registrations share an id.
    ///
    /// ```
    /// let empty = kopf_runtime::Registry::from_registrations([]).unwrap();
    /// assert_eq!(empty.len(), 0);
    /// ```
    pub fn from_registrations(
        handlers: impl IntoIterator<Item = &'static Registration>,
    ) -> Result<Self, RegistryError> {
        let mut handlers: Vec<_> = handlers.into_iter().collect();
        handlers.sort_by(|a, b| {
            (a.spec.id, location_key(&a.spec.location))
                .cmp(&(b.spec.id, location_key(&b.spec.location)))
        });
        if let Some(pair) = handlers.windows(2).find(|w| w[0].spec.id == w[1].spec.id) {
            return Err(RegistryError::DuplicateId {
                id: pair[0].spec.id,
                first: pair[0].spec.location,
                second: pair[1].spec.location,
            });
        }
        Ok(Self { handlers })
    }

    /// Keeps the handlers whose spec satisfies `keep`.
    ///
    /// ```
    /// # let registry = kopf_runtime::Registry::default();
    /// let timers = registry.retain(|spec| spec.kind == kopf_runtime::engine::HandlerKind::Timer);
    /// assert!(timers.is_empty());
    /// ```
    #[must_use]
    pub fn retain(mut self, mut keep: impl FnMut(&HandlerSpec) -> bool) -> Self {
        self.handlers.retain(|r| keep(r.spec));
        self
    }

    /// Keeps exactly the handlers with the given ids.
    ///
    /// # Errors
    /// [`RegistryError::UnknownId`] for the first id no handler has.
    ///
    /// ```
    /// # let registry = kopf_runtime::Registry::default();
    /// assert!(registry.select(&["nope"]).is_err());
    /// ```
    pub fn select(self, ids: &[&str]) -> Result<Self, RegistryError> {
        if let Some(unknown) = ids.iter().find(|id| self.get(id).is_none()) {
            let known: Vec<&str> = self.handlers.iter().map(|r| r.spec.id).collect();
            return Err(RegistryError::UnknownId {
                id: (*unknown).to_owned(),
                known: if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                },
            });
        }
        Ok(self.retain(|spec| ids.contains(&spec.id)))
    }

    /// The handler with this id.
    ///
    /// ```
    /// # let registry = kopf_runtime::Registry::default();
    /// assert!(registry.get("monitor").is_none());
    /// ```
    #[must_use]
    pub fn get(&self, id: &str) -> Option<&'static Registration> {
        self.handlers.iter().copied().find(|r| r.spec.id == id)
    }

    /// The number of handlers.
    #[must_use]
    pub fn len(&self) -> usize {
        self.handlers.len()
    }

    /// Whether there are no handlers.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.handlers.is_empty()
    }

    /// The handlers, sorted by id.
    pub fn iter(&self) -> impl Iterator<Item = &'static Registration> + '_ {
        self.handlers.iter().copied()
    }

    /// New handler instances grouped by the resource they serve (each group sorted by id).
    ///
    /// ```
    /// # let registry = kopf_runtime::Registry::default();
    /// assert!(registry.by_resource().is_empty());
    /// ```
    #[must_use]
    pub fn by_resource(&self) -> BTreeMap<ResourceInfo, Vec<Arc<dyn ErasedHandler>>> {
        let mut grouped: BTreeMap<ResourceInfo, Vec<Arc<dyn ErasedHandler>>> = BTreeMap::new();
        for registration in &self.handlers {
            grouped
                .entry(registration.resource())
                .or_default()
                .push(registration.handler());
        }
        grouped
    }
}
