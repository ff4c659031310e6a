//! The stop ladder of one invocation, as a pure state machine (no clock, no I/O).
//!
//! ```text
//! Running --stop--> Signalled --backoff--> cancel --+--timeout--> Abandoned
//!    |                                       ^      |
//!    +-------------(no backoff)--------------+      +--(no timeout)--> Lingering
//!                                                          (log every `polling`, forever)
//! ```
//!
//! The flag is set first; after `cancellation_backoff` (at once without one) the task is
//! cancelled: an async future is dropped, a blocking thread gets `CANCELLED` and keeps running.
//! What is still running `cancellation_timeout` later is abandoned with a warning; without a
//! timeout the supervisor waits for it as long as it takes. A *forced* stop (the invocation ran
//! past the handler's `timeout`) abandons a blocking task right after the cancellation when no
//! `cancellation_timeout` is set. The driver (`crate::core::supervisor::run::invoke`) feeds the inputs and performs the
//! actions; the task's own exit ends the ladder in any state.

use std::time::Duration;

use tokio::time::Instant;

/// How far a stop went on the stop ladder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub(crate) enum StopStep {
    /// It exited without the ladder (between runs, or at once without a graceful period).
    Exited = 0,
    /// It exited during the graceful period (`cancellation_backoff`).
    Signalled = 1,
    /// It was cancelled.
    Cancelled = 2,
    /// It was abandoned.
    Abandoned = 3,
}

impl StopStep {
    /// Every step, in the order of the counters.
    pub(crate) const ALL: [Self; 4] = [
        Self::Exited,
        Self::Signalled,
        Self::Cancelled,
        Self::Abandoned,
    ];

    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Exited => "exited",
            Self::Signalled => "signalled",
            Self::Cancelled => "cancelled",
            Self::Abandoned => "abandoned",
        }
    }

    pub(crate) fn from_u8(v: u8) -> Self {
        match v {
            0 => Self::Exited,
            1 => Self::Signalled,
            2 => Self::Cancelled,
            _ => Self::Abandoned,
        }
    }
}

/// The options of the ladder, from the handler spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LadderConfig {
    /// The graceful period after the flag is set.
    pub(crate) backoff: Option<Duration>,
    /// The time allowed after cancellation before abandoning.
    pub(crate) timeout: Option<Duration>,
    /// How often a task that is allowed to linger is logged as still exiting.
    pub(crate) polling: Duration,
}

/// Where a stopping invocation is on the ladder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ladder {
    /// Not asked to stop.
    Running,
    /// The flag is set (with `SIGNALLED`); the graceful period ends at `until`.
    Signalled {
        /// The end of the graceful period.
        until: Instant,
        /// A handler timeout: abandon at once after the cancellation if there is no timeout.
        forced: bool,
    },
    /// Cancelled (async: dropped; blocking: flagged `CANCELLED`); abandoned at `until`.
    Cancelled {
        /// When the task is abandoned if it has not exited.
        until: Instant,
    },
    /// Cancelled, no timeout: waiting for the task as long as it takes, logging at `next_log`.
    Lingering {
        /// When "still exiting" is logged next.
        next_log: Instant,
    },
    /// Given up: the task is left behind.
    Abandoned,
}

/// What happened to the ladder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Input {
    /// The task was asked to stop; `forced` for a handler timeout.
    Stop {
        /// Whether the stop must end in cancellation whatever the options.
        forced: bool,
    },
    /// The state's deadline ([`Ladder::deadline`]) has passed.
    Deadline,
}

/// What the driver must do after a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// Nothing.
    None,
    /// Add `SIGNALLED` to the flag (the graceful period has begun).
    Signal,
    /// Cancel the task: drop an async future; add `CANCELLED` to the flag.
    Cancel,
    /// Abandon the task with a warning; add `ABANDONED` to the flag.
    Abandon,
    /// Log that the task is still exiting.
    LogStillExiting,
}

impl Ladder {
    /// When the driver must feed [`Input::Deadline`] (`None`: only a stop or the exit moves it).
    pub(crate) fn deadline(self) -> Option<Instant> {
        match self {
            Self::Running | Self::Abandoned => None,
            Self::Signalled { until, .. } | Self::Cancelled { until } => Some(until),
            Self::Lingering { next_log } => Some(next_log),
        }
    }

