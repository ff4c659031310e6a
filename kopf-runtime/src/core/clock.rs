//! The wall clock that cron timers read: the system's, or — in tests — one that follows tokio's
//! (paused) clock from a given moment and can be made to jump.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use jiff::{SignedDuration, Timestamp};
use tokio::time::Instant;

/// The wall clock of a [`Supervisor`](crate::engine::Supervisor)'s cron timers
/// ([`SupervisorConfig::wall_clock`](crate::engine::SupervisorConfig::wall_clock)). Cron
/// occurrences are computed from it and waited for on the monotonic clock.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// use kopf_runtime::engine::WallClock;
/// let start: jiff::Timestamp = "2026-03-29T00:00:00Z".parse().unwrap();
/// let clock = WallClock::following_tokio(start);
/// tokio::time::sleep(std::time::Duration::from_secs(90)).await;
/// assert_eq!(clock.now().to_string(), "2026-03-29T00:01:30Z");
/// clock.jump(jiff::SignedDuration::from_hours(-1)); // someone set the clock back
/// assert_eq!(clock.now().to_string(), "2026-03-28T23:01:30Z");
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct WallClock(Source);

#[derive(Debug, Clone, Default)]
enum Source {
    #[default]
    System,
    Tokio {
        base: Timestamp,
        at: Instant,
        /// Jumps so far, in nanoseconds.
        offset: Arc<AtomicI64>,
    },
}

impl WallClock {
    /// The system's clock (the default).
    #[must_use]
    pub fn system() -> Self {
        Self(Source::System)
    }

    /// A clock that reads `start` now and advances with tokio's clock (so with paused time in
    /// tests), plus every [`jump`](Self::jump).
    #[must_use]
    pub fn following_tokio(start: Timestamp) -> Self {
        Self(Source::Tokio {
            base: start,
            at: Instant::now(),
            offset: Arc::default(),
        })
    }

    /// Moves a [`following_tokio`](Self::following_tokio) clock (and its clones) by `by`, as
    /// an administrator or NTP setting the time would. Does nothing to the system clock.
    pub fn jump(&self, by: SignedDuration) {
        if let Source::Tokio { offset, .. } = &self.0 {
            let nanos = i64::try_from(by.as_nanos()).unwrap_or(i64::MAX);
            offset.fetch_add(nanos, Ordering::SeqCst);
        }
    }

    /// The time now.
    #[must_use]
    pub fn now(&self) -> Timestamp {
        match &self.0 {
            Source::System => Timestamp::now(),
            Source::Tokio { base, at, offset } => {
                let elapsed = SignedDuration::try_from(at.elapsed()).unwrap_or(SignedDuration::MAX);
                let jumped = SignedDuration::from_nanos(offset.load(Ordering::SeqCst));
                base.saturating_add(elapsed)
                    .and_then(|t| t.saturating_add(jumped))
                    .unwrap_or(*base)
            }
        }
    }
}

/// When `clock` will read `at`, on the monotonic clock (now if it is past).
pub(crate) fn monotonic(clock: &WallClock, at: Timestamp) -> Instant {
    let ahead = at.duration_since(clock.now());
    Instant::now() + std::time::Duration::try_from(ahead).unwrap_or_default()
}

/// When `clock` read `at` (now if it is still ahead), on the monotonic clock.
pub(crate) fn monotonic_past(clock: &WallClock, at: Timestamp) -> Instant {
    let now = Instant::now();
    let behind = std::time::Duration::try_from(clock.now().duration_since(at)).unwrap_or_default();
    now.checked_sub(behind).unwrap_or(now)
}
