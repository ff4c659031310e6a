//! The change handlers' state machine: which change an observed version calls for
//! ([`detect`]), and how one change takes its handlers through it ([`ChangeRun`]). Pure: times
//! are passed in, writes are returned.
//!
//! **Cause** of an observed version; the first rule that applies wins:
//!
//! | # | condition | result |
//! |---|---|---|
//! | 1 | deleting, our finalizer on | the stored delete: `Continue(Delete)`, or `Nothing` once finished; else `Start(Delete)` if a delete handler matches, else `Nothing` |
//! | 2 | deleting, our finalizer not on | `Nothing` (optional delete handlers never block deletion) |
//! | g | a finalizer-holding handler matches, the finalizer is not on yet | `Nothing` (wait for it) |
//! | 3 | a create, update or resume progress exists | `Continue(its cause)` |
//! | 4 | no base, and create or update handlers exist | `Start(Create)` |
//! | 5 | first sight in this process, and resume handlers exist | `Start(Resume)` |
//! | 6 | an update handler is selected by the delta from the base | `Start(Update)` |
//! | 7 | anything else | `Nothing` |
//!
//! An update selects the `field`-less handlers when the essence's digest differs, and each
//! `field=` one whose field differs. The caller clears first sight when a create or resume
//! starts.
//!
//! **Per handler**, strictly in the defined order (a waiting handler blocks the later ones):
//!
//! ```text
//!   Pending ──turn, no match──────────────────────────────────> Skipped
//!      │ turn                                                      ^
//!      v             Ok / Ignored                                  │ turn, no match
//!   Running(n) ──────────────────────────> Done                    │
//!    │  │ │  Permanent / Exhausted                                 │
//!    │  │ └───────────────────────────────> Failed                 │
//!    │  └── Retry{delay} ──> Waiting(n+1, at) ─────────────────────┘
//!    │  stop                     │ turn, at ≤ now: Running(n+1)
//!    └──> the record as it was   │ turn, at > now: Wait{at}; stop: unchanged
//! ```
//!
//! | state | event | next state | write |
//! |---|---|---|---|
//! | Pending / Waiting | its turn, filters don't match the latest version | Skipped | folded into the next write |
//! | Pending / Waiting(n, at ≤ now) | its turn | Running(n) | none |
//! | Waiting(n, at > now) | its turn | unchanged (`Step::Wait`) | none |
//! | Running(n) | `Succeeded` | Done | 1: progress, or base and removal if last |
//! | Running(n) | `Retry{delay}` | Waiting(n+1, now+delay) | 1: progress |
//! | Running(n) | `Failed` (permanent, exhausted) | Failed; the change goes on | 1 |
//! | Running(n) | `Ignored` | Done | 1 |
//! | Running | stop (pause, exit, handover, gone) | its last record | none |
//! | Waiting | stop | unchanged (`at` is persisted) | none |
//! | Done / Failed / Skipped | — | terminal | — |
//!
//! [`ChangeRun::next`] makes the rows "its turn", [`Record::after`] the rows "Running", and
//! [`ChangeWrite::step`] the writes. Once every handler is terminal, a create or update writes
//! its target as the new base and removes the progress; a delete keeps its final progress; a
//! resume writes nothing of its own (its progress is never persisted).
//!
//! **Finalizer**: held while a required delete handler matches a live version, or a delete
//! change is due or unfinished ([`ChangeRun::holds_finalizer`]), or the task runs and held it.

use jiff::Timestamp;

use super::base::DiffBase;
use super::field::Observed;
use super::progress::{Progress, Record, State, merge};
use super::write::ChangeWrite;
use super::{ChangeHandler, ChangeHandlers, ChangeKind, Outcome};

