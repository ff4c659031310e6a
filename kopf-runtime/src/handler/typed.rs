//! The typed handler trait that `#[daemon]` / `#[timer]` implement, and its adapter to the
//! type-erased [`ErasedHandler`] the supervisor runs.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;

use crate::core::erased::{Call, ErasedHandler, Invocation, MatchError};
use crate::core::object::ObjectState;
use crate::core::outcome::HandlerError;
use crate::core::resource::ResourceInfo;
use crate::core::spec::HandlerSpec;

/// A handler with a static resource type: what `#[daemon]` and `#[timer]` generate for each
/// function. The framework only sees it through [`erase`] (an [`ErasedHandler`]).
///
/// Writing it by hand is possible (and how the macros' output can be understood), but the
/// macros also check the options and the signature at compile time.
///
/// ```
/// use kopf_runtime::engine::{Call, HandlerKind, HandlerSpec, Invocation, Output, TypedHandler};
/// use kopf_runtime::{HandlerError, ResourceInfo};
/// use kube::api::DynamicObject;
///
/// struct Noop;
/// impl TypedHandler for Noop {
///     type Resource = DynamicObject;
///     const SPEC: &'static HandlerSpec = &HandlerSpec::new("noop", HandlerKind::Daemon);
///     fn resource() -> ResourceInfo {
///         ResourceInfo::new("", "v1", "ConfigMap", "configmaps", true)
///     }
///     fn invoke(_: Invocation) -> Result<Call, HandlerError> {
///         Ok(Call::Async(Box::pin(async { Ok(Output::default()) })))
///     }
/// }
/// let erased = kopf_runtime::engine::erase::<Noop>();
/// assert_eq!(erased.spec().id, "noop");
/// ```
pub trait TypedHandler: Send + Sync + 'static {
    /// The type each object is decoded into (the handler's object parameter type).
    type Resource: DeserializeOwned + Send + Sync + 'static;

    /// The static description: id, kind, options and declarative filters.
    const SPEC: &'static HandlerSpec;

    /// The Kubernetes resource the handler serves.
    fn resource() -> ResourceInfo;

    /// The typed `when` filter, evaluated after the declarative filters (default: always).
    fn when(object: &Self::Resource) -> bool {
        let _ = object;
        true
    }

    /// The delay before the first invocation for this object (default: the fixed
    /// `initial_delay` of the spec).
    fn initial_delay(object: &Self::Resource) -> Option<Duration> {
        let _ = object;
        Self::SPEC.initial_delay
    }

    /// Injects the parameters and starts one invocation.
    ///
    /// # Errors
    /// A [`HandlerError`] when a parameter cannot be injected.
    fn invoke(invocation: Invocation) -> Result<Call, HandlerError>;

    /// Injects the parameters of a reconcile handler's cleanup and starts it (default: no
    /// cleanup; see [`ErasedHandler::cleanup`]).
    ///
    /// # Errors
    /// A [`HandlerError`] when a parameter cannot be injected, or the handler has no cleanup.
    fn cleanup(invocation: Invocation) -> Result<Call, HandlerError> {
        let _ = invocation;
        Err(HandlerError::permanent(format!(
            "the handler `{}` has no cleanup",
            Self::SPEC.id
        )))
    }
}

/// The type-erased view of a [`TypedHandler`], as the supervisor uses it.
///
/// ```
/// # use kopf_runtime::{HandlerError, ResourceInfo};
/// # use kopf_runtime::engine::{Call, HandlerKind, HandlerSpec, Invocation, TypedHandler};
/// # struct H;
/// # impl TypedHandler for H {
/// #     type Resource = serde_json::Value;
/// #     const SPEC: &'static HandlerSpec = &HandlerSpec::new("h", HandlerKind::Timer);
/// #     fn resource() -> ResourceInfo { ResourceInfo::new("", "v1", "Pod", "pods", true) }
/// #     fn invoke(_: Invocation) -> Result<Call, HandlerError> { Err(HandlerError::msg("unused")) }
/// # }
/// let object = kopf_runtime::engine::ObjectState::from_json(serde_json::json!({
///     "metadata": {"name": "a", "uid": "u"}})).unwrap();
/// assert!(kopf_runtime::engine::erase::<H>().matches(&object).unwrap());
/// ```
#[must_use]
pub fn erase<H: TypedHandler>() -> Arc<dyn ErasedHandler> {
    Arc::new(Erased::<H>(PhantomData))
}

struct Erased<H>(PhantomData<fn() -> H>);

impl<H: TypedHandler> Erased<H> {
    fn decode(object: &ObjectState) -> Result<Arc<H::Resource>, MatchError> {
        object
            .decode::<H::Resource>()
            .map_err(|source| MatchError::Decode {
                type_name: std::any::type_name::<H::Resource>(),
                source,
            })
    }
}

impl<H: TypedHandler> ErasedHandler for Erased<H> {
    fn spec(&self) -> &'static HandlerSpec {
        H::SPEC
    }

    fn matches(&self, object: &ObjectState) -> Result<bool, MatchError> {
        if !H::SPEC.filters.matches(object) {
            return Ok(false);
        }
        let typed = Self::decode(object)?;
        Ok(H::when(&typed))
    }

    fn initial_delay(&self, object: &ObjectState) -> Option<Duration> {
        match Self::decode(object) {
            Ok(typed) => H::initial_delay(&typed),
            Err(_) => H::SPEC.initial_delay,
        }
    }

    fn invoke(&self, invocation: Invocation) -> Result<Call, HandlerError> {
        H::invoke(invocation)
    }

    fn cleanup(&self, invocation: Invocation) -> Result<Call, HandlerError> {
        H::cleanup(invocation)
    }
}
