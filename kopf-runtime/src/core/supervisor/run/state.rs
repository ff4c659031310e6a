//! The supervisor's shared state: objects, their handler slots, and instance bookkeeping.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub(crate) use super::instance::InstanceShared;
use super::meter::HandlerMeter;
use super::parts::{KindParts, ObjectParts};
use super::report::ShutdownPhase;
use crate::core::clearance::Clearance;
use crate::core::erased::{ErasedHandler, Services};
use crate::core::latest::ObjectSender;
use crate::core::memo::ObjectMemo;
use crate::core::object::{ObjectRef, ObjectState};
use crate::core::spec::HandlerKind;
use crate::core::supervisor::config::SupervisorConfig;
pub(crate) use crate::core::supervisor::rules::exit::Exit;
use crate::core::sync::lock;
use crate::core::teardown;

/// Everything the supervisor handle and its tasks share.
pub(crate) struct SupervisorCore {
    pub(crate) handlers: Vec<Arc<dyn ErasedHandler>>,
    pub(crate) services: Services,
    pub(crate) config: SupervisorConfig,
    /// The one road out for results and other effects.
    pub(crate) road: super::road::Road,
    pub(crate) state: Mutex<State>,
    pub(crate) rng: Mutex<fastrand::Rng>,
    /// Invocations started.
    pub(crate) fires: AtomicU64,
    /// Invocations that failed.
    pub(crate) failures: AtomicU64,
    /// Dedicated threads alive (also abandoned ones).
    pub(crate) threads: Arc<AtomicUsize>,
    /// Respawns and retries that waited for an abandoned thread of their slot to return.
    pub(crate) thread_waits: AtomicU64,
    /// The number of instances not yet exited or abandoned. Only reaching zero is notified.
    pub(crate) active: watch::Sender<usize>,
    /// Set once the shutdown began: instances' ends are queued in `ended` from then on.
    pub(crate) exiting: AtomicBool,
    /// Ends of instances reported during the shutdown, applied in batches (see `shutdown.rs`).
    pub(crate) ended: Mutex<EndedQueue>,
    /// Cancelled by a second shutdown request: skip the grace period.
    pub(crate) force: CancellationToken,
    /// Whether any handler is an `idle` timer (only then essences are computed).
    pub(crate) needs_essence: bool,
    /// What handler kinds keep for the whole supervisor (the change handlers', if any).
    pub(crate) kinds: KindParts,
    /// Until when invocations may start (no limit if unset).
    pub(crate) clearance: OnceLock<Clearance>,
    /// The counters per handler, by handler index (`None`: the supervisor does not count).
    pub(crate) meters: Option<Box<[HandlerMeter]>>,
}

/// An instance's end, queued during the shutdown.
pub(crate) struct Ended {
    pub(crate) uid: Arc<str>,
    pub(crate) index: usize,
    pub(crate) instance: Arc<InstanceShared>,
    pub(crate) exit: Exit,
}

/// The ends not yet applied, and whether a reporter is applying them.
#[derive(Default)]
pub(crate) struct EndedQueue {
    pub(crate) ends: Vec<Ended>,
    /// An empty vector with the capacity of an earlier batch, for the next one.
    pub(crate) spare: Vec<Ended>,
    pub(crate) draining: bool,
}

/// A map by object UID, with a fast hasher: every instance's start and end looks its object
/// up, tens of thousands at a time at start-up and exit. UIDs come from the API server, not
/// from whoever could choose colliding keys; the hasher is seeded per process all the same.
pub(crate) type UidMap<V> = HashMap<Arc<str>, V, foldhash::fast::RandomState>;

/// Which objects' handlers may run, by UID (see `Supervisor::set_scope`).
pub type InScope = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// Mutable state, behind [`SupervisorCore::state`].
pub(crate) struct State {
    /// Boxed: a hash table has room for up to twice the entries it holds, and while it grows
    /// it is there twice; an entry inside it would cost up to 4× its size at the peak.
    pub(crate) objects: UidMap<Box<ObjectEntry>>,
    pub(crate) paused: bool,
    /// Which objects handlers may run for (`None`: all), see `Supervisor::set_scope`.
    pub(crate) scope: Option<InScope>,
    pub(crate) shutdown: ShutdownPhase,
    pub(crate) daemons_abandoned: u64,
    pub(crate) timers_abandoned: u64,
    /// Recently gone UIDs, so that a late event cannot bring an object back to life.
    pub(crate) tombstones: Tombstones,
    /// Outputs sent and not yet written or given up, if tracked (see `outputs.rs`).
    pub(crate) outputs: super::outputs::PendingOutputs,
}