/// What [`detect`] knows of one observed version and of the object's stored state.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Inputs<'a> {
    /// The kind's change handlers.
    pub(crate) handlers: &'a ChangeHandlers,
    /// The version's digest and watched fields.
    pub(crate) observed: &'a Observed<'a>,
    /// The diff base (decoded, or as last written).
    pub(crate) base: Option<&'a DiffBase>,
    /// The change in flight (in memory, or loaded at first sight or after a reload).
    pub(crate) progress: Option<&'a Progress>,
    /// The version has a `deletionTimestamp`.
    pub(crate) deleting: bool,
    /// Our finalizer is on the object.
    pub(crate) finalizer_on: bool,
    /// A handler that holds the finalizer (a daemon, a required delete) matches.
    pub(crate) finalizer_needed: bool,
    /// A delete handler matches this (deleting) version.
    pub(crate) delete_matches: bool,
    /// The first version this process sees of the object (start-up, handover, scope gain).
    pub(crate) first_sight: bool,
}

/// What an observed version calls for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Detected {
    /// No change.
    Nothing,
    /// Go on with the stored change ([`ChangeRun::resume`]).
    Continue(ChangeKind),
    /// Start a change of this cause ([`ChangeRun::start`]); a delete supersedes any other.
    Start(ChangeKind),
}

/// The cause table (see the module docs). While deleting, a create, update or resume in flight
/// is superseded whatever the result: the caller stops it.
#[must_use]
pub(crate) fn detect(i: &Inputs<'_>) -> Detected {
    use ChangeKind::{Create, Delete, Resume, Update};
    if i.deleting {
        return match i.progress.filter(|p| p.cause == Delete) {
            _ if !i.finalizer_on => Detected::Nothing,
            Some(p) if p.is_finished() => Detected::Nothing,
            Some(_) => Detected::Continue(Delete),
            None if i.delete_matches => Detected::Start(Delete),
            None => Detected::Nothing,
        };
    }
    if i.finalizer_needed && !i.finalizer_on {
        return Detected::Nothing;
    }
    if let Some(p) = i.progress.filter(|p| p.cause != Delete) {
        return Detected::Continue(p.cause);
    }
    let h = i.handlers;
    if i.base.is_none() && h.needs_base() {
        return Detected::Start(Create);
    }
    if i.first_sight && h.has(Resume) {
        return Detected::Start(Resume);
    }
    let delta = i.base.map(|base| base.delta(i.observed));
    if delta.is_some_and(|delta| h.of(Update).any(|h| delta.selects(h))) {
        return Detected::Start(Update);
    }
    Detected::Nothing
}

/// What the driver does next.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Step {
    /// Invoke the handler `index`, then report with [`ChangeRun::complete`].
    Run {
        /// The supervisor's index of the handler.
        index: usize,
        /// The attempts made before this one (the `retry` of the failure policy).
        retries: u32,
        /// When its first attempt began (`retry_timeout` counts from it).
        started: Timestamp,
    },
    /// Wait until `at` (or a new version, or a stop), then ask again.
    Wait {
        /// The supervisor's index of the waiting handler.
        index: usize,
        /// Its next attempt.
        at: Timestamp,
    },
    /// The handler `index` is running: wait for its completion.
    Running {
        /// The supervisor's index of the running handler.
        index: usize,
    },
    /// The change is over; persist the write if any.
    Finished(Option<ChangeWrite>),
}

/// One change of one object, pinned to its target, taking its handlers in order.
#[derive(Debug, Clone)]
pub(crate) struct ChangeRun {
    /// The records, as persisted or about to be.
    progress: Progress,
    /// The selected handlers, in the defined order.
    members: Vec<ChangeHandler>,
    /// The position in `members` of the running handler.
    running: Option<usize>,
    /// Records changed without a write yet (skips).
    unsaved: bool,
    /// Every handler is terminal and the last write was handed out.
    finished: bool,
}

