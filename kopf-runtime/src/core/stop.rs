//! The stop flag given to every daemon and timer: why and since when it was asked to stop.

use crate::core::sync::lock;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::sync::futures::Notified;
use tokio::sync::{Notify, watch};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;

pub use super::stop_reason::StopReason;

#[derive(Debug, Default)]
struct State {
    reason: StopReason,
    since: Option<Instant>,
    /// Threads blocked in [`Stopper::wait`]: only then does a stop wake the condvar (a system
    /// call even with nobody waiting, paid twice by every instance at shutdown).
    blocked: u32,
    /// Whether an async waiter holds the flag's one waker slot (see `StopWait`).
    slot_held: bool,
    /// The slot's waker, taken and woken by a stop.
    waker: Option<Waker>,
}

/// Until when the holder of a flag may act, on the local monotonic clock (`None`: not at all).
/// The replica's leadership or shard membership moves it; see [`Stopper::bind_validity`].
pub(crate) type Validity = watch::Receiver<Option<Instant>>;

/// One allocation per flag: the reason behind a mutex, a lock-free "is set" bit for the hot
/// checks, a condvar for blocking waiters, a `Notify` for async waiters, a cancellation token
/// made only when somebody asks for one, and the validity the flag is bound to, if any.
#[derive(Debug, Default)]
struct FlagState {
    state: Mutex<State>,
    set: AtomicBool,
    cond: Condvar,
    notify: Notify,
    token: OnceLock<CancellationToken>,
    validity: OnceLock<Validity>,
    /// How late [`Stopper::sleep`] may wake, in milliseconds (0: exactly on time).
    slack_ms: u32,
}

/// The stop flag of one handler instance: async handlers await it, blocking handlers poll or
/// wait on it. Cloning gives another handle to the same flag.
///
/// The reason accumulates (see [`StopReason`]); the time it was **first** set is kept.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use kopf_runtime::{StopReason, Stopper};
/// let stopper = Stopper::new();
/// assert!(!stopper.is_stopped());
/// stopper.stop(StopReason::RESOURCE_DELETED);
/// stopper.stopped().await; // returns at once: the flag is set
/// assert_eq!(stopper.reason(), StopReason::RESOURCE_DELETED);
/// # }
/// ```
#[derive(Clone, Default)]
pub struct Stopper {
    inner: Arc<FlagState>,
}

impl fmt::Debug for Stopper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stopper")
            .field("reason", &self.reason())
            .finish()
    }
}

impl Stopper {
    /// A new flag, not set.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// A new flag whose [`Stopper::sleep`] may wake up to `slack` late (in whole milliseconds,
    /// tokio's resolution; at most 49 days), so that the sleeps of many handlers end on the
    /// same instants and the runtime wakes once for them all. A handler's `slack` option gives
    /// its flags one.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// # use kopf_runtime::Stopper; use std::time::Duration; use tokio::time::Instant;
    /// let stopper = Stopper::with_slack(Duration::from_millis(100));
    /// assert_eq!(stopper.slack(), Duration::from_millis(100));
    /// let start = Instant::now();
    /// assert!(!stopper.sleep(Duration::from_millis(1_030)).await);
    /// let slept = start.elapsed();
    /// // Never early; at most the slack late (to tokio's millisecond).
    /// assert!(slept >= Duration::from_millis(1_030) && slept <= Duration::from_millis(1_130));
    /// # }
    /// ```
    #[must_use]
    pub fn with_slack(slack: Duration) -> Self {
        let slack_ms = u32::try_from(slack.as_millis()).unwrap_or(u32::MAX);
        Self {
            inner: Arc::new(FlagState {
                slack_ms,
                ..FlagState::default()
            }),
        }
    }

    /// How late [`Stopper::sleep`] may wake ([`Duration::ZERO`]: on time, the default).
    #[must_use]
    pub fn slack(&self) -> Duration {
        Duration::from_millis(u64::from(self.inner.slack_ms))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is two plain values; a panic while holding the lock cannot corrupt them.
        lock(&self.inner.state)
    }

