//! Values kept per object for its handlers, as kopf's `memo`.

use std::any::{Any, TypeId};
use std::fmt;
use std::sync::{Arc, Mutex};

use super::sync::lock;

type Value = Arc<dyn Any + Send + Sync>;

/// Values kept for one object for as long as the supervisor tracks it: shared by all of that
/// object's handlers, and kept across a daemon's respawns (a filter flapping, a resume); a new
/// object under the same name starts empty. One value per type, made on first use.
///
/// ```
/// use std::sync::atomic::{AtomicU32, Ordering};
/// let memo = kopf_runtime::engine::ObjectMemo::default();
/// memo.get_or_default::<AtomicU32>().fetch_add(1, Ordering::Relaxed);
/// assert_eq!(memo.get_or_default::<AtomicU32>().load(Ordering::Relaxed), 1);
/// ```
#[derive(Default)]
pub struct ObjectMemo(Mutex<Vec<(TypeId, Value)>>);

impl ObjectMemo {
    /// The value of type `T`, made with `T::default()` the first time. Keep interior
    /// mutability inside `T` (an atomic, a `Mutex`) to change it.
    ///
    /// ```
    /// # use kopf_runtime::engine::ObjectMemo;
    /// let memo = ObjectMemo::default();
    /// *memo.get_or_default::<std::sync::Mutex<String>>().lock().unwrap() = "seen".into();
    /// assert_eq!(*memo.get_or_default::<std::sync::Mutex<String>>().lock().unwrap(), "seen");
    /// ```
    #[must_use]
    pub fn get_or_default<T: Default + Send + Sync + 'static>(&self) -> Arc<T> {
        let mut values = lock(&self.0);
        let id = TypeId::of::<T>();
        let found = values
            .iter()
            .find(|(t, _)| *t == id)
            .map(|(_, v)| Arc::clone(v));
        let value = found.unwrap_or_else(|| {
            let made: Value = Arc::new(T::default());
            values.push((id, Arc::clone(&made)));
            made
        });
        value
            .downcast::<T>()
            .unwrap_or_else(|_| unreachable!("the memo holds a T under T's TypeId"))
    }
}

impl fmt::Debug for ObjectMemo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectMemo")
            .field("values", &lock(&self.0).len())
            .finish()
    }
}
