//! The echo record: which resourceVersion the operator itself last wrote to each child, so that
//! the child watch can tell its own writes from others' and not trigger the owner for them (an
//! apply that triggers the reconcile that applies again would never settle).
//!
//! ```text
//!  Children::apply ── begin(key) ──▶ in flight ── the server answers rv ──▶ written(rv)
//!                                      │                                     │
//!  child watch: event (key, rv) ───────┴─ wait (bounded) until not in flight ┴─▶ rv == written?
//!                                                                               yes: an echo
//! ```
//!
//! The watch may see the event of a write before the writer reads the answer; it then waits
//! (at most [`Echoes::WAIT`]) for the write in flight to be recorded. A child the watch sees
//! deleted is forgotten, so the record holds one entry per live child the operator wrote.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;

/// A child, as both the writer and the watch name it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ChildKey {
    /// The API group (empty for the core group).
    pub(crate) group: String,
    pub(crate) kind: String,
    pub(crate) namespace: Option<String>,
    pub(crate) name: String,
}

#[derive(Debug, Default)]
struct Entry {
    /// Applies of this child not answered yet.
    in_flight: u32,
    /// The resourceVersion the last successful apply returned.
    written: Option<String>,
}

/// The resourceVersions the operator wrote to its children (see the module's header). Shared
/// by [`Children`](crate::Children) (through [`ChildWrites`](crate::engine::ChildWrites)) and
/// the child watches.
#[derive(Debug)]
pub struct Echoes {
    entries: Mutex<HashMap<ChildKey, Entry>>,
    /// Bumped whenever an apply ends: what a watch waiting for one wakes on.
    ended: watch::Sender<u64>,
}

impl Default for Echoes {
    fn default() -> Self {
        Self {
            entries: Mutex::default(),
            ended: watch::Sender::new(0),
        }
    }
}

/// An apply in flight; recorded when dropped (also when its future is dropped mid-way).
pub(crate) struct InFlight<'a> {
    echoes: &'a Echoes,
    key: ChildKey,
    written: Option<String>,
}

impl InFlight<'_> {
    /// The apply succeeded with this resourceVersion.
    pub(crate) fn written(mut self, resource_version: Option<String>) {
        self.written = resource_version;
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        {
            let mut entries = self.echoes.lock();
            if let Some(entry) = entries.get_mut(&self.key) {
                entry.in_flight = entry.in_flight.saturating_sub(1);
                if self.written.is_some() {
                    entry.written = self.written.take();
                }
                if entry.in_flight == 0 && entry.written.is_none() {
                    entries.remove(&self.key);
                }
            }
        }
        self.echoes.ended.send_modify(|n| *n = n.wrapping_add(1));
    }
}