impl ChangeRun {
    /// A new change of `kind` from `base` to the `observed` version (its pinned target). An
    /// update runs the handlers its delta selects; the other kinds run all of theirs.
    #[must_use]
    pub(crate) fn start(
        kind: ChangeKind,
        handlers: &ChangeHandlers,
        base: Option<&DiffBase>,
        observed: &Observed<'_>,
        now: Timestamp,
    ) -> Self {
        let delta = base
            .filter(|_| kind == ChangeKind::Update)
            .map(|b| b.delta(observed));
        let members: Vec<ChangeHandler> = handlers
            .of(kind)
            .filter(|h| delta.as_ref().is_none_or(|delta| delta.selects(h)))
            .copied()
            .collect();
        let records = members.iter().map(|h| (h.id.to_owned(), Record::PENDING));
        let progress = Progress {
            cause: kind,
            target: DiffBase::capture(observed),
            started: now,
            handlers: records.collect(),
        };
        Self::with(progress, members)
    }

    /// Goes on with a stored change: its handlers still known, in the defined order (the
    /// records of unknown ones are dropped).
    #[must_use]
    pub(crate) fn resume(mut progress: Progress, handlers: &ChangeHandlers) -> Self {
        let known = handlers.of(progress.cause);
        let members: Vec<ChangeHandler> = known
            .filter(|h| progress.handlers.contains_key(h.id))
            .copied()
            .collect();
        progress
            .handlers
            .retain(|id, _| members.iter().any(|h| h.id == id));
        Self::with(progress, members)
    }

    /// A run of `members` with these records, before its first step.
    fn with(progress: Progress, members: Vec<ChangeHandler>) -> Self {
        let (running, unsaved, finished) = (None, false, false);
        Self {
            progress,
            members,
            running,
            unsaved,
            finished,
        }
    }

    /// The records and the cause (in memory: authoritative).
    #[must_use]
    pub(crate) fn progress(&self) -> &Progress {
        &self.progress
    }

    /// The supervisor's index of the running handler.
    #[must_use]
    pub(crate) fn running(&self) -> Option<usize> {
        self.running
            .and_then(|pos| self.members.get(pos))
            .map(|h| h.index)
    }

    /// Whether the change is over.
    #[must_use]
    pub(crate) fn is_finished(&self) -> bool {
        self.finished
    }

    /// Whether this change keeps the finalizer on: a delete not finished yet (all its
    /// handlers, optional ones too, finish before the finalizer goes).
    #[must_use]
    pub(crate) fn holds_finalizer(&self) -> bool {
        self.progress.cause == ChangeKind::Delete && !self.finished
    }

    /// The next step at `now`; `matched(index)`: whether the handler's filters match the
    /// latest version.
    pub(crate) fn next(&mut self, now: Timestamp, matched: &dyn Fn(usize) -> bool) -> Step {
        if let Some(index) = self.running() {
            return Step::Running { index };
        }
        if self.finished {
            return Step::Finished(None);
        }
        for (pos, h) in self.members.iter().enumerate() {
            let Some(record) = self.progress.handlers.get_mut(h.id) else {
                continue;
            };
            if record.state.is_terminal() {
                continue;
            }
            if !matched(h.index) {
                *record = record.skipped();
                self.unsaved = true;
                continue;
            }
            let index = h.index;
            if let State::Waiting { at } = record.state
                && at > now
            {
                return Step::Wait { index, at };
            }
            let (started, retries) = (*record.started.get_or_insert(now), record.retries);
            self.running = Some(pos);
            return Step::Run {
                index,
                retries,
                started,
            };
        }
        self.finished = true;
        let write = match self.progress.cause {
            ChangeKind::Create | ChangeKind::Update => true,
            ChangeKind::Delete => self.unsaved,
            ChangeKind::Resume => false,
        };
        self.unsaved = false;
        Step::Finished(write.then(|| ChangeWrite::step(&self.progress, true)))
    }

    /// Records how the running handler `index` ended at `now`, and returns the one write of
    /// that transition (`None`: `index` is not running; nothing changes).
    pub(crate) fn complete(
        &mut self,
        index: usize,
        outcome: Outcome<'_>,
        now: Timestamp,
    ) -> Option<ChangeWrite> {
        if self.running() != Some(index) {
            return None;
        }
        let member = self.running.and_then(|pos| self.members.get(pos))?;
        let record = self.progress.handlers.get_mut(member.id)?;
        *record = record.after(outcome, now);
        self.running = None;
        self.unsaved = false;
        self.finished = self.progress.is_finished();
        Some(ChangeWrite::step(&self.progress, self.finished))
    }

