//! Operator exit: stop every instance, wait for their stop ladders up to a deadline, abandon
//! the rest, and report (see `Supervisor::shutdown`).
//!
//! Tens of thousands of instances exit within milliseconds of each other here, so the exit path
//! avoids what is cheap once but costly in a crowd: the instances are asked to stop outside the
//! supervisor's lock (those that wake up report at once), their ends are applied in batches
//! under one lock each (`exited_while_exiting`), and the shutdown is woken once, when the last
//! one has ended (`count_ended`).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::time::Instant;

use super::run::report::{ShutdownCounts, ShutdownPhase, ShutdownReport};
use super::run::state::{Ended, Exit, InstanceShared, Run, State, SupervisorCore};
use crate::core::stop::StopReason;
use crate::core::sync::lock;

/// What a shutdown request found.
enum Begin {
    First,
    Again,
    Finished,
}

impl SupervisorCore {
    /// Stops everything and waits (see `Supervisor::shutdown`); the report is kept in the
    /// state, unsorted ([`SupervisorCore::report`], [`SupervisorCore::report_counts`]).
    pub(crate) async fn shut_down(self: &Arc<Self>) {
        match self.begin_shutdown() {
            Begin::Finished => return,
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
        self.finish_shutdown();
    }

    /// A copy of the shutdown's report, sorted (empty before a shutdown).
    pub(crate) fn report(&self) -> ShutdownReport {
        let mut report = match &self.lock().shutdown {
            ShutdownPhase::Running(report) | ShutdownPhase::Done(report) => report.clone(),
            ShutdownPhase::NotStarted => ShutdownReport::default(),
        };
        for list in [
            &mut report.exited,
            &mut report.cancelled,
            &mut report.abandoned,
        ] {
            // Equal entries are identical: an unstable sort gives the same order, sooner.
            list.sort_unstable();
        }
        report
    }

    /// How many instances the shutdown's report lists as exited, cancelled and abandoned:
    /// what the operator logs, without copying (or sorting) tens of thousands of entries.
    pub(crate) fn report_counts(&self) -> ShutdownCounts {
        match &self.lock().shutdown {
            ShutdownPhase::Running(report) | ShutdownPhase::Done(report) => ShutdownCounts {
                exited: report.exited.len(),
                cancelled: report.cancelled.len(),
                abandoned: report.abandoned.len(),
            },
            ShutdownPhase::NotStarted => ShutdownCounts::default(),
        }
    }

    fn begin_shutdown(&self) -> Begin {
        let mut state = self.lock();
        match &state.shutdown {
            ShutdownPhase::Done(_) => return Begin::Finished,
            ShutdownPhase::Running(_) => return Begin::Again,
            ShutdownPhase::NotStarted => {}
        }
        // Under the lock: an instance that ends from now on is queued (see `instance_exited`).
        self.exiting.store(true, Ordering::Release);
        tracing::info!("the operator is exiting: stopping all daemons and timers");
        Self::stop_change_tasks(&state, StopReason::OPERATOR_EXITING);
        let instances: Vec<Arc<InstanceShared>> = (state.objects.values())
            .flat_map(|entry| &entry.slots)
            .filter_map(|slot| match &slot.run {
                Run::Active(active) => Some(Arc::clone(&active.shared)),
                Run::Idle | Run::Lingering(_) | Run::Done => None,
            })
            .collect();
        // Made room for at once: growing them end by end copies them over and over.
        let mut report = ShutdownReport::default();
        report.exited.reserve(instances.len());
        state.shutdown = ShutdownPhase::Running(report);
        {
            let mut queue = lock(&self.ended);
            queue.ends.reserve(instances.len());
            queue.spare.reserve(instances.len());
        }
        // Asked outside the lock: nothing starts any more, and the instances that wake up
        // meanwhile report their ends without waiting for the last one to be asked.
        drop(state);
        for instance in instances {
            instance.stop(StopReason::OPERATOR_EXITING);
        }
        Begin::First
    }

    /// `n` more instances (or change tasks) are active. Nobody is woken: only the shutdown
    /// waits on the count, and only for zero.
    pub(crate) fn count_started(&self, n: usize) {
        self.active.send_if_modified(|active| {
            *active += n;
            false
        });
    }

    /// `n` instances (or change tasks) have ended; wakes the shutdown when none is left (only
    /// then: a wake-up per end would cost a thread wake-up each, tens of thousands at exit).
    pub(crate) fn count_ended(&self, n: usize) {
        self.active.send_if_modified(|active| {
            *active = active.saturating_sub(n);
            *active == 0
        });
    }

    /// An instance ended during the shutdown: its end is queued, and one reporter at a time
    /// (the first to find nobody draining) takes the lock and applies the queue until it is
    /// empty, also what others queued meanwhile. The others return at once: one thread waits
    /// for the lock instead of every one, and the lock is taken once per batch. (The queue's
    /// own lock is held only for a push or a swap.)
    pub(crate) fn exited_while_exiting(self: &Arc<Self>, ended: Ended) {
        {
            let mut queue = lock(&self.ended);
            queue.ends.push(ended);
            if queue.draining {
                return;
            }
            queue.draining = true;
        }
        // Swapped with the queue's: the two vectors keep their capacity from batch to batch.
        let mut batch = Vec::new();
        loop {
            // Taken per batch: whoever else needs the state (an output to send) gets a turn.
            let mut state = self.lock();
            {
                let mut queue = lock(&self.ended);
                if queue.ends.is_empty() {
                    queue.draining = false;
                    if batch.capacity() > queue.spare.capacity() {
                        queue.spare = batch;
                    }
                    return;
                }
                if batch.capacity() == 0 {
                    batch = std::mem::take(&mut queue.spare);
                }
                std::mem::swap(&mut queue.ends, &mut batch);
            }
            for ended in &batch {
                self.apply_exit(
                    &mut state,
                    &ended.uid,
                    ended.index,
                    &ended.instance,
                    ended.exit,
                );
            }
            drop(state);
            batch.clear(); // the last references to the instances, if any: freed outside the lock
        }
    }

    /// Applies the ends queued and not yet applied (under the lock), and frees the queue's
    /// vectors (nothing is queued in bulk after this).
    fn apply_ended(self: &Arc<Self>, state: &mut State) {
        let batch = {
            let mut queue = lock(&self.ended);
            queue.spare = Vec::new();
            std::mem::take(&mut queue.ends)
        };
        for ended in &batch {
            self.apply_exit(state, &ended.uid, ended.index, &ended.instance, ended.exit);
        }
    }

    /// Abandons what is left and completes the report (idempotent).
    fn finish_shutdown(self: &Arc<Self>) {
        let mut state = self.lock();
        if let ShutdownPhase::Done(_) = &state.shutdown {
            return;
        }
        // Those that ended but whose reporter has not taken the lock yet ended, not abandoned.
        self.apply_ended(&mut state);
        let mut left = Vec::new();
        for (uid, entry) in &mut state.objects {
            for (index, slot) in entry.slots.iter_mut().enumerate() {
                if let Run::Active(active) = &slot.run {
                    active.shared.stop(StopReason::ABANDONED);
                    self.count_stop(index, &active.shared, Exit::Abandoned);
                    slot.run = Run::Idle;
                    left.push((Arc::clone(uid), entry.object.reference.clone(), index));
                }
            }
        }
        for (uid, object, index) in left {
            let spec = self.handlers[index].spec();
            tracing::warn!(%object, handler = spec.id, "{} did not exit before the shutdown deadline; abandoning it", spec.kind.as_str());
            state.record_exit(object, spec.id, spec.kind, Exit::Abandoned);
            self.count_ended(1);
            self.reconcile(&mut state, &uid);
        }
        self.abandon_change_tasks(&mut state);
        let report = match std::mem::replace(&mut state.shutdown, ShutdownPhase::NotStarted) {
            ShutdownPhase::Running(report) | ShutdownPhase::Done(report) => report,
            ShutdownPhase::NotStarted => ShutdownReport::default(),
        };
        state.shutdown = ShutdownPhase::Done(report);
    }
}