impl Echoes {
    /// The longest a watch waits for an apply in flight to be answered before it decides.
    pub(crate) const WAIT: Duration = Duration::from_secs(5);

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ChildKey, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An apply of `key` starts.
    pub(crate) fn begin(&self, key: ChildKey) -> InFlight<'_> {
        self.lock().entry(key.clone()).or_default().in_flight += 1;
        InFlight {
            echoes: self,
            key,
            written: None,
        }
    }

    /// Whether the version `resource_version` of `key` is the operator's own last write. If an
    /// apply of it is in flight, waits for it (at most [`Echoes::WAIT`]).
    ///
    /// # Cancellation safety
    /// Cancel-safe: it only reads.
    pub(crate) async fn is_echo(&self, key: &ChildKey, resource_version: &str) -> bool {
        let mut ended = self.ended.subscribe();
        let deadline = tokio::time::Instant::now() + Self::WAIT;
        loop {
            let earlier = {
                let entries = self.lock();
                match entries.get(key) {
                    None => return false,
                    Some(e) if e.in_flight == 0 => {
                        return e.written.as_deref() == Some(resource_version);
                    }
                    Some(e) => e.written.as_deref() == Some(resource_version),
                }
            };
            if earlier {
                return true; // an earlier apply's echo, whatever the one in flight returns
            }
            let wait = tokio::time::timeout_at(deadline, ended.changed()).await;
            if !matches!(wait, Ok(Ok(()))) {
                let entries = self.lock();
                return entries.get(key).and_then(|e| e.written.as_deref())
                    == Some(resource_version);
            }
        }
    }

    /// Whether the watch would have to wait for `key` (an apply of it is in flight).
    pub(crate) fn pending(&self, key: &ChildKey) -> bool {
        self.lock().get(key).is_some_and(|e| e.in_flight > 0)
    }

    /// The child is gone: forgets it (an apply in flight keeps its entry until it ends).
    pub(crate) fn forget(&self, key: &ChildKey) {
        let mut entries = self.lock();
        if entries.get(key).is_some_and(|e| e.in_flight == 0) {
            entries.remove(key);
        }
    }

    /// How many children the record holds (one per live child the operator wrote).
    ///
    /// ```
    /// let echoes = kopf_runtime::__private::children::Echoes::default();
    /// assert_eq!(echoes.len(), 0);
    /// assert!(echoes.is_empty());
    /// ```
    #[must_use]
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether the record holds no child.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What [`Children`](crate::Children) needs from the operator besides the client: the field
/// manager of its applies and the echo record the child watches read. The operator puts one
/// into its services; a handler run without it cannot take `Children`.
///
/// ```
/// use kopf_runtime::engine::{ChildWrites, Services};
///
/// let mut services = Services::default();
/// services.insert(ChildWrites::new("my-operator"));
/// assert_eq!(services.get::<ChildWrites>().unwrap().field_manager(), "my-operator");
/// ```
#[derive(Debug, Clone)]
pub struct ChildWrites {
    field_manager: Arc<str>,
    echoes: Arc<Echoes>,
}

impl ChildWrites {
    /// The writes of the field manager `field_manager`, with a new echo record.
    #[must_use]
    pub fn new(field_manager: impl Into<Arc<str>>) -> Self {
        Self {
            field_manager: field_manager.into(),
            echoes: Arc::default(),
        }
    }

    /// The field manager of the applies.
    #[must_use]
    pub fn field_manager(&self) -> &str {
        &self.field_manager
    }

    /// The echo record (give the same one to the child watches).
    ///
    /// ```
    /// let writes = kopf_runtime::engine::ChildWrites::new("op");
    /// assert!(std::sync::Arc::ptr_eq(writes.echoes(), writes.clone().echoes()));
    /// ```
    #[must_use]
    pub fn echoes(&self) -> &Arc<Echoes> {
        &self.echoes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ChildKey {
        ChildKey {
            group: String::new(),
            kind: "ConfigMap".into(),
            namespace: Some("ns".into()),
            name: name.into(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn only_the_last_written_version_is_an_echo() {
        let echoes = Echoes::default();
        assert!(!echoes.is_echo(&key("a"), "1").await);
        echoes.begin(key("a")).written(Some("5".into()));
        assert!(echoes.is_echo(&key("a"), "5").await);
        assert!(!echoes.is_echo(&key("a"), "6").await, "someone else's edit");
        assert!(!echoes.is_echo(&key("b"), "5").await, "another child");
        // A failed apply keeps the earlier record.
        drop(echoes.begin(key("a")));
        assert!(echoes.is_echo(&key("a"), "5").await);
        echoes.forget(&key("a"));
        assert!(!echoes.is_echo(&key("a"), "5").await);
        assert_eq!(echoes.len(), 0);
        // A failed first apply leaves nothing behind.
        drop(echoes.begin(key("c")));
        assert_eq!(echoes.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_event_ahead_of_the_answer_waits_for_it() {
        let echoes = Arc::new(Echoes::default());
        let start = tokio::time::Instant::now();
        let flight = echoes.begin(key("a"));
        assert!(echoes.pending(&key("a")));
        let check = tokio::spawn({
            let echoes = echoes.clone();
            async move { echoes.is_echo(&key("a"), "7").await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!check.is_finished());
        flight.written(Some("7".into()));
        assert!(check.await.unwrap());
        assert_eq!(start.elapsed(), Duration::from_secs(1));
        // An answer that never comes: decided after the bound, as not an echo.
        let _stuck = echoes.begin(key("b"));
        let start = tokio::time::Instant::now();
        assert!(!echoes.is_echo(&key("b"), "8").await);
        assert_eq!(start.elapsed(), Echoes::WAIT);
    }
}
