//! The latest version of one object: replaced by the supervisor, followed by the object's
//! instances (`Live<K>`, idle timers, reconcile loops, the change task).
//!
//! It does what a `tokio::sync::watch` channel did, for a fifth of the memory: a watch channel
//! keeps eight waiter lists, so that many receivers on many threads do not contend (352 bytes
//! an object). An object has a handful of receivers that wake rarely, so one list under one lock
//! does: 80 bytes.
//!
//! ```text
//!   supervisor                       instances
//!   ObjectSender ──send_replace──▶ Shared { object, version, closed } ◀──borrow── ObjectWatch
//!                                    notify ──────────wakes────────────▶ changed()
//! ```

use std::fmt;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::core::object::ObjectState;
use crate::core::sync::lock;

/// The sender is gone: no more versions will come.
///
/// ```
/// # use std::sync::Arc;
/// # use kopf_runtime::engine::{Closed, ObjectState, ObjectWatch};
/// # let object = Arc::new(ObjectState::from_json(serde_json::json!({
/// #     "metadata": {"name": "a", "uid": "u"}})).unwrap());
/// let (sender, watch) = ObjectWatch::channel(object);
/// drop(sender);
/// assert_eq!(watch.has_changed(), Err(Closed));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("no more versions of the object will come")]
pub struct Closed;

struct Slot {
    object: Arc<ObjectState>,
    /// Counts the versions sent with a wake-up (not silent replacements).
    version: u64,
    closed: bool,
}

struct Shared {
    slot: Mutex<Slot>,
    notify: Notify,
}

/// The supervisor's side: replaces the object's latest version. Dropping it closes the watch.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use std::sync::Arc;
/// use kopf_runtime::engine::{ObjectState, ObjectWatch};
///
/// let version = |rv: &str| Arc::new(ObjectState::from_json(serde_json::json!({
///     "metadata": {"name": "a", "uid": "u", "resourceVersion": rv}})).unwrap());
/// let (sender, mut watch) = ObjectWatch::channel(version("1"));
/// sender.send_replace(version("2"));
/// watch.changed().await.unwrap();
/// assert_eq!(watch.borrow().resource_version(), Some("2"));
/// drop(sender);
/// assert!(watch.changed().await.is_err()); // closed, nothing unseen
/// # }
/// ```
pub struct ObjectSender(Arc<Shared>);

/// An instance's side: the object's latest version, and a wait for the next one. Cloning it
/// gives a watch that has seen what this one has. [`Invocation::live`] is one; [`Live`] wraps
/// one with a typed view.
///
/// [`Invocation::live`]: crate::engine::Invocation::live
/// [`Live`]: crate::Live
///
/// ```
/// # use std::sync::Arc;
/// # use kopf_runtime::engine::{ObjectState, ObjectWatch};
/// # let version = |rv: &str| Arc::new(ObjectState::from_json(serde_json::json!({
/// #     "metadata": {"name": "a", "uid": "u", "resourceVersion": rv}})).unwrap());
/// let (sender, mut watch) = ObjectWatch::channel(version("1"));
/// sender.send_replace(version("2"));
/// let copy = watch.clone();
/// assert_eq!(watch.borrow_and_update().resource_version(), Some("2"));
/// assert_eq!(watch.has_changed(), Ok(false));
/// assert_eq!(copy.has_changed(), Ok(true)); // the copy has not seen it
/// ```
#[derive(Clone)]
pub struct ObjectWatch {
    shared: Arc<Shared>,
    seen: u64,
}

impl fmt::Debug for ObjectSender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ObjectSender")
            .field(lock(&self.0.slot).object.reference())
            .finish()
    }
}

impl fmt::Debug for ObjectWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectWatch")
            .field("object", lock(&self.shared.slot).object.reference())
            .field("seen", &self.seen)
            .finish()
    }
}