    /// The running handler was stopped (pause, exit, handover, the object gone): its record
    /// stays as it was, to be run again by whoever goes on with the change.
    pub(crate) fn stop(&mut self) {
        self.running = None;
    }

    /// Takes in the stored progress re-read after a write conflict. `false`: the stored one is
    /// another change that wins the merge; drop this run and decide again.
    pub(crate) fn absorb(&mut self, stored: &Progress) -> bool {
        let mut merged = merge(&self.progress, stored);
        if !merged.same_change(&self.progress) {
            return false;
        }
        let members = &self.members;
        merged
            .handlers
            .retain(|id, _| members.iter().any(|h| h.id == id));
        self.unsaved |= merged != *stored;
        self.progress = merged;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{SIZE, base_of, body, handler, seen, set, t};
    use super::*;
    use ChangeKind::{Create, Delete, Resume, Update};

    fn progress(cause: ChangeKind, state: State) -> Progress {
        let (set, body) = (set(), body("x", 1));
        let mut run = ChangeRun::start(cause, &set, None, &seen(&set, &body), t(0));
        run.progress
            .handlers
            .values_mut()
            .for_each(|r| r.state = state);
        run.progress
    }

    #[test]
    fn the_cause_table_row_by_row() {
        use Detected::{Continue, Nothing, Start};
        let (set, now) = (set(), body("x", 1));
        let observed = seen(&set, &now);
        let same = base_of(&set, &now);
        let labels = base_of(&set, &body("y", 1));
        let sized = base_of(&set, &body("x", 2));
        let update = progress(Update, State::Pending);
        let delete = progress(Delete, State::Pending);
        let deleted = progress(Delete, State::Done);
        #[rustfmt::skip]
        let rows = [
            // D: deleting, F: finalizer on, N: finalizer needed, M: a delete matches, S: first sight
            ("1 start", "DFM", Some(&same), None, Start(Delete)),
            ("1 supersede", "DFM", Some(&same), Some(&update), Start(Delete)),
            ("1 continue", "DF", Some(&same), Some(&delete), Continue(Delete)),
            ("1 finished", "DFM", Some(&same), Some(&deleted), Nothing),
            ("1 no match", "DFS", Some(&same), None, Nothing),
            ("2", "DNM", Some(&same), Some(&delete), Nothing),
            ("g", "N", None, None, Nothing),
            ("3", "FNS", None, Some(&update), Continue(Update)),
            ("3 no delete", "", Some(&same), Some(&delete), Nothing),
            ("4", "S", None, None, Start(Create)),
            ("5", "S", Some(&sized), None, Start(Resume)),
            ("6 essence", "", Some(&labels), None, Start(Update)),
            ("6 field", "", Some(&sized), None, Start(Update)),
            ("7", "", Some(&same), None, Nothing),
        ];
        let run = |set: &ChangeHandlers, flags: &str, base, progress| {
            let on = |c| flags.contains(c);
            detect(&Inputs {
                handlers: set,
                observed: &observed,
                base,
                progress,
                deleting: on('D'),
                finalizer_on: on('F'),
                finalizer_needed: on('N'),
                delete_matches: on('M'),
                first_sight: on('S'),
            })
        };
        for (row, flags, base, stored, want) in rows {
            assert_eq!(run(&set, flags, base, stored), want, "row {row}");
        }
        // 6 with only `field=` updates: label churn is no change. 4 needs create or update.
        let mut f = handler(0, "f", Update);
        f.watch = Some(SIZE);
        let fields = ChangeHandlers::new(vec![f, handler(1, "r", Resume)]).unwrap();
        assert_eq!(run(&fields, "", Some(&labels), None), Nothing);
        assert_eq!(run(&fields, "", Some(&sized), None), Start(Update));
        let resume = ChangeHandlers::new(vec![handler(0, "r", Resume)]).unwrap();
        assert_eq!(run(&resume, "", None, None), Nothing);
        assert_eq!(run(&resume, "S", None, None), Start(Resume));
    }

    /// The events on the first of two create handlers (`a`, then `b`).
    #[derive(Debug, Clone, Copy)]
    enum Ev {
        Turn(bool),
        Ok,
        Stop,
    }

    /// Plays `events` on `a` (from `from`, at t(10)): the step of a last `Turn`, the writes, and
    /// `a`'s record.
    fn play(from: &Record, events: &[Ev]) -> (Option<Step>, usize, Record) {
        let set = set();
        let mut run = ChangeRun::start(Create, &set, None, &seen(&set, &body("x", 1)), t(0));
        run.progress.handlers.insert("a".to_owned(), from.clone());
        let (mut step, mut writes) = (None, 0);
        for event in events {
            step = match *event {
                Ev::Turn(matched) => Some(run.next(t(10), &|i| matched || i != 0)),
                Ev::Ok => {
                    let write = run.complete(0, Outcome::Succeeded, t(10));
                    writes += usize::from(write.is_some());
                    None
                }
                Ev::Stop => {
                    run.stop();
                    None
                }
            };
        }
        (step, writes, run.progress.handlers["a"].clone())
    }

    /// A row: its name, the record before, the events, the last step, the writes, the record.
    type Row<'a> = (&'a str, &'a Record, &'a [Ev], Option<Step>, usize, Record);

