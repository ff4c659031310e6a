//! The reconcile rules of one (object, reconcile handler), as a pure state machine (no clock,
//! no I/O): when to run, coalescing, debounce, requeue and error backoff.
//!
//! ```text
//!            start (appeared / resumed): run at once
//!                          │
//!                          ▼
//!   ┌────────────────▶ Running ──trigger──▶ Running{again} (remember the latest trigger)
//!   │                   │   │                     │
//!   │   ended, no trigger│   └─────────┐           │ ended: run again (after the debounce
//!   │   during the run   ▼             │           │ counted from that trigger)
//!   │             Waiting{due}          │           ▼
//!   │   due: requeue_after (success),   │      Running / Debouncing
//!   │   backoff (failure), none         │
//!   │   (permanent / await_change)      │
//!   │         │ trigger     │ due       │
//!   │         ▼             │           │
//!   │   Debouncing{until} ──┼──until────┘ (each trigger moves `until` to now + debounce)
//!   │   (only with debounce)│
//!   └───────────────────────┘
//! ```
//!
//! - **Never two runs**: a trigger during a run is remembered (coalesced: any number of them
//!   give exactly one more run), and the run after it starts once this one ended.
//! - **Every trigger is followed by a run that starts after it**: a trigger while waiting starts
//!   a run at once (or at the end of the debounce); one during a run, after that run.
//! - **Requeue and backoff are separate**: a success's `requeue_after` (≥ [`MIN_DELAY`]) or a
//!   failure's backoff sets the next run when nothing triggers one sooner. Consecutive failures
//!   back off ×2 up to the cap (see `backoff.rs`); a temporary error's own delay wins; only a
//!   success resets the count; a permanent failure waits for the next trigger.
//!
//! The driver (`core::supervisor::reconcile`) feeds the inputs, runs when told, and sleeps until
//! [`Machine::deadline`].

use std::time::Duration;

use tokio::time::Instant;

use super::backoff::Backoff;
pub(crate) use super::backoff::MIN_DELAY;

/// The options of the rules, from the handler spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rules {
    /// The error backoff schedule.
    pub(crate) backoff: Backoff,
    /// How long to wait after the last trigger before running (`None`: run at once).
    pub(crate) debounce: Option<Duration>,
}

/// Where one (object, handler) is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// No run in progress; the next one is at `due` (`None`: at the next trigger).
    Waiting {
        /// When a requeue or a retry is due.
        due: Option<Instant>,
    },
    /// Triggered; the run starts at `until` unless another trigger moves it.
    Debouncing {
        /// The end of the quiet period.
        until: Instant,
    },
    /// A run is in progress.
    Running {
        /// The latest trigger seen during the run (`None`: none).
        again: Option<Instant>,
    },
}

/// How a run ended, as the rules see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// The handler succeeded (or failed with errors ignored); run again after `requeue`
    /// (`None`: at the next trigger).
    Success {
        /// The handler's `Action::requeue_after`.
        requeue: Option<Duration>,
    },
    /// A failure to retry: after `delay` if the error said so, else on the backoff schedule.
    Failed {
        /// A temporary error's own delay.
        delay: Option<Duration>,
    },
    /// A failure not to retry: wait for the next trigger.
    Permanent,
}

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Input {
    /// A reason to run: a change, a child, a related object, an explicit trigger.
    Trigger,
    /// The deadline ([`Machine::deadline`]) has passed.
    Deadline,
    /// The run in progress ended.
    Ended(Ended),
}

/// What the driver must do after a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Nothing (sleep until the deadline, or the next input).
    Wait,
    /// Start a run now.
    Run,
}

/// The rules' state for one (object, handler): where it is, and how many runs failed in a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Machine {
    pub(crate) state: State,
    /// Consecutive failures (reset by a success).
    pub(crate) failures: u32,
}

impl Machine {
    /// A new instance (the object appeared, or the operator started serving it): run at once.
    pub(crate) fn start() -> (Self, Step) {
        let machine = Self {
            state: State::Running { again: None },
            failures: 0,
        };
        (machine, Step::Run)
    }

    /// When the driver must feed [`Input::Deadline`] (`None`: only an input moves it).
    pub(crate) fn deadline(&self) -> Option<Instant> {
        match self.state {
            State::Waiting { due } => due,
            State::Debouncing { until } => Some(until),
            State::Running { .. } => None,
        }
    }

    /// One transition at `now`; `draw` in `[0, 1)` picks a backoff's jitter.
    pub(crate) fn step(&mut self, input: Input, now: Instant, rules: &Rules, draw: f64) -> Step {
        match (self.state, input) {
            (State::Waiting { .. }, Input::Trigger) => self.triggered(now, rules),
            (State::Debouncing { .. }, Input::Trigger) => self.triggered(now, rules),
            (State::Running { .. }, Input::Trigger) => {
                self.state = State::Running { again: Some(now) };
                Step::Wait
            }
            (State::Waiting { due: Some(at) }, Input::Deadline)
            | (State::Debouncing { until: at }, Input::Deadline)
                if now >= at =>
            {
                self.run()
            }
            (State::Running { again }, Input::Ended(ended)) => {
                let due = self.after(ended, now, rules, draw);
                match again {
                    None => {
                        self.state = State::Waiting { due };
                        Step::Wait
                    }
                    Some(at) => match rules.debounce {
                        Some(quiet) if at + quiet > now => {
                            self.state = State::Debouncing { until: at + quiet };
                            Step::Wait
                        }
                        _ => self.run(),
                    },
                }
            }
            // An early deadline, a deadline while running, an end while not running.
            (_, Input::Deadline | Input::Ended(_)) => Step::Wait,
        }
    }

    /// A trigger while not running: run now, or debounce.
    fn triggered(&mut self, now: Instant, rules: &Rules) -> Step {
        match rules.debounce {
            Some(quiet) if !quiet.is_zero() => {
                self.state = State::Debouncing { until: now + quiet };
                Step::Wait
            }
            _ => self.run(),
        }
    }

    fn run(&mut self) -> Step {
        self.state = State::Running { again: None };
        Step::Run
    }

    /// Counts the run's end; when the next run is due if nothing triggers one.
    fn after(&mut self, ended: Ended, now: Instant, rules: &Rules, draw: f64) -> Option<Instant> {
        match ended {
            Ended::Success { requeue } => {
                self.failures = 0;
                requeue.map(|d| now + d.max(MIN_DELAY))
            }
            Ended::Failed { delay } => {
                self.failures = self.failures.saturating_add(1);
                let delay = match delay {
                    Some(own) => own.max(MIN_DELAY),
                    None => rules.backoff.delay(self.failures, draw),
                };
                Some(now + delay)
            }
            Ended::Permanent => None,
        }
    }
}

#[cfg(test)]
#[path = "machine_tests.rs"]
mod tests;