impl State {
    pub(crate) fn new() -> Self {
        Self {
            objects: UidMap::default(),
            paused: false,
            scope: None,
            shutdown: ShutdownPhase::NotStarted,
            daemons_abandoned: 0,
            timers_abandoned: 0,
            tombstones: Tombstones::default(),
            outputs: super::outputs::PendingOutputs::default(),
        }
    }

    /// Counts an instance's end and adds it to a shutdown report being made.
    pub(crate) fn record_exit(
        &mut self,
        object: ObjectRef,
        handler: &'static str,
        kind: HandlerKind,
        exit: Exit,
    ) {
        if exit == Exit::Abandoned {
            match kind {
                HandlerKind::Daemon => self.daemons_abandoned += 1,
                HandlerKind::Timer => self.timers_abandoned += 1,
                HandlerKind::Create
                | HandlerKind::Update
                | HandlerKind::Delete
                | HandlerKind::Resume
                | HandlerKind::Reconcile => {}
            }
        }
        if let ShutdownPhase::Running(report) = &mut self.shutdown {
            let list = match exit {
                Exit::Done | Exit::Exited => &mut report.exited,
                Exit::Cancelled | Exit::Dropped => &mut report.cancelled,
                Exit::Abandoned => &mut report.abandoned,
            };
            list.push((object, handler));
        }
    }
}

impl Drop for State {
    /// The objects and the shutdown report of a big supervisor are freed on a thread of their
    /// own (see `core::teardown`): dropping the last handle after a shutdown, typically right
    /// before the process exits, does not wait for it.
    fn drop(&mut self) {
        if self.objects.len() < teardown::IN_BACKGROUND_FROM {
            return;
        }
        let objects = std::mem::take(&mut self.objects);
        let shutdown = std::mem::replace(&mut self.shutdown, ShutdownPhase::NotStarted);
        teardown::drop_in_background((objects, shutdown));
    }
}

/// A bounded set of the most recently gone UIDs (oldest forgotten first), each with the
/// resource version it was gone at, so that a stale event cannot bring an object back to life
/// while a later version (an object that left a label selector and came back) can.
#[derive(Default)]
pub(crate) struct Tombstones {
    order: VecDeque<Arc<str>>,
    /// The version each UID was gone at (`None`: unknown, the UID never comes back).
    gone_at: HashMap<Arc<str>, Option<u64>>,
}

impl Tombstones {
    /// How many gone UIDs are remembered.
    pub(crate) const CAPACITY: usize = 4096;

    /// Remembers `uid` as gone at `version` (a later call keeps the later version).
    pub(crate) fn insert(&mut self, uid: Arc<str>, version: Option<u64>) {
        match self.gone_at.entry(Arc::clone(&uid)) {
            std::collections::hash_map::Entry::Occupied(mut e) => {
                let at = e.get_mut();
                *at = (*at).max(version);
                return;
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(version);
            }
        }
        self.order.push_back(uid);
        if self.order.len() > Self::CAPACITY
            && let Some(oldest) = self.order.pop_front()
        {
            self.gone_at.remove(&oldest);
        }
    }

    /// What an event about `uid` at `version` is: about a live object, a stale one about a
    /// gone object, or a later version of a gone one (which forgets the tombstone).
    pub(crate) fn check(&mut self, uid: &str, version: Option<u64>) -> Seen {
        let Some(&at) = self.gone_at.get(uid) else {
            return Seen::Live;
        };
        if !matches!((at, version), (Some(at), Some(v)) if v > at) {
            return Seen::Stale;
        }
        self.gone_at.remove(uid);
        self.order.retain(|u| &**u != uid);
        Seen::Back
    }