    /// Whether the ladder has not been started.
    pub(crate) fn is_running(self) -> bool {
        self == Self::Running
    }

    /// One transition at `now`.
    pub(crate) fn step(self, input: Input, now: Instant, cfg: &LadderConfig) -> (Self, Action) {
        match (self, input) {
            (Self::Running, Input::Stop { forced }) => match cfg.backoff {
                Some(backoff) => (
                    Self::Signalled {
                        until: now + backoff,
                        forced,
                    },
                    Action::Signal,
                ),
                None => cancel(now, forced, cfg),
            },
            (
                Self::Signalled {
                    until,
                    forced: false,
                },
                Input::Stop { forced: true },
            ) => (
                Self::Signalled {
                    until,
                    forced: true,
                },
                Action::None,
            ),
            (Self::Lingering { .. }, Input::Stop { forced: true })
            | (Self::Cancelled { .. }, Input::Deadline) => (Self::Abandoned, Action::Abandon),
            (Self::Signalled { forced, .. }, Input::Deadline) => cancel(now, forced, cfg),
            (Self::Lingering { .. }, Input::Deadline) => (
                Self::Lingering {
                    next_log: now + cfg.polling,
                },
                Action::LogStillExiting,
            ),
            (state, _) => (state, Action::None),
        }
    }
}