    /// Sets the flag, or adds `reason` to an already set flag (the first time is kept).
    ///
    /// ```
    /// # use kopf_runtime::{StopReason, Stopper};
    /// let s = Stopper::new();
    /// s.stop(StopReason::FILTERS_MISMATCH);
    /// s.stop(StopReason::OPERATOR_EXITING);
    /// assert_eq!(s.reason(), StopReason::FILTERS_MISMATCH | StopReason::OPERATOR_EXITING);
    /// ```
    pub fn stop(&self, reason: StopReason) {
        let mut state = self.lock();
        state.reason |= reason;
        if state.since.is_none() {
            state.since = Some(Instant::now());
        }
        self.inner.set.store(true, Ordering::SeqCst);
        // Read under the lock: `token()` checks the flag under the same lock after making it.
        let token = self.inner.token.get().cloned();
        // Read under the lock: a thread counts itself under it before it blocks.
        let wake_threads = state.blocked > 0;
        let waker = state.waker.take();
        drop(state);
        if wake_threads {
            self.inner.cond.notify_all();
        }
        if let Some(waker) = waker {
            waker.wake();
        }
        self.inner.notify.notify_waiters();
        if let Some(token) = token {
            token.cancel();
        }
    }

    /// Whether the flag is set.
    ///
    /// With leader election or sharding, the flag of a running handler also counts as set (with
    /// [`StopReason::OPERATOR_PAUSING`]) from the moment this replica's validity lapsed on its
    /// own monotonic clock, before the operator has noticed and stopped the handler: a process
    /// thawed after a freeze past its lease sees `true` here at once. See
    /// `docs/high-availability.md`.
    ///
    /// ```
    /// # use kopf_runtime::Stopper;
    /// assert!(!Stopper::new().is_stopped());
    /// ```
    #[must_use]
    pub fn is_stopped(&self) -> bool {
        self.inner.set.load(Ordering::SeqCst) || self.lapse()
    }

    /// From now on, the flag counts as set once `validity` has lapsed (its deadline passed, or
    /// it was withdrawn): every check of the flag compares the deadline with the clock, and the
    /// first one to find it passed sets the flag with [`StopReason::OPERATOR_PAUSING`]. The
    /// first validity bound stays.
    pub(crate) fn bind_validity(&self, validity: impl FnOnce() -> Validity) {
        let _bound = self.inner.validity.get_or_init(validity);
    }

    /// Whether the bound validity has lapsed; sets the flag if so (called only while unset).
    fn lapse(&self) -> bool {
        let lapsed = self.inner.validity.get().is_some_and(|validity| {
            validity
                .borrow()
                .is_none_or(|until| Instant::now() >= until)
        });
        if lapsed {
            self.stop(StopReason::OPERATOR_PAUSING);
        }
        lapsed
    }

    /// All reasons set so far (empty if the flag is not set).
    ///
    /// ```
    /// # use kopf_runtime::{StopReason, Stopper};
    /// let stopper = Stopper::new();
    /// assert!(stopper.reason().is_empty());
    /// stopper.stop(StopReason::OPERATOR_EXITING);
    /// assert_eq!(stopper.reason(), StopReason::OPERATOR_EXITING);
    /// ```
    #[must_use]
    pub fn reason(&self) -> StopReason {
        let _set = self.is_stopped();
        self.lock().reason
    }

    /// When the flag was first set (tokio time, so paused-time tests see exact instants).
    ///
    /// ```
    /// # use kopf_runtime::Stopper;
    /// assert!(Stopper::new().since().is_none());
    /// ```
    #[must_use]
    pub fn since(&self) -> Option<Instant> {
        let _set = self.is_stopped();
        self.lock().since
    }

