//! Reconcile handlers on the supervisor, through the public `engine` API, on paused time: the
//! first run when an object appears, requeues, coalesced triggers, the error backoff (×2 up to
//! the cap, reset by a success), what does and does not retrigger (the operator's own writes do
//! not; a spec edit does), deletion with a cleanup under the finalizer, pause and resume, and an
//! instance stopped by the ladder when its filters stop matching.

mod common;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Obj, ms, secs};
use kopf_runtime::engine::{
    Call, Effect, ErasedHandler, HandlerKind, HandlerSpec, Invocation, MatchError, ObjectState,
    Output, ReconcileOptions, Services, Supervisor, SupervisorConfig, Trigger,
};
use kopf_runtime::{Action, HandlerError, StopReason};
use serde_json::json;
use tokio::time::Instant;

/// What one run (or cleanup) of the test handler does.
#[derive(Debug, Clone, Copy)]
enum Out {
    Ok(Action),
    Fail,
    Permanent,
    /// Runs until stopped, then records the stop reason.
    UntilStopped,
}

/// A calls log: (ms since the start, what).
type Calls = Arc<Mutex<Vec<(u64, String)>>>;

/// A reconcile handler scripted run by run; every run and cleanup start is logged.
struct Rec {
    spec: &'static HandlerSpec,
    t0: Instant,
    calls: Calls,
    runs: Mutex<VecDeque<Out>>,
    cleanups: Mutex<VecDeque<Out>>,
    /// How long a run takes.
    takes: Duration,
}

fn since(t0: Instant) -> u64 {
    u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl Rec {
    fn call(&self, what: &str, script: &Mutex<VecDeque<Out>>, inv: &Invocation) -> Call {
        let out = script
            .lock()
            .expect("the script")
            .pop_front()
            .unwrap_or(Out::Ok(Action::await_change()));
        let (t0, calls, takes) = (self.t0, Arc::clone(&self.calls), self.takes);
        calls
            .lock()
            .expect("the log")
            .push((since(t0), what.to_owned()));
        let stopper = inv.stopper.clone();
        Call::Async(Box::pin(async move {
            tokio::time::sleep(takes).await;
            match out {
                Out::Ok(action) => Ok(Output {
                    result: action.to_result(),
                    patch: None,
                }),
                Out::Fail => Err(HandlerError::msg("boom")),
                Out::Permanent => Err(HandlerError::permanent("never")),
                Out::UntilStopped => {
                    stopper.stopped().await;
                    let note = format!("stopped: {}", stopper.reason());
                    calls.lock().expect("the log").push((since(t0), note));
                    Ok(Output::default())
                }
            }
        }))
    }
}

impl ErasedHandler for Rec {
    fn spec(&self) -> &'static HandlerSpec {
        self.spec
    }
    fn matches(&self, object: &ObjectState) -> Result<bool, MatchError> {
        Ok(object.label("skip").is_none())
    }
    fn invoke(&self, inv: Invocation) -> Result<Call, HandlerError> {
        Ok(self.call("run", &self.runs, &inv))
    }
    fn cleanup(&self, inv: Invocation) -> Result<Call, HandlerError> {
        Ok(self.call("cleanup", &self.cleanups, &inv))
    }
}

/// A supervisor with one scripted reconcile handler, and its effects as they arrive.
struct Test {
    sup: Supervisor,
    t0: Instant,
    calls: Calls,
    fx: Arc<Mutex<Vec<(u64, Effect)>>>,
}

fn spec(edit: impl FnOnce(&mut HandlerSpec)) -> &'static HandlerSpec {
    let mut spec = HandlerSpec::new("rec", HandlerKind::Reconcile);
    edit(&mut spec);
    Box::leak(Box::new(spec))
}

