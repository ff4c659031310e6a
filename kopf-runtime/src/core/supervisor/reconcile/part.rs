//! What reconcile handlers keep per object (its part: the trigger counter, which slots clean
//! up), and the rules lifecycle asks about a reconcile slot: what to start, why to stop, whether
//! it holds the finalizer. A leaf of this folder.

use tokio::sync::watch;

use crate::core::outcome::{ErrorKind, HandlerError};
use crate::core::reconcile::backoff::Backoff;
use crate::core::reconcile::kinds::Trigger;
use crate::core::reconcile::machine::{Ended, Rules};
use crate::core::spec::{ErrorsMode, HandlerKind, HandlerSpec};
use crate::core::stop::StopReason;
use crate::core::supervisor::run::parts::ObjectPart;

/// Triggers sent to an object's reconcile instances: how many so far, and the latest cause.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Pulse {
    /// Triggers so far.
    pub(crate) count: u64,
    /// The latest trigger's cause.
    pub(crate) cause: Option<Trigger>,
}

/// An object's part for its reconcile handlers: the trigger counter its instances watch, and
/// which of its slots run a cleanup rather than the loop.
pub(crate) struct Triggers {
    pulses: watch::Sender<Pulse>,
    /// The handler indexes whose active instance is a cleanup.
    cleaning: Vec<usize>,
}

impl Default for Triggers {
    fn default() -> Self {
        Self {
            pulses: watch::Sender::new(Pulse::default()),
            cleaning: Vec::new(),
        }
    }
}

impl Triggers {
    /// Counts a trigger; every instance of the object sees it.
    pub(crate) fn send(&self, cause: Trigger) {
        self.pulses.send_modify(|pulse| {
            pulse.count = pulse.count.wrapping_add(1);
            pulse.cause = Some(cause);
        });
    }

    /// A receiver for a new instance (the triggers so far are covered by its first run).
    pub(crate) fn subscribe(&self) -> watch::Receiver<Pulse> {
        self.pulses.subscribe()
    }

    /// Records what the slot of handler `index` runs now.
    pub(crate) fn started(&mut self, index: usize, wanted: Wanted) {
        self.cleaning.retain(|&i| i != index);
        if wanted == Wanted::Cleanup {
            self.cleaning.push(index);
        }
    }

    /// Whether the active instance of handler `index` is a cleanup.
    pub(crate) fn cleaning(&self, index: usize) -> bool {
        self.cleaning.contains(&index)
    }
}

impl ObjectPart for Triggers {
    fn busy(&self) -> bool {
        false // the instances are in the object's slots, which keep it
    }
}

/// What a reconcile handler's slot should run, if it is idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wanted {
    /// The reconcile loop.
    Reconcile,
    /// The cleanup (the object is being deleted).
    Cleanup,
}

/// What an idle reconcile slot should run: the loop while the object matches and lives, the
/// cleanup once it is being deleted (with a cleanup, a matching handler and our finalizer on
/// the object), else nothing.
pub(crate) fn wanted(
    spec: &HandlerSpec,
    matched: bool,
    deleting: bool,
    gone: bool,
    finalizer_on: bool,
) -> Option<Wanted> {
    match () {
        () if !matched || gone => None,
        () if !deleting => Some(Wanted::Reconcile),
        () if spec.reconcile.cleanup && finalizer_on => Some(Wanted::Cleanup),
        () => None,
    }
}

/// Whether a deleting object's version is matched against the handler: a reconcile handler
/// with a cleanup (its filters decide whether the cleanup runs), as a delete handler's do.
pub(crate) fn matches_while_deleting(spec: &HandlerSpec) -> bool {
    spec.kind == HandlerKind::Reconcile && spec.reconcile.cleanup
}

/// Why an active reconcile instance must stop (empty: it may go on). The loop stops as any
/// instance does; a cleanup runs on while the object is deleting, and stops only when the object
/// is gone or the supervisor pauses or exits.
pub(crate) fn stop_reason(
    cleaning: bool,
    gone: bool,
    paused: bool,
    loop_reason: StopReason,
) -> StopReason {
    if !cleaning {
        return loop_reason;
    }
    let mut reason = StopReason::empty();
    if gone {
        reason |= StopReason::RESOURCE_DELETED;
    }
    if paused {
        reason |= StopReason::OPERATOR_PAUSING;
    }
    reason
}

