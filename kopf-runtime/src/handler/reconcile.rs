//! What `#[reconcile]` generates code against: the conversion of its return value into the
//! [`Action`] the supervisor reads ([`ReconcileReturn`]), the call of its `cleanup` function
//! with injected parameters ([`CleanupFn`]), and the wrappers of its `owns` and `watches`
//! (the kind of a type, a related object's owners from its JSON body).

use std::future::Future;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::inject::Inject;
use super::prepared::{DaemonKind, HandlerReturn, PreparedCall};
use super::resource::StaticResource;
use crate::core::erased::{Call, Invocation};
use crate::core::outcome::HandlerError;
use crate::core::reconcile::action::Action;
use crate::core::reconcile::kinds::{KindRef, Target};

/// Converts a reconcile handler's return value, [`Action`] or `Result<Action, E>`, into the
/// output the supervisor reads (see [`Action::to_result`]).
///
/// ```
/// use kopf_runtime::Action;
/// use kopf_runtime::__private::ReconcileReturn;
/// let ok: Result<Action, std::io::Error> = Ok(Action::await_change());
/// assert_eq!(ok.into_result().unwrap(), None);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a valid return type for a `#[reconcile]` handler",
    label = "a reconcile handler returns `Action` or `Result<Action, E>`",
    note = "return `Ok(Action::requeue(delay))` to run again after `delay`, or \
            `Ok(Action::await_change())` to run at the next change; `E` must convert into \
            `kopf_runtime::HandlerError` (any `std::error::Error + Send + Sync + 'static` does)"
)]
pub trait ReconcileReturn {
    /// The encoded action, or the error.
    ///
    /// # Errors
    /// The handler's error, converted.
    fn into_result(self) -> Result<Option<Value>, HandlerError>;
}

impl ReconcileReturn for Action {
    fn into_result(self) -> Result<Option<Value>, HandlerError> {
        Ok(self.to_result())
    }
}

#[diagnostic::do_not_recommend]
impl<E: Into<HandlerError>> ReconcileReturn for Result<Action, E> {
    fn into_result(self) -> Result<Option<Value>, HandlerError> {
        self.map(Action::to_result).map_err(Into::into)
    }
}

/// A reconcile handler's cleanup: an `async fn` whose parameters (`Args`, a tuple of up to six)
/// are injected as a handler's are, for objects of type `K`, returning `()` or `Result<(), E>`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a `#[reconcile]` cleanup",
    label = "not an `async fn` of injectable parameters returning `()` or `Result<(), E>`",
    note = "a cleanup is an `async fn` such as `async fn cleanup(obj: Arc<K>) -> \
            Result<(), HandlerError>`: its parameters are injected by type as a handler's \
            (at most six), and it runs under the finalizer once the object is deleted"
)]
pub trait CleanupFn<K, Args> {
    /// Injects the parameters and starts the cleanup.
    ///
    /// # Errors
    /// A [`HandlerError`] when a parameter cannot be injected.
    fn start(self, prepared: PreparedCall) -> Result<Call, HandlerError>;
}

macro_rules! cleanup_fn {
    ($($arg:ident),*) => {
        impl<K, F, Fut, R, $($arg,)*> CleanupFn<K, ($($arg,)*)> for F
        where
            F: FnOnce($($arg),*) -> Fut,
            Fut: Future<Output = R> + Send + 'static,
            R: HandlerReturn<DaemonKind>,
            $($arg: Inject<K>,)*
        {
            #[allow(non_snake_case, unused_variables)]
            fn start(self, prepared: PreparedCall) -> Result<Call, HandlerError> {
                $(let $arg = <$arg as Inject<K>>::inject(prepared.invocation())?;)*
                let future = self($($arg),*);
                Ok(prepared.run_async(async move { future.await.into_result() }))
            }
        }
    };
}

cleanup_fn!();
cleanup_fn!(A1);
cleanup_fn!(A1, A2);
cleanup_fn!(A1, A2, A3);
cleanup_fn!(A1, A2, A3, A4);
cleanup_fn!(A1, A2, A3, A4, A5);
cleanup_fn!(A1, A2, A3, A4, A5, A6);

/// Starts `cleanup` for `invocation` (what `#[reconcile(cleanup = f)]` generates).
///
/// # Errors
/// A [`HandlerError`] when a parameter cannot be injected.
pub fn start_cleanup<K, Args, F: CleanupFn<K, Args>>(
    cleanup: F,
    invocation: Invocation,
) -> Result<Call, HandlerError> {
    cleanup.start(PreparedCall::new(invocation))
}

/// The kind of `K`, for `#[reconcile(owns(K))]` and `watches(K, ...)`.
///
/// ```
/// use k8s_openapi::api::core::v1::ConfigMap;
/// let kind = kopf_runtime::__private::kind_ref::<ConfigMap>();
/// assert_eq!((kind.kind.as_ref(), kind.plural.as_ref()), ("ConfigMap", "configmaps"));
/// ```
#[must_use]
pub fn kind_ref<K: StaticResource>() -> KindRef {
    K::resource_info()
}

/// The owners a related object maps to: its JSON `body` decoded into `T` and given to `map`.
/// A body that does not decode maps to nothing, with a warning naming the object.
///
/// ```
/// use k8s_openapi::api::core::v1::Secret;
/// use kopf_runtime::engine::Target;
/// fn owner(secret: &Secret) -> Option<Target> {
///     let name = secret.metadata.name.clone()?;
///     Some(Target { namespace: secret.metadata.namespace.clone(), name })
/// }
/// let body = serde_json::json!({"metadata": {"namespace": "ns", "name": "a"}});
/// let owners = kopf_runtime::__private::map_related::<Secret, _>(&body, owner);
/// assert_eq!(owners, vec![Target::namespaced("ns", "a")]);
/// ```
pub fn map_related<T, R>(body: &Value, map: fn(&T) -> R) -> Vec<Target>
where
    T: DeserializeOwned,
    R: IntoIterator<Item = Target>,
{
    match T::deserialize(body) {
        Ok(object) => map(&object).into_iter().collect(),
        Err(err) => {
            let meta = &body["metadata"];
            let namespace = meta["namespace"].as_str().unwrap_or("");
            let name = meta["name"].as_str().unwrap_or("");
            tracing::warn!(
                namespace, name, kind = ?body["kind"].as_str(),
                "a related object does not decode into `{}`, so it triggers no owner: {err}",
                std::any::type_name::<T>()
            );
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_undecodable_related_object_maps_to_nothing() {
        fn never(_: &u32) -> Vec<Target> {
            vec![Target::cluster("x")]
        }
        let body = serde_json::json!({"metadata": {"name": "a"}});
        assert!(map_related::<u32, _>(&body, never).is_empty());
        assert_eq!(
            map_related::<u32, _>(&serde_json::json!(7), never),
            vec![Target::cluster("x")]
        );
    }

    #[test]
    fn reconcile_returns_encode_the_action() {
        let requeue = Action::requeue(std::time::Duration::from_secs(3));
        assert_eq!(requeue.into_result().unwrap(), requeue.to_result());
        let failed: Result<Action, HandlerError> = Err(HandlerError::permanent("no"));
        assert!(failed.into_result().is_err());
    }
}