impl Test {
    fn new(spec: &'static HandlerSpec, runs: &[Out], cleanups: &[Out], takes: Duration) -> Self {
        let t0 = Instant::now();
        let calls = Calls::default();
        let handler = Rec {
            spec,
            t0,
            calls: Arc::clone(&calls),
            runs: Mutex::new(runs.iter().copied().collect()),
            cleanups: Mutex::new(cleanups.iter().copied().collect()),
            takes,
        };
        let config = SupervisorConfig {
            seed: Some(7),
            ..SupervisorConfig::default()
        };
        let (sup, mut rx) = Supervisor::new(vec![Arc::new(handler)], Services::default(), config);
        let fx: Arc<Mutex<Vec<(u64, Effect)>>> = Arc::default();
        let sink = Arc::clone(&fx);
        tokio::spawn(async move {
            while let Some(effect) = rx.recv().await {
                sink.lock().expect("the log").push((since(t0), effect));
            }
        });
        Self { sup, t0, calls, fx }
    }

    async fn at(&self, ms: u64) {
        tokio::time::sleep_until(self.t0 + Duration::from_millis(ms)).await;
    }

    fn calls(&self, what: &str) -> Vec<u64> {
        let calls = self.calls.lock().expect("the log");
        calls
            .iter()
            .filter(|(_, w)| w == what)
            .map(|(t, _)| *t)
            .collect()
    }

    fn notes(&self) -> Vec<(u64, String)> {
        self.calls.lock().expect("the log").clone()
    }

    fn finalizer(&self) -> Vec<(u64, bool)> {
        let fx = self.fx.lock().expect("the log");
        (fx.iter())
            .filter_map(|(t, e)| match e {
                Effect::Finalizer { hold, .. } => Some((*t, *hold)),
                _ => None,
            })
            .collect()
    }

    fn failures(&self) -> Vec<(u64, bool)> {
        let fx = self.fx.lock().expect("the log");
        (fx.iter())
            .filter_map(|(t, e)| match e {
                Effect::Failure { fatal, .. } => Some((*t, *fatal)),
                _ => None,
            })
            .collect()
    }

    fn outputs(&self) -> usize {
        let fx = self.fx.lock().expect("the log");
        fx.iter()
            .filter(|(_, e)| matches!(e, Effect::Output { .. }))
            .count()
    }
}

fn obj() -> Obj {
    Obj::new("u1").spec(json!({"size": 1}))
}