    #[cfg(test)]
    pub(crate) fn contains(&self, uid: &str) -> bool {
        self.gone_at.contains_key(uid)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.order.len()
    }
}

/// What [`Tombstones::check`] says of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// Not reported gone (recently).
    Live,
    /// About a gone object, at or before the version it was gone at.
    Stale,
    /// A later version of an object reported gone: it is back.
    Back,
}

/// What the supervisor remembers about one object (by UID).
pub(crate) struct ObjectEntry {
    /// The identity and the idle clock, shared with the object's instances.
    pub(crate) object: Arc<ObjectShared>,
    /// The latest version, shared with running handlers.
    pub(crate) live: ObjectSender,
    pub(crate) essence: Option<u64>,
    pub(crate) deleting: bool,
    pub(crate) gone: bool,
    /// Gone from this supervisor's scope only (another replica serves it): the outputs of its
    /// stopping instances are still sent (see `Supervisor::release`).
    pub(crate) released: bool,
    /// The last `Finalizer` effect sent (`None`: none yet).
    pub(crate) finalizer_sent: Option<bool>,
    /// Whether the latest version carries the framework's finalizer.
    pub(crate) finalizer_on: bool,
    /// One slot per handler, by handler index (a change handler's slot only keeps whether it
    /// matches: its invocations run in the object's change task).
    pub(crate) slots: Vec<Slot>,
    /// What handler kinds keep for the object (its changes, with change handlers only).
    pub(crate) parts: ObjectParts,
}

impl ObjectEntry {
    /// The object's identity.
    pub(crate) fn reference(&self) -> &ObjectRef {
        &self.object.reference
    }

    pub(crate) fn new(object: Arc<ObjectState>, handlers: usize) -> Self {
        Self {
            object: Arc::new(ObjectShared {
                reference: object.reference().clone(),
                idle: IdleClock::new(Instant::now()),
                memo: Arc::default(),
            }),
            live: ObjectSender::new(object),
            essence: None,
            deleting: false,
            gone: false,
            released: false,
            finalizer_sent: None,
            finalizer_on: false,
            slots: (0..handlers).map(|_| Slot::default()).collect(),
            parts: ObjectParts::default(),
        }
    }

    /// Keeps only the object's identity when no handler matches it and no instance runs for
    /// it (a stopping one still reads its live view; a respawn needs a match, which comes with
    /// a new version): watched-but-unmatched objects cost little memory. Running handlers are
    /// not woken (an abandoned thread may still read it).
    pub(crate) fn shed_body(&self) {
        let needed = self
            .slots
            .iter()
            .any(|s| s.matched || matches!(s.run, Run::Active(_)))
            || self.parts.any();
        if needed || self.live.borrow().is_identity_only() {
            return;
        }
        let identity = Arc::new(self.live.borrow().identity_only());
        self.live.send_if_modified(|live| {
            *live = identity;
            false
        });
    }

    /// Whether the entry must be kept: an instance still runs, or an abandoned thread has not
    /// returned (a later version of the object must not start a second instance beside it).
    pub(crate) fn is_busy(&self) -> bool {
        self.slots
            .iter()
            .any(|s| matches!(s.run, Run::Active(_) | Run::Lingering(_)))
            || self.parts.busy()
    }
}

/// One (object, handler) pair.
#[derive(Default)]
pub(crate) struct Slot {
    /// Whether the handler matched the latest version (false while deleting).
    pub(crate) matched: bool,
    /// The body fingerprint a `Skipped` effect was sent for.
    pub(crate) skipped: Option<u64>,
    pub(crate) run: Run,
    /// A cron timer's last run occurrence in this process (the object's annotation may lag).
    pub(crate) cron_last: Option<jiff::Timestamp>,
}

/// The lifecycle of a slot.
///
/// ```text
/// Idle --match--> Active --ended on its own--> Done (never again in this process)
///   ^               |  |
///   +---stopped-----+  +--stopped, its thread abandoned--> Lingering
///   ^                                                          |
///   +--------------------the abandoned thread returned---------+
/// ```
///
/// A slot is respawned at once (if the latest version still matches) when it becomes idle.
#[derive(Default)]
pub(crate) enum Run {
    /// No instance; one is spawned when the handler matches.
    #[default]
    Idle,
    /// One instance, running or stopping.
    Active(Active),
    /// The instance ended, but the thread of its abandoned blocking invocation still runs:
    /// nothing is spawned until it returns. It holds no finalizer.
    Lingering(Lingering),
    /// The handler ended on its own for this object.
    Done,
}