    /// The rows "its turn", "stop" and "terminal" of the transition table (the rows
    /// "Running | outcome" are `Record::after`'s, in `progress`).
    #[test]
    fn the_transition_table_row_by_row() {
        use Ev::{Ok, Stop, Turn};
        let rec = |state, retries, started: Option<i64>| Record {
            state,
            retries,
            started: started.map(t),
            message: None,
        };
        let pending = Record::PENDING;
        let due = rec(State::Waiting { at: t(10) }, 1, Some(2));
        let later = rec(State::Waiting { at: t(11) }, 1, Some(2));
        let run = |index, retries, started| Step::Run {
            index,
            retries,
            started: t(started),
        };
        let wait = Some(Step::Wait {
            index: 0,
            at: t(11),
        });
        let (done, failed) = (rec(State::Done, 1, None), rec(State::Failed, 1, None));
        let skipped = rec(State::Skipped, 0, None);
        #[rustfmt::skip]
        let rows: [Row<'_>; 12] = [
            ("pending, no match", &pending, &[Turn(false)], Some(run(1, 0, 10)), 0, skipped.clone()),
            ("waiting, no match", &later, &[Turn(false)], Some(run(1, 0, 10)), 0, rec(State::Skipped, 1, None)),
            ("pending, its turn", &pending, &[Turn(true)], Some(run(0, 0, 10)), 0, rec(State::Pending, 0, Some(10))),
            ("waiting, due", &due, &[Turn(true)], Some(run(0, 1, 2)), 0, due.clone()),
            // Strict order: b does not run while a waits.
            ("waiting, not due", &later, &[Turn(true)], wait.clone(), 0, later.clone()),
            ("running, asked again", &pending, &[Turn(true), Turn(true)], Some(Step::Running { index: 0 }), 0, rec(State::Pending, 0, Some(10))),
            ("running, ok: one write", &due, &[Turn(true), Ok], None, 1, rec(State::Done, 2, None)),
            ("running, stop", &due, &[Turn(true), Stop, Turn(true)], Some(run(0, 1, 2)), 0, due.clone()),
            ("waiting, stop", &later, &[Turn(true), Stop, Turn(true)], wait, 0, later.clone()),
            ("done", &done, &[Ok, Turn(false)], Some(run(1, 0, 10)), 0, done.clone()),
            ("failed", &failed, &[Turn(true)], Some(run(1, 0, 10)), 0, failed.clone()),
            ("skipped", &skipped, &[Turn(true)], Some(run(1, 0, 10)), 0, skipped.clone()),
        ];
        for (row, from, events, step, writes, record) in rows {
            assert_eq!(play(from, events), (step, writes, record), "row {row}");
        }
    }
}