impl ObjectSender {
    /// A sender whose first version is `object`.
    #[must_use]
    pub fn new(object: Arc<ObjectState>) -> Self {
        Self(Arc::new(Shared {
            slot: Mutex::new(Slot {
                object,
                version: 0,
                closed: false,
            }),
            notify: Notify::new(),
        }))
    }

    /// The latest version.
    #[must_use]
    pub fn borrow(&self) -> Arc<ObjectState> {
        Arc::clone(&lock(&self.0.slot).object)
    }

    /// Makes `object` the latest version and wakes every watch waiting in
    /// [`ObjectWatch::changed`].
    pub fn send_replace(&self, object: Arc<ObjectState>) {
        self.send_if_modified(|latest| {
            *latest = object;
            true
        });
    }

    /// Lets `modify` change the latest version in place; wakes the watches only if it returns
    /// `true` (a silent replacement is for a version with the same content). Returns what
    /// `modify` returned. `modify` must not touch this sender.
    pub fn send_if_modified(&self, modify: impl FnOnce(&mut Arc<ObjectState>) -> bool) -> bool {
        let modified = {
            let mut slot = lock(&self.0.slot);
            let modified = modify(&mut slot.object);
            if modified {
                slot.version += 1;
            }
            modified
        };
        if modified {
            self.0.notify.notify_waiters();
        }
        modified
    }

    /// A watch that has seen the latest version.
    #[must_use]
    pub fn subscribe(&self) -> ObjectWatch {
        ObjectWatch {
            shared: Arc::clone(&self.0),
            seen: lock(&self.0.slot).version,
        }
    }
}

impl Drop for ObjectSender {
    fn drop(&mut self) {
        lock(&self.0.slot).closed = true;
        self.0.notify.notify_waiters();
    }
}

impl ObjectWatch {
    /// A sender and a watch of it, starting at `object`.
    #[must_use]
    pub fn channel(object: Arc<ObjectState>) -> (ObjectSender, Self) {
        let sender = ObjectSender::new(object);
        let watch = sender.subscribe();
        (sender, watch)
    }

    /// The latest version (seen or not).
    #[must_use]
    pub fn borrow(&self) -> Arc<ObjectState> {
        Arc::clone(&lock(&self.shared.slot).object)
    }

    /// The latest version, which counts as seen from now on.
    pub fn borrow_and_update(&mut self) -> Arc<ObjectState> {
        let slot = lock(&self.shared.slot);
        self.seen = slot.version;
        Arc::clone(&slot.object)
    }

    /// Counts the latest version as seen.
    pub fn mark_unchanged(&mut self) {
        self.seen = lock(&self.shared.slot).version;
    }

    /// Whether a version not yet seen was sent.
    ///
    /// # Errors
    /// [`Closed`] if the sender is gone and every version was seen.
    pub fn has_changed(&self) -> Result<bool, Closed> {
        let slot = lock(&self.shared.slot);
        match (slot.version != self.seen, slot.closed) {
            (true, _) => Ok(true),
            (false, true) => Err(Closed),
            (false, false) => Ok(false),
        }
    }

    /// Waits for a version not yet seen, and counts it as seen.
    ///
    /// # Errors
    /// [`Closed`] once the sender is gone and every version was seen.
    ///
    /// # Cancellation safety
    /// This method is cancel safe: a version sent while the future is dropped is reported by
    /// the next call.
    pub async fn changed(&mut self) -> Result<(), Closed> {
        loop {
            let notified = self.shared.notify.notified();
            tokio::pin!(notified);
            // Registered before the version is read: a send after the read wakes it.
            notified.as_mut().enable();
            {
                let slot = lock(&self.shared.slot);
                if slot.version != self.seen {
                    self.seen = slot.version;
                    return Ok(());
                }
                if slot.closed {
                    return Err(Closed);
                }
            }
            notified.await;
        }
    }
}

#[cfg(test)]
#[path = "latest_tests.rs"]
mod tests;