/// The cancellation step: then abandon after the timeout, or linger without one.
fn cancel(now: Instant, forced: bool, cfg: &LadderConfig) -> (Ladder, Action) {
    let next = match (cfg.timeout, forced) {
        (Some(timeout), _) => Ladder::Cancelled {
            until: now + timeout,
        },
        (None, true) => Ladder::Cancelled { until: now },
        (None, false) => Ladder::Lingering {
            next_log: now + cfg.polling,
        },
    };
    (next, Action::Cancel)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    fn cfg(backoff: Option<u64>, timeout: Option<u64>) -> LadderConfig {
        LadderConfig {
            backoff: backoff.map(S),
            timeout: timeout.map(S),
            polling: S(60),
        }
    }

    fn run(cfg: &LadderConfig, forced: bool, t0: Instant) -> Vec<(u64, Ladder, Action)> {
        let mut out = Vec::new();
        let (mut state, action) = Ladder::Running.step(Input::Stop { forced }, t0, cfg);
        out.push((0, state, action));
        for _ in 0..3 {
            let Some(at) = state.deadline() else { break };
            let (next, action) = state.step(Input::Deadline, at, cfg);
            out.push(((at - t0).as_secs(), next, action));
            state = next;
        }
        out
    }

    #[test]
    fn both_options_signal_then_cancel_then_abandon() {
        let t0 = Instant::now();
        let steps = run(&cfg(Some(5), Some(3)), false, t0);
        assert_eq!(
            steps,
            vec![
                (
                    0,
                    Ladder::Signalled {
                        until: t0 + S(5),
                        forced: false
                    },
                    Action::Signal
                ),
                (5, Ladder::Cancelled { until: t0 + S(8) }, Action::Cancel),
                (8, Ladder::Abandoned, Action::Abandon),
            ]
        );
    }

    #[test]
    fn timeout_only_cancels_at_once_then_abandons() {
        let t0 = Instant::now();
        let steps = run(&cfg(None, Some(3)), false, t0);
        assert_eq!(
            steps,
            vec![
                (0, Ladder::Cancelled { until: t0 + S(3) }, Action::Cancel),
                (3, Ladder::Abandoned, Action::Abandon),
            ]
        );
    }

    #[test]
    fn backoff_only_signals_cancels_then_lingers_forever() {
        let t0 = Instant::now();
        let steps = run(&cfg(Some(5), None), false, t0);
        assert_eq!(
            steps,
            vec![
                (
                    0,
                    Ladder::Signalled {
                        until: t0 + S(5),
                        forced: false
                    },
                    Action::Signal
                ),
                (
                    5,
                    Ladder::Lingering {
                        next_log: t0 + S(65)
                    },
                    Action::Cancel
                ),
                (
                    65,
                    Ladder::Lingering {
                        next_log: t0 + S(125)
                    },
                    Action::LogStillExiting
                ),
                (
                    125,
                    Ladder::Lingering {
                        next_log: t0 + S(185)
                    },
                    Action::LogStillExiting
                ),
            ]
        );
    }

    #[test]
    fn neither_cancels_at_once_then_lingers() {
        let t0 = Instant::now();
        let steps = run(&cfg(None, None), false, t0);
        assert_eq!(
            steps[0],
            (
                0,
                Ladder::Lingering {
                    next_log: t0 + S(60)
                },
                Action::Cancel
            )
        );
        assert_eq!(
            steps[1],
            (
                60,
                Ladder::Lingering {
                    next_log: t0 + S(120)
                },
                Action::LogStillExiting
            )
        );
    }

    #[test]
    fn a_forced_stop_without_timeout_abandons_right_after_cancelling() {
        let t0 = Instant::now();
        let steps = run(&cfg(Some(2), None), true, t0);
        assert_eq!(
            steps,
            vec![
                (
                    0,
                    Ladder::Signalled {
                        until: t0 + S(2),
                        forced: true
                    },
                    Action::Signal
                ),
                (2, Ladder::Cancelled { until: t0 + S(2) }, Action::Cancel),
                (2, Ladder::Abandoned, Action::Abandon),
            ]
        );
        let steps = run(&cfg(None, Some(4)), true, t0);
        assert_eq!(
            steps[0],
            (0, Ladder::Cancelled { until: t0 + S(4) }, Action::Cancel)
        );
    }

    #[test]
    fn a_forced_stop_escalates_a_signalled_or_lingering_ladder() {
        let t0 = Instant::now();
        let c = cfg(Some(5), None);
        let (s, _) = Ladder::Running.step(Input::Stop { forced: false }, t0, &c);
        let (s, a) = s.step(Input::Stop { forced: true }, t0 + S(1), &c);
        assert_eq!(
            (s, a),
            (
                Ladder::Signalled {
                    until: t0 + S(5),
                    forced: true
                },
                Action::None
            )
        );
        let (s, a) = s.step(Input::Deadline, t0 + S(5), &c);
        assert_eq!(
            (s, a),
            (Ladder::Cancelled { until: t0 + S(5) }, Action::Cancel)
        );
        let c = cfg(None, None);
        let (s, _) = Ladder::Running.step(Input::Stop { forced: false }, t0, &c);
        let (s, a) = s.step(Input::Stop { forced: true }, t0 + S(7), &c);
        assert_eq!((s, a), (Ladder::Abandoned, Action::Abandon));
    }

    #[test]
    fn repeated_or_late_inputs_change_nothing() {
        let t0 = Instant::now();
        let c = cfg(Some(5), Some(3));
        let signalled = Ladder::Signalled {
            until: t0 + S(5),
            forced: false,
        };
        assert_eq!(
            signalled.step(Input::Stop { forced: false }, t0, &c),
            (signalled, Action::None)
        );
        let forced = Ladder::Signalled {
            until: t0 + S(5),
            forced: true,
        };
        assert_eq!(
            forced.step(Input::Stop { forced: true }, t0, &c),
            (forced, Action::None)
        );
        let cancelled = Ladder::Cancelled { until: t0 + S(8) };
        assert_eq!(
            cancelled.step(Input::Stop { forced: true }, t0, &c),
            (cancelled, Action::None)
        );
        let lingering = Ladder::Lingering {
            next_log: t0 + S(60),
        };
        assert_eq!(
            lingering.step(Input::Stop { forced: false }, t0, &c),
            (lingering, Action::None)
        );
        assert_eq!(
            Ladder::Abandoned.step(Input::Deadline, t0, &c),
            (Ladder::Abandoned, Action::None)
        );
        assert_eq!(
            Ladder::Running.step(Input::Deadline, t0, &c),
            (Ladder::Running, Action::None)
        );
        assert!(Ladder::Running.is_running() && !signalled.is_running());
        assert_eq!(Ladder::Running.deadline(), None);
        assert_eq!(Ladder::Abandoned.deadline(), None);
        assert_eq!(lingering.deadline(), Some(t0 + S(60)));
        assert_eq!(cancelled.deadline(), Some(t0 + S(8)));
    }
}
