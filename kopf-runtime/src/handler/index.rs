//! Indexes for handlers: `#[index]` makes an [`IndexDef`] of a function that maps an object to
//! (key, value) pairs; [`Index<I>`] is what it made of every object of its kind, injectable
//! into any handler and kept current from the watch.
//!
//! ```text
//!  watch ──► Contents::apply / remove / resync ──► RwLock<Store>  ◄── Index<I>::get (a copy)
//!                 (never across an .await)          filled: watch ◄── Index<I>::filled().await
//! ```

use std::any::{TypeId, type_name};
use std::fmt;
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};
use std::time::Duration;

use serde::de::DeserializeOwned;
use tokio::sync::watch;

use super::inject::{BlockingSafe, Inject};
use super::resource::StaticResource;
use crate::core::erased::{Invocation, Services};
use crate::core::filter::Filters;
use crate::core::index::store::{Indexed, Store};
use crate::core::object::{ObjectRef, ObjectState};
use crate::core::outcome::HandlerError;
use crate::core::resource::ResourceInfo;

/// An index, as `#[index]` declares it: its resource, its key and value types, and the function
/// that makes an object's pairs. The macro implements it for a type named after the function,
/// which is what [`Index<I>`] names.
///
/// ```
/// use std::sync::Arc;
/// use kopf_runtime::IndexDef;
///
/// # #[derive(serde::Deserialize)] struct Pod { node: String }
/// # impl kopf_runtime::StaticResource for Pod {
/// #     fn resource_info() -> kopf_runtime::ResourceInfo {
/// #         kopf_runtime::ResourceInfo::new("", "v1", "Pod", "pods", true)
/// #     }
/// # }
/// /// Pods by the node they run on.
/// #[allow(non_camel_case_types, dead_code)]
/// struct pods_by_node {}
///
/// impl IndexDef for pods_by_node {
///     type Resource = Pod;
///     type Key = String;
///     type Value = usize;
///     const ID: &'static str = "pods_by_node";
///     fn pairs(pod: Arc<Pod>) -> Vec<(String, usize)> {
///         vec![(pod.node.clone(), 1)]
///     }
/// }
///
/// let pod = Arc::new(Pod { node: "n1".into() });
/// assert_eq!(pods_by_node::pairs(pod), [("n1".to_owned(), 1)]);
/// ```
pub trait IndexDef: Send + Sync + 'static {
    /// The indexed resource.
    type Resource: StaticResource + DeserializeOwned + Send + Sync + 'static;
    /// What values are found by.
    type Key: Eq + Hash + Clone + Send + Sync + 'static;
    /// What is kept of an object under a key.
    type Value: Clone + Send + Sync + 'static;
    /// The index's name: the function's.
    const ID: &'static str;
    /// Conditions on the objects' labels, annotations and fields (`#[index(labels(...))]`); an
    /// object that does not meet them is not in the index. Default: none.
    const FILTERS: Filters = Filters {
        labels: &[],
        annotations: &[],
        field: None,
    };
    /// The pairs of one object (none: the object is not in the index).
    fn pairs(object: Arc<Self::Resource>) -> Vec<(Self::Key, Self::Value)>;
}

/// A `(key, value)` pair as an index function returns it, so that `#[index]` can name the key
/// and value types of whatever collection the function returns.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "an index function returns `(key, value)` pairs, and `{Self}` is not one",
    label = "not a `(key, value)` pair",
    note = "return e.g. `Vec<(K, V)>`, `Option<(K, V)>` or a map `BTreeMap<K, V>`"
)]
pub trait IndexPair {
    /// The pair's key.
    type Key;
    /// The pair's value.
    type Value;
    /// The pair, as a tuple.
    fn split(self) -> (Self::Key, Self::Value);
}

impl<K, V> IndexPair for (K, V) {
    type Key = K;
    type Value = V;
    fn split(self) -> (K, V) {
        self
    }
}

