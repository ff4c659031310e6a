//! Table tests of the reconcile rules (each row: at t ms, an input, the state and the step
//! after it), and a property test over random inputs: never two runs at once, and every
//! trigger followed by a run that starts at or after it.

use std::time::Duration;

use proptest::prelude::*;
use tokio::time::Instant;

use super::*;

const MS: fn(u64) -> Duration = Duration::from_millis;
const S: fn(u64) -> Duration = Duration::from_secs;

fn rules(debounce: Option<u64>) -> Rules {
    Rules {
        backoff: Backoff {
            initial: S(1),
            max: S(8),
        },
        debounce: debounce.map(MS),
    }
}

use Ended::{Failed, Permanent, Success};
use Input::{Deadline, Trigger};
use State::{Debouncing, Running, Waiting};
use Step::{Run, Wait};

/// Feeds `script` (at t ms: input) to a started machine; every row's state and step.
fn play(rules: &Rules, t0: Instant, script: &[(u64, Input)]) -> Vec<(u64, State, Step)> {
    let (mut m, first) = Machine::start();
    assert_eq!(first, Run);
    script
        .iter()
        .map(|&(t, input)| {
            let step = m.step(input, t0 + MS(t), rules, 0.0);
            (t, m.state, step)
        })
        .collect()
}

fn end(e: Ended) -> Input {
    Input::Ended(e)
}

#[test]
fn a_run_then_a_requeue_then_a_wait_for_a_change() {
    let t0 = Instant::now();
    let at = |ms| Some(t0 + MS(ms));
    let steps = play(
        &rules(None),
        t0,
        &[
            (
                500,
                end(Success {
                    requeue: Some(S(10)),
                }),
            ),
            (5_000, Deadline), // early: nothing
            (10_500, Deadline),
            (10_700, end(Success { requeue: None })),
            (99_000, Deadline), // no deadline at all
            (99_100, Trigger),
        ],
    );
    assert_eq!(
        steps,
        vec![
            (500, Waiting { due: at(10_500) }, Wait),
            (5_000, Waiting { due: at(10_500) }, Wait),
            (10_500, Running { again: None }, Run),
            (10_700, Waiting { due: None }, Wait),
            (99_000, Waiting { due: None }, Wait),
            (99_100, Running { again: None }, Run),
        ]
    );
}

#[test]
fn triggers_during_a_run_give_exactly_one_more_run() {
    let t0 = Instant::now();
    let steps = play(
        &rules(None),
        t0,
        &[
            (100, Trigger),
            (200, Trigger),
            (300, Trigger),
            (400, end(Success { requeue: None })),
            (900, end(Success { requeue: None })),
        ],
    );
    assert_eq!(
        steps,
        vec![
            (
                100,
                Running {
                    again: Some(t0 + MS(100))
                },
                Wait
            ),
            (
                200,
                Running {
                    again: Some(t0 + MS(200))
                },
                Wait
            ),
            (
                300,
                Running {
                    again: Some(t0 + MS(300))
                },
                Wait
            ),
            (400, Running { again: None }, Run),
            (900, Waiting { due: None }, Wait),
        ]
    );
}

#[test]
fn debounce_waits_for_quiet_after_the_last_trigger() {
    let t0 = Instant::now();
    let at = |ms| t0 + MS(ms);
    let steps = play(
        &rules(Some(500)),
        t0,
        &[
            (100, end(Success { requeue: None })),
            (1_000, Trigger),
            (1_300, Trigger),
            (1_500, Deadline), // the first trigger's end of quiet: moved
            (1_800, Deadline),
            (1_900, Trigger), // during the run
            (2_100, end(Success { requeue: None })),
            (2_400, Deadline),
            (2_450, end(Success { requeue: None })),
            (3_000, Trigger),
            (3_100, end(Success { requeue: None })), // not running: ignored
        ],
    );
    assert_eq!(
        steps,
        vec![
            (100, Waiting { due: None }, Wait),
            (1_000, Debouncing { until: at(1_500) }, Wait),
            (1_300, Debouncing { until: at(1_800) }, Wait),
            (1_500, Debouncing { until: at(1_800) }, Wait),
            (1_800, Running { again: None }, Run),
            (
                1_900,
                Running {
                    again: Some(at(1_900))
                },
                Wait
            ),
            (2_100, Debouncing { until: at(2_400) }, Wait),
            (2_400, Running { again: None }, Run),
            (2_450, Waiting { due: None }, Wait),
            (3_000, Debouncing { until: at(3_500) }, Wait),
            (3_100, Debouncing { until: at(3_500) }, Wait),
        ]
    );
    // A trigger during a run whose quiet period is over when the run ends: at once.
    let steps = play(
        &rules(Some(500)),
        t0,
        &[(100, Trigger), (900, end(Success { requeue: None }))],
    );
    assert_eq!(steps[1], (900, Running { again: None }, Run));
}

#[test]
fn failures_back_off_doubling_to_the_cap_and_a_success_resets() {
    let t0 = Instant::now();
    let r = rules(None);
    let (mut m, _) = Machine::start();
    let mut now = t0;
    let mut delays = Vec::new();
    for _ in 0..6 {
        m.step(end(Failed { delay: None }), now, &r, 0.0);
        let due = m.deadline().unwrap();
        delays.push((due - now).as_secs());
        now = due;
        assert_eq!(m.step(Deadline, now, &r, 0.0), Run);
    }
    assert_eq!(delays, vec![1, 2, 4, 8, 8, 8]);
    assert_eq!(m.failures, 6);
    m.step(end(Success { requeue: None }), now, &r, 0.0);
    assert_eq!(m.failures, 0);
    m.step(Trigger, now, &r, 0.0);
    m.step(end(Failed { delay: None }), now, &r, 0.0);
    assert_eq!(m.deadline(), Some(now + S(1)), "back to the first delay");
}