    /// Waits until the flag is set.
    ///
    /// # Cancellation safety
    /// This method is cancel safe: dropping the future has no effect on the flag.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// # use kopf_runtime::{StopReason, Stopper};
    /// let s = Stopper::new();
    /// let s2 = s.clone();
    /// tokio::spawn(async move { s2.stop(StopReason::OPERATOR_EXITING) });
    /// s.stopped().await;
    /// # }
    /// ```
    pub fn stopped(&self) -> impl Future<Output = ()> + Send + '_ {
        self.reasons(|reason| !reason.is_empty())
    }

    /// Waits until the reasons satisfy `done` (checked again at every `stop()`).
    ///
    /// # Cancellation safety
    /// Cancel safe: dropping it has no effect on the flag.
    pub(crate) fn reasons<F: Fn(StopReason) -> bool>(&self, done: F) -> Reasons<'_, F> {
        Reasons {
            wait: StopWait::new(self),
            done,
        }
    }

    /// Sleeps for `duration` or until the flag is set, whichever comes first. Returns `true` if
    /// the flag is set (so `if stopper.sleep(d).await { break }` reads naturally). The sleep
    /// counts from the call.
    ///
    /// The flag is checked again when the sleep ends, so a replica that wakes up past its
    /// validity (thawed after a freeze) returns `true` before the loop's next body can run.
    ///
    /// With a [slack](Stopper::with_slack), the sleep ends on the first line of the process's
    /// grid of that slack at or after `duration`: never early, less than the slack late.
    ///
    /// # Cancellation safety
    /// This method is cancel safe.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// # use kopf_runtime::Stopper; use std::time::Duration;
    /// assert!(!Stopper::new().sleep(Duration::from_secs(5)).await);
    /// # }
    /// ```
    pub fn sleep(&self, duration: Duration) -> impl Future<Output = bool> + Send + '_ {
        StopSleep::new(self, self.wake_at(duration))
    }

    /// When a sleep of `duration` from now ends, with the flag's slack.
    fn wake_at(&self, duration: Duration) -> tokio::time::Instant {
        crate::core::slack::wake_at(tokio::time::Instant::now() + duration, self.slack())
    }

    /// Blocks the current thread for up to `timeout` or until the flag is set. Returns `true` if
    /// the flag is set (checked again when the wait ends, like [`Stopper::sleep`]). For blocking
    /// (`fn`) handlers; never call it from async code.
    ///
    /// ```
    /// # use kopf_runtime::{StopReason, Stopper}; use std::time::Duration;
    /// let s = Stopper::new();
    /// assert!(!s.wait(Duration::from_millis(1)));
    /// s.stop(StopReason::RESOURCE_DELETED);
    /// assert!(s.wait(Duration::from_secs(3600)));
    /// ```
    #[must_use = "the return value says whether the handler must stop"]
    pub fn wait(&self, timeout: Duration) -> bool {
        if self.is_stopped() {
            return true;
        }
        let mut guard = self.lock();
        guard.blocked += 1;
        let (mut guard, _) = self
            .inner
            .cond
            .wait_timeout_while(guard, timeout, |s| s.reason.is_empty())
            .unwrap_or_else(PoisonError::into_inner);
        guard.blocked -= 1;
        let set = !guard.reason.is_empty();
        drop(guard);
        set || self.is_stopped()
    }

    /// A cancellation token that is cancelled when the flag is set, for `select!` and for
    /// passing to libraries that take a [`CancellationToken`].
    ///
    /// ```
    /// # use kopf_runtime::{StopReason, Stopper};
    /// let s = Stopper::new();
    /// let token = s.token();
    /// s.stop(StopReason::OPERATOR_EXITING);
    /// assert!(token.is_cancelled());
    /// ```
    #[must_use]
    pub fn token(&self) -> CancellationToken {
        let token = self.inner.token.get_or_init(CancellationToken::new).clone();
        let _set = self.is_stopped();
        // Under the lock, so that a concurrent `stop()` either sees the token or is seen here.
        if !self.lock().reason.is_empty() {
            token.cancel();
        }
        token
    }
}

// Async waits on a flag, each as one small future.
//
// Every idle timer's task, and every daemon that sleeps between its rounds, holds a sleep for
// as long as it waits, so its size is paid once per instance. A `Notified` takes 64 bytes (a
// node of the `Notify`'s list of waiters); the one waiter a flag has at a time (the task
// that owns it) instead keeps its waker in the flag's state, and a waiter that finds that slot
// held uses a boxed `Notified`. Written with `select!` over a `Notified`, a sleep took 248
// bytes; as a `Notified` and a `Sleep` in one future, 184; with the slot, 128.