/// Whether an idle (or lingering) reconcile slot holds the finalizer: while the handler matches
/// a live object, and, with a cleanup, while the deleting object still waits for it.
pub(crate) fn holds_idle(
    spec: &HandlerSpec,
    matched: bool,
    deleting: bool,
    gone: bool,
    finalizer_on: bool,
) -> bool {
    matched && !gone && (!deleting || (spec.reconcile.cleanup && finalizer_on))
}

/// The rules of a handler: its backoff (from the spec's `backoff`, up to `backoff_max`) and
/// debounce.
pub(crate) fn rules(spec: &HandlerSpec) -> Rules {
    Rules {
        backoff: Backoff {
            initial: spec.backoff,
            max: spec.reconcile.backoff_max,
        },
        debounce: spec.reconcile.debounce,
    }
}

/// How a failure counts for the rules.
pub(crate) fn judge(err: &HandlerError, errors: ErrorsMode) -> Ended {
    match (err.kind(), errors) {
        (ErrorKind::Permanent, _) => Ended::Permanent,
        (ErrorKind::Temporary { delay }, _) => Ended::Failed { delay: Some(delay) },
        (ErrorKind::Other | ErrorKind::Timeout, ErrorsMode::Temporary) => {
            Ended::Failed { delay: None }
        }
        (ErrorKind::Other | ErrorKind::Timeout, ErrorsMode::Permanent) => Ended::Permanent,
        (ErrorKind::Other | ErrorKind::Timeout, ErrorsMode::Ignored) => {
            Ended::Success { requeue: None }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::spec::ReconcileOptions;

    #[test]
    fn an_idle_slot_runs_the_loop_while_alive_and_the_cleanup_once_deleting() {
        let plain = HandlerSpec::new("r", HandlerKind::Reconcile);
        let with_cleanup = HandlerSpec {
            reconcile: ReconcileOptions {
                cleanup: true,
                ..ReconcileOptions::NONE
            },
            finalizer: true,
            ..plain
        };
        // (matched, deleting, gone, finalizer_on) -> plain, with cleanup
        let table = [
            (
                (true, false, false, false),
                Some(Wanted::Reconcile),
                Some(Wanted::Reconcile),
            ),
            ((false, false, false, true), None, None),
            ((true, true, false, true), None, Some(Wanted::Cleanup)),
            ((true, true, false, false), None, None),
            ((false, true, false, true), None, None),
            ((true, false, true, true), None, None),
        ];
        for ((m, d, g, f), a, b) in table {
            assert_eq!(wanted(&plain, m, d, g, f), a, "plain {m} {d} {g} {f}");
            assert_eq!(
                wanted(&with_cleanup, m, d, g, f),
                b,
                "cleanup {m} {d} {g} {f}"
            );
        }
        assert!(matches_while_deleting(&with_cleanup) && !matches_while_deleting(&plain));
        assert_eq!(
            rules(&plain).backoff.initial,
            ReconcileOptions::DEFAULT_BACKOFF
        );
    }

    #[tokio::test]
    async fn triggers_reach_every_instance_and_coalesce() {
        let triggers = Triggers::default();
        let (mut a, mut b) = (triggers.subscribe(), triggers.subscribe());
        triggers.send(Trigger::Child);
        triggers.send(Trigger::Related);
        assert!(a.has_changed().unwrap() && b.has_changed().unwrap());
        let pulse = *a.borrow_and_update();
        assert_eq!((pulse.count, pulse.cause), (2, Some(Trigger::Related)));
        assert!(!a.has_changed().unwrap());
        b.changed().await.unwrap();
        assert!(!triggers.busy());
    }

    #[test]
    fn failures_count_by_their_kind_and_the_errors_mode() {
        use std::time::Duration;
        let other = HandlerError::msg("boom");
        let temporary = HandlerError::temporary("later", Duration::from_secs(7));
        let permanent = HandlerError::permanent("never");
        let table = [
            (&other, ErrorsMode::Temporary, Ended::Failed { delay: None }),
            (&other, ErrorsMode::Permanent, Ended::Permanent),
            (
                &other,
                ErrorsMode::Ignored,
                Ended::Success { requeue: None },
            ),
            (
                &temporary,
                ErrorsMode::Permanent,
                Ended::Failed {
                    delay: Some(Duration::from_secs(7)),
                },
            ),
            (&permanent, ErrorsMode::Ignored, Ended::Permanent),
        ];
        for (err, mode, ended) in table {
            assert_eq!(judge(err, mode), ended, "{err} with {mode:?}");
        }
    }
}