/// A pair as the index keeps it.
type PairOf<P> = (<P as IndexPair>::Key, <P as IndexPair>::Value);

/// An index function's collection as the index takes it.
#[doc(hidden)]
pub fn index_pairs<C>(pairs: C) -> Vec<PairOf<C::Item>>
where
    C: IntoIterator,
    C::Item: IndexPair,
{
    pairs.into_iter().map(IndexPair::split).collect()
}

/// The pairs of every object of the kind, and whether the first list is in.
pub(crate) struct Contents<K, V> {
    store: RwLock<Store<K, V>>,
    filled: watch::Sender<bool>,
    /// The watch streams (one per namespace watched) that have not listed once yet.
    unlisted: AtomicUsize,
}

impl<K: Eq + Hash + Clone, V> Contents<K, V> {
    fn new() -> Self {
        Self {
            store: RwLock::new(Store::default()),
            filled: watch::Sender::new(false),
            unlisted: AtomicUsize::new(1),
        }
    }

    /// A reader's view; a writer that panicked left whole steps only (each is one call).
    fn read(&self) -> RwLockReadGuard<'_, Store<K, V>> {
        self.store.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self, step: impl FnOnce(&mut Store<K, V>)) {
        step(&mut self.store.write().unwrap_or_else(PoisonError::into_inner));
    }
}

/// The contents of the index `I`: injected into a handler as a parameter of this type, or
/// taken from the operator's services. Cheap to clone; each call reads the index as it is
/// between two watch events, without holding a lock past its return.
pub struct Index<I: IndexDef> {
    contents: Arc<Contents<I::Key, I::Value>>,
    def: PhantomData<fn() -> I>,
}

impl<I: IndexDef> Clone for Index<I> {
    fn clone(&self) -> Self {
        Self {
            contents: Arc::clone(&self.contents),
            def: PhantomData,
        }
    }
}

impl<I: IndexDef> fmt::Debug for Index<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Index")
            .field("id", &I::ID)
            .field("keys", &self.len())
            .field("filled", &self.is_filled())
            .finish()
    }
}

impl<I: IndexDef> Default for Index<I> {
    /// An empty index, not filled: what the operator starts from, and what tests fill.
    fn default() -> Self {
        Self {
            contents: Arc::new(Contents::new()),
            def: PhantomData,
        }
    }
}

impl<I: IndexDef> Index<I> {
    /// The values under `key` (a copy), by object (namespace, then name); empty when none.
    #[must_use]
    pub fn get(&self, key: &I::Key) -> Vec<I::Value> {
        self.contents.read().get(key).cloned().collect()
    }

    /// Reads the values under `key` in place, without copying them. `read` runs under the
    /// index's read lock: it cannot `.await`, and the watch waits while it runs.
    pub fn with<R>(
        &self,
        key: &I::Key,
        read: impl FnOnce(&mut dyn Iterator<Item = &I::Value>) -> R,
    ) -> R {
        read(&mut self.contents.read().get(key))
    }

    /// Whether any object has a value under `key`.
    #[must_use]
    pub fn contains_key(&self, key: &I::Key) -> bool {
        self.contents.read().contains_key(key)
    }

    /// The keys with at least one value (a copy), in no particular order.
    #[must_use]
    pub fn keys(&self) -> Vec<I::Key> {
        self.contents.read().keys().cloned().collect()
    }

    /// How many keys have at least one value.
    #[must_use]
    pub fn len(&self) -> usize {
        self.contents.read().len()
    }

