//! Random sequences of triggers, spec edits, the operator's own writes, pause/resume and time
//! against a reconcile handler whose runs take random times and sometimes fail, checking:
//! - never two runs of the object at once;
//! - no run starts while the supervisor is paused;
//! - every trigger and every spec edit is followed by a run that starts at or after it (once
//!   the supervisor runs again).

mod common;

use common::*;
use kopf_runtime::engine::{HandlerKind, Output};
use kopf_runtime::{Action, HandlerError};
use proptest::prelude::*;
use serde_json::json;

#[derive(Debug, Clone)]
enum Op {
    Trigger,
    Edit,
    /// A status write and an annotation of the operator's own: no trigger.
    OwnWrite,
    Pause,
    Resume,
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Trigger),
        2 => Just(Op::Edit),
        1 => Just(Op::OwnWrite),
        1 => Just(Op::Pause),
        1 => Just(Op::Resume),
        4 => (1..2_500_u64).prop_map(Op::Advance),
    ]
}

fn handler(debounce: Option<u64>) -> H {
    change(HandlerKind::Reconcile, "rec")
        .with(move |s| {
            s.backoff = ms(300);
            s.reconcile.backoff_max = secs(2);
            s.reconcile.debounce = debounce.map(ms);
        })
        .run(|ctx| async move {
            tokio::time::sleep(ms(u64::from(ctx.call % 7) * 150)).await;
            match ctx.call % 5 {
                3 => Err(HandlerError::msg("flaky")),
                4 => Ok(Output {
                    result: Action::requeue(ms(900)).to_result(),
                    patch: None,
                }),
                _ => ok(),
            }
        })
}

async fn run_case(ops: Vec<Op>, debounce: Option<u64>) -> Result<(), TestCaseError> {
    let h = Harness::new(vec![handler(debounce)]);
    let mut version = 1;
    let object = |version: u64, spec: u64| Obj::new("u1").version(version).spec(json!({"v": spec}));
    h.observe(&object(version, 0));
    let mut spec = 0;
    let mut wanted = vec![0];
    let mut paused_since = None;
    let mut pauses = Vec::new();
    for op in ops {
        match op {
            Op::Trigger => {
                h.sup.trigger("u1", kopf_runtime::engine::Trigger::Child);
                wanted.push(h.now());
            }
            Op::Edit => {
                (version, spec) = (version + 1, spec + 1);
                h.observe(&object(version, spec));
                wanted.push(h.now());
            }
            Op::OwnWrite => {
                version += 1;
                let own = object(version, spec)
                    .status(json!({"rec": {"n": version}}))
                    .annotation("kopf.dev/rec", &version.to_string());
                h.observe(&own);
            }
            Op::Pause => {
                h.sup.pause();
                paused_since = paused_since.or(Some(h.now()));
            }
            Op::Resume => {
                h.sup.resume();
                if let Some(since) = paused_since.take() {
                    pauses.push((since, h.now()));
                }
            }
            Op::Advance(ms) => tokio::time::sleep(common::ms(ms)).await,
        }
        prop_assert!(h.log.max_in_flight() <= 1, "two runs at once");
    }
    h.sup.resume();
    if let Some(since) = paused_since.take() {
        pauses.push((since, h.now()));
    }
    tokio::time::sleep(secs(60)).await;
    prop_assert!(h.log.max_in_flight() <= 1, "two runs at once");
    let runs = h.log.call_times("rec");
    for (from, to) in &pauses {
        let inside: Vec<u64> = runs
            .iter()
            .copied()
            .filter(|t| from < t && t < to)
            .collect();
        prop_assert!(
            inside.is_empty(),
            "runs {inside:?} while paused {from}..{to}"
        );
    }
    for t in wanted {
        prop_assert!(
            runs.iter().any(|s| *s >= t),
            "no run after the trigger at {t}: runs {runs:?}"
        );
    }
    h.sup.shutdown().await;
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn reconcile_runs_never_overlap_and_follow_every_trigger(
        ops in proptest::collection::vec(op(), 1..40),
        debounce in proptest::option::of(1..800_u64),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("a runtime");
        rt.block_on(run_case(ops, debounce))?;
    }
}
