//! Operator exit: stop everything, wait for the ladders up to a deadline, abandon the rest.

use std::sync::Arc;

use tokio::time::Instant;

use super::report::{ShutdownPhase, ShutdownReport};
use super::state::{Exit, Run, State, SupervisorCore};
use crate::core::object::ObjectRef;
use crate::core::spec::HandlerKind;
use crate::core::stop::StopReason;

/// What a shutdown request found.
enum Begin {
    First,
    Again,
    Finished(ShutdownReport),
}

impl State {
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

impl SupervisorCore {
    /// See `Supervisor::shutdown`.
    pub(crate) async fn shutdown(self: &Arc<Self>) -> ShutdownReport {
        match self.begin_shutdown() {
            Begin::Finished(report) => return report,
            Begin::Again => self.force.cancel(),
            Begin::First => {
                let deadline = Instant::now() + self.config.shutdown_timeout;
                let mut active = self.active.subscribe();
                tokio::select! {
                    _ = active.wait_for(|n| *n == 0) => {}
                    () = tokio::time::sleep_until(deadline) => {}
                    () = self.force.cancelled() => {}
                }
            }
        }
        self.finish_shutdown()
    }

    fn begin_shutdown(&self) -> Begin {
        let mut state = self.lock();
        match &state.shutdown {
            ShutdownPhase::Done(report) => return Begin::Finished(report.clone()),
            ShutdownPhase::Running(_) => return Begin::Again,
            ShutdownPhase::NotStarted => {}
        }
        state.shutdown = ShutdownPhase::Running(ShutdownReport::default());
        tracing::info!("the operator is exiting: stopping all daemons and timers");
        for entry in state.objects.values() {
            for slot in &entry.slots {
                if let Run::Active(active) = &slot.run {
                    active.shared.stop(StopReason::OPERATOR_EXITING);
                }
            }
        }
        Begin::First
    }

    /// Abandons what is left and completes the report (idempotent).
    fn finish_shutdown(self: &Arc<Self>) -> ShutdownReport {
        let mut state = self.lock();
        if let ShutdownPhase::Done(report) = &state.shutdown {
            return report.clone();
        }
        let mut left = Vec::new();
        for (uid, entry) in &mut state.objects {
            for (index, slot) in entry.slots.iter_mut().enumerate() {
                if let Run::Active(active) = &slot.run {
                    active.shared.stop(StopReason::ABANDONED);
                    slot.run = Run::Idle;
                    left.push((Arc::clone(uid), entry.reference.clone(), index));
                }
            }
        }
        for (uid, object, index) in left {
            let spec = self.handlers[index].spec();
            tracing::warn!(%object, handler = spec.id, "{} did not exit before the shutdown deadline; abandoning it", spec.kind.as_str());
            state.record_exit(object, spec.id, spec.kind, Exit::Abandoned);
            self.active.send_modify(|n| *n = n.saturating_sub(1));
            self.reconcile(&mut state, &uid);
        }
        let mut report = match std::mem::replace(&mut state.shutdown, ShutdownPhase::NotStarted) {
            ShutdownPhase::Running(report) | ShutdownPhase::Done(report) => report,
            ShutdownPhase::NotStarted => ShutdownReport::default(),
        };
        for list in [
            &mut report.exited,
            &mut report.cancelled,
            &mut report.abandoned,
        ] {
            list.sort();
        }
        state.shutdown = ShutdownPhase::Done(report.clone());
        report
    }
}