    /// Whether no object has any value.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.contents.read().is_empty()
    }

    /// Whether the index holds the kind's first full list (it then stays current).
    #[must_use]
    pub fn is_filled(&self) -> bool {
        *self.contents.filled.borrow()
    }

    /// Waits until the index holds the kind's first full list.
    ///
    /// # Cancellation safety
    /// Cancel-safe: dropping the future loses nothing; call it again to wait on.
    pub async fn filled(&self) {
        let mut seen = self.contents.filled.subscribe();
        // The sender lives as long as `self`, so the wait ends only when filled.
        let _ = seen.wait_for(|filled| *filled).await;
    }

    /// Takes in an object's version: its old pairs out, its new ones in.
    pub fn apply(&self, object: &ObjectRef, resource: Arc<I::Resource>) {
        let pairs = I::pairs(resource);
        self.contents
            .write(|store| store.replace(indexed(object), pairs));
    }

    /// Takes out whatever a deleted object contributed.
    pub fn remove(&self, object: &ObjectRef) {
        self.contents.write(|store| {
            store.remove(&indexed(object));
        });
    }

    /// After a (re)list: exactly these objects' pairs; the index is filled from then on.
    pub fn resync(&self, objects: impl IntoIterator<Item = (ObjectRef, Arc<I::Resource>)>) {
        let listed: Vec<_> = objects
            .into_iter()
            .map(|(object, resource)| (indexed(&object), I::pairs(resource)))
            .collect();
        self.contents.write(|store| store.resync(None, listed));
        self.contents.filled.send_replace(true);
    }
}

fn indexed(object: &ObjectRef) -> Indexed {
    (object.namespace.clone(), Arc::clone(&object.name))
}

/// How long a handler waits to be retried when an index it takes is not filled yet.
const NOT_FILLED_RETRY: Duration = Duration::from_secs(1);

impl<K, I: IndexDef> Inject<K> for Index<I> {
    fn inject(invocation: &Invocation) -> Result<Self, HandlerError> {
        let index = invocation.services.get::<Self>().ok_or_else(|| {
            HandlerError::permanent(format!(
                "the index `{}` ({}) is not served by this operator: register it with \
                 `#[index]` or insert an `Index` into the operator's services",
                I::ID,
                type_name::<I>()
            ))
        })?;
        if !index.is_filled() {
            // Only the handlers that take this index wait for it: no global gate to deadlock.
            return Err(HandlerError::temporary(
                format!("the index `{}` holds no full list yet", I::ID),
                NOT_FILLED_RETRY,
            ));
        }
        Ok((*index).clone())
    }
}

impl<I: IndexDef> BlockingSafe for Index<I> {}

/// An index as the operator handles it, whatever its types: fed from a watch of its resource.
pub(crate) trait ErasedIndex: Send + Sync {
    /// Takes in an object's version; a body that does not decode is taken out, and the error
    /// returned to be reported.
    fn apply(&self, object: &ObjectState) -> Result<(), String>;
    /// Takes out a deleted object.
    fn remove(&self, object: &ObjectRef);
    /// After a (re)list of `namespace` (`None`: all); bodies that do not decode are left out
    /// and reported.
    fn resync(&self, namespace: Option<&str>, objects: &[Arc<ObjectState>]) -> Vec<String>;
    /// How many watch streams feed the index (each must list once before it is filled).
    fn expect_lists(&self, streams: usize);
    /// One stream's first list is in; after the last one, the index is filled.
    fn listed(&self);
    /// Makes the index injectable.
    fn insert_into(&self, services: &mut Services);
}

impl<I: IndexDef> ErasedIndex for Index<I> {
    fn apply(&self, object: &ObjectState) -> Result<(), String> {
        if !I::FILTERS.matches(object) {
            Self::remove(self, object.reference());
            return Ok(());
        }
        match object.decode::<I::Resource>() {
            Ok(resource) => {
                Self::apply(self, object.reference(), resource);
                Ok(())
            }
            Err(e) => {
                Self::remove(self, object.reference());
                Err(undecodable::<I>(object.reference(), &e))
            }
        }
    }

    fn remove(&self, object: &ObjectRef) {
        Self::remove(self, object);
    }