/// Waits for a flag: through its waker slot when this waiter holds it, else through a boxed
/// `Notified`. Nothing is taken before the first poll (a wait that is ready at once, or never
/// polled, costs no lock); the first poll checks the flag under the lock a `stop()` takes, so a
/// stop before it is not lost. Dropping it frees the slot.
pub(crate) enum StopWait<'a> {
    /// Not polled yet, or found done at its first poll: holds nothing.
    Unpolled(&'a Stopper),
    /// Holds the flag's waker slot.
    Slot(&'a Stopper),
    /// Another waiter held the slot (the flag is kept in the box: three variants of one word
    /// each keep the waiter at two words).
    Shared(Pin<Box<SharedWait<'a>>>),
}

pin_project_lite::pin_project! {
    /// A waiter that did not get the flag's slot: a `Notified` of the flag, made before the
    /// check that follows it.
    pub(crate) struct SharedWait<'a> {
        stopper: &'a Stopper,
        #[pin]
        notified: Notified<'a>,
    }
}

impl<'a> StopWait<'a> {
    /// A waiter of `stopper`'s flag (it takes the slot at its first poll if the slot is free).
    pub(crate) fn new(stopper: &'a Stopper) -> Self {
        Self::Unpolled(stopper)
    }

    /// The flag waited for.
    fn stopper(&self) -> &'a Stopper {
        match self {
            Self::Unpolled(stopper) | Self::Slot(stopper) => stopper,
            Self::Shared(shared) => shared.stopper,
        }
    }

    /// Whether the reasons satisfy `done`; if not, the task is woken by the next `stop()`.
    pub(crate) fn poll_until(
        &mut self,
        cx: &mut Context<'_>,
        done: impl Fn(StopReason) -> bool,
    ) -> bool {
        let stopper = self.stopper();
        match self {
            Self::Unpolled(_) | Self::Slot(_) => {
                // Applies a lapsed validity first (it sets the flag).
                let _set = stopper.is_stopped();
                let mut state = stopper.lock();
                if done(state.reason) {
                    return true;
                }
                if matches!(self, Self::Unpolled(_)) {
                    if state.slot_held {
                        drop(state);
                        let notified = stopper.inner.notify.notified();
                        *self = Self::Shared(Box::pin(SharedWait { stopper, notified }));
                        return self.poll_until(cx, done);
                    }
                    state.slot_held = true;
                    *self = Self::Slot(stopper);
                }
                // Under the lock a `stop()` takes the waker under: set before the check above
                // was seen by it, or wakes the waker kept here.
                match &mut state.waker {
                    Some(waker) if waker.will_wake(cx.waker()) => {}
                    slot => *slot = Some(cx.waker().clone()),
                }
                false
            }
            Self::Shared(shared) => loop {
                // Polled (registered) before the check: a stop after the check wakes the task.
                let mut notified = shared.as_mut().project().notified;
                let woken = notified.as_mut().poll(cx).is_ready();
                if done(stopper.reason()) {
                    return true;
                }
                if !woken {
                    return false;
                }
                // Woken, but not done: wait for the next notification.
                notified.set(stopper.inner.notify.notified());
            },
        }
    }
}

impl Drop for StopWait<'_> {
    fn drop(&mut self) {
        if let Self::Slot(stopper) = self {
            let mut state = stopper.lock();
            state.slot_held = false;
            state.waker = None;
        }
    }
}

pin_project_lite::pin_project! {
    /// Sleeps until a deadline unless the flag is set first; resolves to whether the flag is
    /// set (checked again when the deadline passes, so a flag whose validity lapsed meanwhile
    /// counts). The flag is checked first at every poll.
    ///
    /// # Cancellation safety
    /// Cancel safe: dropping it has no effect on the flag.
    pub(crate) struct StopSleep<'a> {
        wait: StopWait<'a>,
        #[pin]
        sleep: Sleep,
    }
}

impl<'a> StopSleep<'a> {
    /// A sleep until `deadline` that `stopper` ends early.
    pub(crate) fn new(stopper: &'a Stopper, deadline: Instant) -> Self {
        Self {
            wait: StopWait::new(stopper),
            sleep: tokio::time::sleep_until(deadline),
        }
    }
}

impl Future for StopSleep<'_> {
    type Output = bool;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<bool> {
        let this = self.project();
        if this.wait.poll_until(cx, |reason| !reason.is_empty()) {
            return Poll::Ready(true);
        }
        let stopper = this.wait.stopper();
        this.sleep.poll(cx).map(|()| stopper.is_stopped())
    }
}

/// Waits until the flag's reasons satisfy a condition ([`Stopper::reasons`]).
///
/// # Cancellation safety
/// Cancel safe: dropping it has no effect on the flag.
pub(crate) struct Reasons<'a, F> {
    wait: StopWait<'a>,
    done: F,
}

impl<F: Fn(StopReason) -> bool + Unpin> Future for Reasons<'_, F> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if this.wait.poll_until(cx, &this.done) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

#[cfg(test)]
#[path = "stop_tests.rs"]
mod tests;