#[tokio::test(start_paused = true)]
async fn an_object_that_appears_is_reconciled_once_and_nothing_is_written_at_rest() {
    let t = Test::new(spec(|_| {}), &[], &[], Duration::ZERO);
    t.sup.observe(obj().build());
    t.sup.trigger("unknown", Trigger::Child); // a no-op
    t.at(60_000).await;
    assert_eq!(t.calls("run"), vec![0]);
    assert_eq!(t.outputs(), 0, "a run that changes nothing writes nothing");
    assert_eq!(t.finalizer(), vec![(0, false)], "no cleanup: no finalizer");
    assert_eq!(t.sup.uid_of(Some("ns"), "obj-u1").as_deref(), Some("u1"));
    assert_eq!(t.sup.uid_of(Some("other"), "obj-u1"), None);
    t.sup.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_requeue_runs_again_after_its_delay() {
    let requeue = Out::Ok(Action::requeue(secs(10)));
    let t = Test::new(spec(|_| {}), &[requeue, requeue], &[], ms(500));
    t.sup.observe(obj().build());
    t.at(60_000).await;
    // Each requeue counts from the end of its run; the third run waits for a change.
    assert_eq!(t.calls("run"), vec![0, 10_500, 21_000]);
    t.sup.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn triggers_during_a_run_give_exactly_one_more_run() {
    let t = Test::new(spec(|_| {}), &[], &[], secs(1));
    t.sup.observe(obj().build());
    for at in [100, 200, 300] {
        t.at(at).await;
        t.sup.trigger("u1", Trigger::Child);
    }
    t.at(30_000).await;
    assert_eq!(t.calls("run"), vec![0, 1_000]);
    // A trigger while waiting runs at once (positive control for the trigger path).
    t.sup.trigger("u1", Trigger::Related);
    t.at(31_000).await;
    assert_eq!(t.calls("run"), vec![0, 1_000, 30_000]);
    t.sup.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn debounce_waits_for_quiet_after_the_last_trigger() {
    let t = Test::new(
        spec(|s| s.reconcile.debounce = Some(ms(500))),
        &[],
        &[],
        Duration::ZERO,
    );
    t.sup.observe(obj().build());
    for at in [1_000, 1_300, 1_600] {
        t.at(at).await;
        t.sup.trigger("u1", Trigger::Child);
    }
    t.at(10_000).await;
    assert_eq!(t.calls("run"), vec![0, 2_100]);
    t.sup.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn errors_back_off_doubling_to_the_cap_and_a_success_resets_it() {
    let s = spec(|s| {
        s.backoff = secs(1);
        s.reconcile.backoff_max = secs(4);
    });
    let fail = Out::Fail;
    let t = Test::new(
        s,
        &[
            fail,
            fail,
            fail,
            fail,
            fail,
            Out::Ok(Action::await_change()),
            fail,
        ],
        &[],
        Duration::ZERO,
    );
    t.sup.observe(obj().build());
    t.at(60_000).await;
    let runs = t.calls("run");
    assert_eq!(runs.len(), 6, "{runs:?}");
    let gaps: Vec<u64> = runs.windows(2).map(|w| w[1] - w[0]).collect();
    // ×2 up to the cap, each with up to a tenth taken off.
    for (gap, base) in gaps.iter().zip([1_000, 2_000, 4_000, 4_000, 4_000]) {
        assert!(*gap <= base && *gap >= base - base / 10, "gaps {gaps:?}");
    }
    assert_eq!(t.failures().len(), 5);
    assert!(t.failures().iter().all(|(_, fatal)| !fatal));
    // After the success, a trigger's failing run backs off from the start again.
    t.sup.trigger("u1", Trigger::External);
    t.at(61_000).await;
    let runs = t.calls("run");
    assert_eq!(runs[6], 60_000);
    t.at(70_000).await;
    let runs = t.calls("run");
    assert!(
        runs.len() == 8 && (900..=1_000).contains(&(runs[7] - runs[6])),
        "{runs:?}"
    );
    t.sup.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_permanent_error_waits_for_the_next_trigger() {
    let t = Test::new(spec(|_| {}), &[Out::Permanent], &[], Duration::ZERO);
    t.sup.observe(obj().build());
    t.at(600_000).await;
    assert_eq!(t.calls("run"), vec![0]);
    assert_eq!(t.failures(), vec![(0, true)]);
    t.sup.trigger("u1", Trigger::External);
    t.at(600_001).await;
    assert_eq!(t.calls("run"), vec![0, 600_000]);
    t.sup.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn the_operators_own_writes_do_not_retrigger_and_a_spec_edit_does() {
    let t = Test::new(spec(|_| {}), &[], &[], Duration::ZERO);
    let finalizer = SupervisorConfig::default().finalizer.to_string();
    t.sup.observe(obj().version(1).build());
    t.at(1_000).await;
    t.sup.observe(
        obj()
            .version(2)
            .status(json!({"rec": {"done": true}}))
            .build(),
    );
    t.at(2_000).await;
    t.sup
        .observe(obj().version(3).finalizer(&finalizer).build());
    t.at(3_000).await;
    let own = obj()
        .version(4)
        .finalizer(&finalizer)
        .annotation("kopf.dev/rec", "x");
    t.sup.observe(own.build());
    t.at(10_000).await;
    assert_eq!(
        t.calls("run"),
        vec![0],
        "status, finalizer and own annotations"
    );
    t.sup
        .observe(Obj::new("u1").version(5).spec(json!({"size": 2})).build());
    t.at(11_000).await;
    assert_eq!(t.calls("run"), vec![0, 10_000], "a spec edit reconciles");
    t.sup.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn deletion_stops_the_run_then_cleans_up_under_the_finalizer() {
    let s = spec(|s| {
        s.finalizer = true;
        s.backoff = secs(2);
        s.reconcile = ReconcileOptions {
            cleanup: true,
            ..ReconcileOptions::NONE
        };
    });
    let t = Test::new(
        s,
        &[Out::Ok(Action::await_change()), Out::UntilStopped],
        &[Out::Fail],
        ms(100),
    );
    let finalizer = SupervisorConfig::default().finalizer.to_string();
    t.sup.observe(obj().version(1).build());
    t.at(1_000).await;
    t.sup
        .observe(obj().version(2).finalizer(&finalizer).build());
    t.sup.trigger("u1", Trigger::Child);
    t.at(2_000).await; // the second run is in progress
    t.sup
        .observe(obj().version(3).finalizer(&finalizer).deleting().build());
    t.at(30_000).await;
    let notes = t.notes();
    let expected: Vec<(u64, String)> = vec![
        (0, "run".into()),
        (1_000, "run".into()),
        (2_000, format!("stopped: {}", StopReason::RESOURCE_DELETED)),
        (2_000, "cleanup".into()),
    ];
    assert_eq!(notes[..4], expected[..], "{notes:?}");
    // The cleanup failed once, retried after the backoff (2 s, less up to a tenth), succeeded.
    let cleanups = t.calls("cleanup");
    assert_eq!(cleanups.len(), 2, "{notes:?}");
    let gap = cleanups[1] - cleanups[0];
    assert!((100 + 1_800..=100 + 2_000).contains(&gap), "{cleanups:?}");
    // Held from the start, released once the cleanup succeeded.
    let released = cleanups[1] + 100;
    assert_eq!(t.finalizer(), vec![(0, true), (released, false)]);
    assert_eq!(t.calls("run").len(), 2, "nothing runs after the deletion");
    t.sup.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn without_a_cleanup_deletion_stops_the_handler_and_holds_nothing() {
    let t = Test::new(spec(|_| {}), &[], &[], Duration::ZERO);
    t.sup.observe(obj().version(1).build());
    t.at(1_000).await;
    t.sup.observe(obj().version(2).deleting().build());
    t.sup.trigger("u1", Trigger::Child);
    t.at(10_000).await;
    assert_eq!(t.calls("run"), vec![0]);
    assert!(t.calls("cleanup").is_empty());
    assert_eq!(t.finalizer(), vec![(0, false)]);
    t.sup.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_paused_supervisor_runs_nothing_and_runs_again_on_resume() {
    let t = Test::new(spec(|_| {}), &[], &[], Duration::ZERO);
    t.sup.observe(obj().version(1).build());
    t.at(1_000).await;
    t.sup.pause();
    t.at(2_000).await;
    t.sup.trigger("u1", Trigger::Child);
    t.sup
        .observe(Obj::new("u1").version(2).spec(json!({"size": 3})).build());
    t.at(5_000).await;
    assert_eq!(t.calls("run"), vec![0], "paused: nothing runs");
    t.sup.resume();
    t.at(6_000).await;
    assert_eq!(
        t.calls("run"),
        vec![0, 5_000],
        "resumed: reconciled at once"
    );
    t.sup.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_object_that_stops_matching_has_its_run_stopped_by_the_ladder() {
    let t = Test::new(
        spec(|s| s.cancellation_backoff = Some(secs(3))),
        &[Out::UntilStopped],
        &[],
        Duration::ZERO,
    );
    t.sup.observe(obj().version(1).build());
    t.at(1_000).await;
    t.sup.observe(obj().version(2).label("skip", "yes").build());
    t.at(2_000).await;
    t.sup.trigger("u1", Trigger::Child);
    t.at(20_000).await;
    let notes = t.notes();
    assert_eq!(
        notes[1],
        (1_000, format!("stopped: {}", StopReason::FILTERS_MISMATCH)),
        "{notes:?}"
    );
    assert_eq!(
        t.calls("run"),
        vec![0],
        "no instance: the trigger runs nothing"
    );
    // Matching again: reconciled again (positive control).
    t.sup.observe(obj().version(3).build());
    t.at(21_000).await;
    assert_eq!(t.calls("run"), vec![0, 20_000]);
    t.sup.shutdown().await;
}
