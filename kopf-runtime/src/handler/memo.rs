//! `Memo<T>`: per-object state shared by an object's handlers.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use super::inject::{BlockingSafe, Inject};
use crate::core::erased::Invocation;
use crate::core::outcome::HandlerError;

/// A value kept for the object, as kopf's `memo`: shared by all of the object's handlers, kept
/// across a daemon's respawns while the object exists, made with `T::default()` on first use.
/// Another object (also a new one under the same name) has its own. Put interior mutability
/// inside `T` (an atomic, a `Mutex`) to change it; for state shared by all objects, use
/// [`Data<T>`](crate::Data).
///
/// ```
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use kopf_runtime::{Memo, Stopper, daemon};
/// # #[derive(kube::CustomResource, serde::Serialize, serde::Deserialize, Clone, Debug, schemars::JsonSchema)]
/// # #[kube(group = "example.com", version = "v1", kind = "Thing", namespaced)]
/// # struct ThingSpec {}
///
/// /// Counts its own starts for this object, across respawns.
/// #[daemon]
/// async fn watcher(_obj: std::sync::Arc<Thing>, starts: Memo<AtomicU32>, stopper: Stopper) {
///     let n = starts.fetch_add(1, Ordering::Relaxed) + 1;
///     tracing::info!(n, "started");
///     stopper.stopped().await;
/// }
/// ```
pub struct Memo<T>(Arc<T>);

impl<T> Memo<T> {
    /// The shared `Arc`.
    #[must_use]
    pub fn into_inner(self) -> Arc<T> {
        self.0
    }
}

impl<T> Clone for Memo<T> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<T> Deref for Memo<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: fmt::Debug> fmt::Debug for Memo<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Memo").field(&&*self.0).finish()
    }
}

impl<K, T: Default + Send + Sync + 'static> Inject<K> for Memo<T> {
    fn inject(invocation: &Invocation) -> Result<Self, HandlerError> {
        Ok(Self(invocation.memo.get_or_default::<T>()))
    }
}

impl<T> BlockingSafe for Memo<T> {}