#[test]
fn an_errors_own_delay_wins_and_a_permanent_failure_waits_for_a_trigger() {
    let t0 = Instant::now();
    let steps = play(
        &rules(None),
        t0,
        &[
            (0, end(Failed { delay: Some(S(30)) })),
            (30_000, Deadline),
            (30_000, end(Failed { delay: Some(MS(1)) })), // clamped
            (30_100, Deadline),
            (30_100, end(Permanent)),
            (90_000, Deadline),
            (90_000, Trigger),
        ],
    );
    let at = |ms| Some(t0 + MS(ms));
    assert_eq!(
        steps,
        vec![
            (0, Waiting { due: at(30_000) }, Wait),
            (30_000, Running { again: None }, Run),
            (30_000, Waiting { due: at(30_100) }, Wait),
            (30_100, Running { again: None }, Run),
            (30_100, Waiting { due: None }, Wait),
            (90_000, Waiting { due: None }, Wait),
            (90_000, Running { again: None }, Run),
        ]
    );
}

#[test]
fn a_trigger_cuts_a_requeue_or_backoff_short_and_keeps_the_failure_count() {
    let t0 = Instant::now();
    let r = rules(None);
    let (mut m, _) = Machine::start();
    m.step(end(Failed { delay: None }), t0, &r, 0.0);
    assert_eq!(m.step(Trigger, t0 + MS(10), &r, 0.0), Run);
    m.step(end(Failed { delay: None }), t0 + MS(20), &r, 0.0);
    assert_eq!(
        m.deadline(),
        Some(t0 + MS(20) + S(2)),
        "the second failure in a row"
    );
    assert_eq!(m.failures, 2);
    m.step(Trigger, t0 + MS(30), &r, 0.0);
    m.step(
        end(Success {
            requeue: Some(Duration::ZERO),
        }),
        t0 + MS(40),
        &r,
        0.0,
    );
    assert_eq!(
        m.deadline(),
        Some(t0 + MS(40) + MIN_DELAY),
        "a zero requeue is clamped"
    );
    assert!(!matches!(m.state, Running { .. }));
    assert_eq!(m.step(Trigger, t0 + MS(50), &r, 0.0), Run);
    assert!(matches!(m.state, Running { .. }) && m.deadline().is_none());
}

/// One random input of the property test.
#[derive(Debug, Clone, Copy)]
enum Op {
    Trigger,
    Advance(u64),
    End(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Trigger),
        3 => (1..3_000_u64).prop_map(Op::Advance),
        2 => (0..4_u8).prop_map(Op::End),
    ]
}

fn ended(kind: u8) -> Ended {
    match kind {
        0 => Success { requeue: None },
        1 => Success {
            requeue: Some(MS(700)),
        },
        2 => Failed { delay: None },
        _ => Permanent,
    }
}

/// A driver like the supervisor's: deadlines fed as time passes, runs started when told.
struct Sim {
    m: Machine,
    rules: Rules,
    now: Instant,
    running: bool,
    starts: Vec<Instant>,
    triggers: Vec<Instant>,
}

impl Sim {
    fn apply(&mut self, input: Input) {
        if self.m.step(input, self.now, &self.rules, 0.5) == Run {
            assert!(!self.running, "a second run while one is in progress");
            self.running = true;
            self.starts.push(self.now);
        }
    }

    fn advance(&mut self, ms: u64) {
        let until = self.now + MS(ms);
        while let Some(at) = self.m.deadline().filter(|&at| at <= until) {
            self.now = self.now.max(at);
            self.apply(Deadline);
        }
        self.now = until;
    }

    fn op(&mut self, op: Op) {
        match op {
            Op::Trigger => {
                self.triggers.push(self.now);
                self.apply(Trigger);
            }
            Op::Advance(ms) => self.advance(ms),
            Op::End(kind) if self.running => {
                self.running = false;
                self.apply(Input::Ended(ended(kind)));
            }
            Op::End(_) => {}
        }
    }
}

proptest! {
    #[test]
    fn never_two_runs_and_every_trigger_is_followed_by_a_run(
        ops in proptest::collection::vec(op(), 0..80),
        debounce in proptest::option::of(1..2_000_u64),
    ) {
        let (m, first) = Machine::start();
        prop_assert_eq!(first, Run);
        let now = Instant::now();
        let mut sim = Sim { m, rules: rules(debounce), now, running: true,
                            starts: vec![now], triggers: Vec::new() };
        for op in ops {
            sim.op(op);
        }
        // Let everything settle: every run ends in success, time passes.
        for _ in 0..4 {
            if sim.running {
                sim.running = false;
                sim.apply(Input::Ended(Success { requeue: None }));
            }
            sim.advance(10_000);
        }
        prop_assert!(!sim.running);
        for t in &sim.triggers {
            prop_assert!(sim.starts.iter().any(|s| s >= t), "a trigger at {:?} had no run after it", *t - now);
        }
    }
}