/// A slot whose abandoned thread has not returned yet.
pub(crate) struct Lingering {
    /// The ended instance (to recognise its thread's return).
    pub(crate) shared: Arc<InstanceShared>,
    /// Whether a respawn was wanted, and so warned about, while waiting.
    pub(crate) warned: bool,
}

/// The bookkeeping of a live instance.
pub(crate) struct Active {
    /// Shared with the instance's task (which reports its exit with it).
    pub(crate) shared: Arc<InstanceShared>,
}

/// What all of an object's instances share, in one allocation beside its memo (every instance's task keeps a
/// pointer to it, not copies of its parts).
#[derive(Debug)]
pub(crate) struct ObjectShared {
    pub(crate) reference: ObjectRef,
    /// When the essence last changed (or the object was first seen), for `idle` timers.
    pub(crate) idle: IdleClock,
    /// What the object's handlers keep for it (`Memo<T>`).
    pub(crate) memo: Arc<ObjectMemo>,
}

/// When an object's essence last changed, and how often it did. Timers are woken by the live
/// object channel (every new version) and read this to see whether the essence changed.
#[derive(Debug)]
pub(crate) struct IdleClock {
    state: Mutex<(Instant, u64)>,
}

impl IdleClock {
    pub(crate) fn new(now: Instant) -> Self {
        Self {
            state: Mutex::new((now, 0)),
        }
    }

    /// The essence changed at `now`.
    pub(crate) fn reset(&self, now: Instant) {
        let mut state = lock(&self.state);
        *state = (now, state.1 + 1);
    }

    /// The last change (or the first sighting), and the number of changes so far.
    pub(crate) fn get(&self) -> (Instant, u64) {
        *lock(&self.state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_idle_clock_counts_changes() {
        let t0 = Instant::now();
        let clock = IdleClock::new(t0);
        assert_eq!(clock.get(), (t0, 0));
        clock.reset(t0 + std::time::Duration::from_secs(1));
        clock.reset(t0 + std::time::Duration::from_secs(2));
        assert_eq!(clock.get(), (t0 + std::time::Duration::from_secs(2), 2));
    }

    #[test]
    fn tombstones_forget_the_oldest_beyond_their_capacity() {
        let mut t = Tombstones::default();
        t.insert("a".into(), Some(1));
        t.insert("a".into(), None);
        assert_eq!(t.len(), 1);
        for i in 0..Tombstones::CAPACITY {
            t.insert(format!("u{i}").into(), None);
        }
        assert_eq!(t.len(), Tombstones::CAPACITY);
        assert!(!t.contains("a"));
        assert!(t.contains("u0") && t.contains(&format!("u{}", Tombstones::CAPACITY - 1)));
    }

    #[test]
    fn only_a_later_version_brings_a_uid_back() {
        let mut t = Tombstones::default();
        t.insert("a".into(), Some(7));
        t.insert("a".into(), Some(5)); // an earlier report never lowers the version
        assert_eq!(
            t.check("a", Some(7)),
            Seen::Stale,
            "the same version is stale"
        );
        assert_eq!(t.check("a", Some(3)), Seen::Stale);
        assert_eq!(
            t.check("a", None),
            Seen::Stale,
            "an unknown version is stale"
        );
        assert_eq!(t.check("b", Some(1)), Seen::Live, "never gone");
        assert_eq!(
            t.check("a", Some(8)),
            Seen::Back,
            "a later version is alive"
        );
        assert!(
            !t.contains("a") && t.len() == 0,
            "and forgets the tombstone"
        );
        assert_eq!(t.check("a", Some(8)), Seen::Live);
        t.insert("n".into(), None);
        assert_eq!(
            t.check("n", Some(u64::MAX)),
            Seen::Stale,
            "gone at an unknown version: for good"
        );
    }
}