    fn resync(&self, namespace: Option<&str>, objects: &[Arc<ObjectState>]) -> Vec<String> {
        let mut errors = Vec::new();
        let decoded: Vec<_> = objects
            .iter()
            .filter(|object| I::FILTERS.matches(object))
            .filter_map(|object| match object.decode::<I::Resource>() {
                Ok(resource) => Some((object.reference().clone(), resource)),
                Err(e) => {
                    errors.push(undecodable::<I>(object.reference(), &e));
                    None
                }
            })
            .collect();
        let listed: Vec<_> = (decoded.into_iter())
            .map(|(object, resource)| (indexed(&object), I::pairs(resource)))
            .collect();
        self.contents.write(|store| store.resync(namespace, listed));
        errors
    }

    fn expect_lists(&self, streams: usize) {
        self.contents.unlisted.store(streams, Ordering::SeqCst);
    }

    fn listed(&self) {
        let left = |n: usize| Some(n.saturating_sub(1));
        let before = (self.contents.unlisted)
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, left)
            .unwrap_or_default();
        if before <= 1 {
            self.contents.filled.send_replace(true);
        }
    }

    fn insert_into(&self, services: &mut Services) {
        services.insert(self.clone());
    }
}

/// One index as registered at link time: `#[index]` emits one per function.
#[derive(Clone, Copy)]
pub struct IndexRegistration {
    id: &'static str,
    type_id: fn() -> TypeId,
    resource: fn() -> ResourceInfo,
    index: fn() -> Arc<dyn ErasedIndex>,
}

inventory::collect!(IndexRegistration);

impl IndexRegistration {
    /// The registration of an index (const, for `inventory::submit!`).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kopf_runtime::{IndexDef, ResourceInfo, StaticResource};
    /// # #[derive(serde::Deserialize)] struct Pod {}
    /// # impl StaticResource for Pod {
    /// #     fn resource_info() -> ResourceInfo { ResourceInfo::new("", "v1", "Pod", "pods", true) }
    /// # }
    /// # #[allow(non_camel_case_types)] struct pods {}
    /// # impl IndexDef for pods {
    /// #     type Resource = Pod; type Key = (); type Value = ();
    /// #     const ID: &'static str = "pods";
    /// #     fn pairs(_: Arc<Pod>) -> Vec<((), ())> { vec![((), ())] }
    /// # }
    /// use kopf_runtime::engine::IndexRegistration;
    /// static REGISTRATION: IndexRegistration = IndexRegistration::new::<pods>();
    /// assert_eq!(REGISTRATION.id(), "pods");
    /// assert_eq!(REGISTRATION.resource().plural, "pods");
    /// ```
    #[must_use]
    pub const fn new<I: IndexDef>() -> Self {
        Self {
            id: I::ID,
            type_id: TypeId::of::<I>,
            resource: <I::Resource as StaticResource>::resource_info,
            index: new_erased::<I>,
        }
    }

    /// The index's name.
    #[must_use]
    pub fn id(&self) -> &'static str {
        self.id
    }

    /// The resource the index is made of.
    #[must_use]
    pub fn resource(&self) -> ResourceInfo {
        (self.resource)()
    }

    /// A new, empty index, as the operator feeds it.
    pub(crate) fn index(&self) -> Arc<dyn ErasedIndex> {
        (self.index)()
    }

    /// Whether both register the same index (the same `IndexDef` type).
    pub(crate) fn same_index(&self, other: &Self) -> bool {
        (self.type_id)() == (other.type_id)()
    }
}

impl fmt::Debug for IndexRegistration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IndexRegistration")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

fn new_erased<I: IndexDef>() -> Arc<dyn ErasedIndex> {
    Arc::new(Index::<I>::default())
}

fn undecodable<I: IndexDef>(object: &ObjectRef, e: &serde_json::Error) -> String {
    format!(
        "index `{}`: {object} is left out: its body does not decode as `{}`: {e}",
        I::ID,
        type_name::<I::Resource>()
    )
}

#[cfg(test)]
#[path = "index_tests.rs"]
mod tests;
