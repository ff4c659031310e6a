//! Random event sequences (observe, spec changes, filter flips, deletion, gone, recreation
//! under the same name, pause/resume, time advances) against a mix of daemons and timers,
//! checking the invariants after every case:
//! - never two invocations of one (object, handler) in flight at once, also when a blocking
//!   one that ignores its stop flag was abandoned while its thread runs on;
//! - nothing is invoked for an object after it was reported deleting or gone, nor while the
//!   operator is paused — and while paused, no instance is running or queued (every one is
//!   stopping or gone), whatever the interleaving of events and pause/resume (a replica that
//!   lost its lease must run nothing);
//! - every stop ends: once all objects are gone and the ladders have had their time, nothing
//!   is in flight, no instance is left, and the memory is back to empty.

mod common;

use common::*;
use kopf_runtime::HandlerError;
use kopf_runtime::engine::Stats;
use proptest::prelude::*;
use serde_json::json;

#[derive(Debug, Clone)]
enum Op {
    /// Observe object slot `obj` (its current UID) with the `run` label on or off.
    Observe {
        obj: usize,
        run: bool,
        spec: u8,
    },
    Delete {
        obj: usize,
    },
    /// Gone; the slot gets a new UID (a recreation under the same name).
    Gone {
        obj: usize,
    },
    /// A late event about the slot's previous UID (already gone, if it was).
    Stale {
        obj: usize,
    },
    Pause,
    Resume,
    Advance {
        ms: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..3usize, any::<bool>(), 0..3u8).prop_map(|(obj, run, spec)| Op::Observe { obj, run, spec }),
        1 => (0..3usize).prop_map(|obj| Op::Delete { obj }),
        1 => (0..3usize).prop_map(|obj| Op::Gone { obj }),
        1 => (0..3usize).prop_map(|obj| Op::Stale { obj }),
        1 => Just(Op::Pause),
        1 => Just(Op::Resume),
        4 => (1..3000u64).prop_map(|ms| Op::Advance { ms }),
    ]
}

fn handlers() -> Vec<H> {
    let coop = daemon("coop")
        .when_run_label()
        .with(|s| s.initial_delay = Some(ms(300)))
        .with(|s| (s.cancellation_backoff, s.cancellation_timeout) = (Some(ms(200)), Some(ms(500))))
        .run(|ctx| async move {
            ctx.inv.stopper.stopped().await;
            tokio::time::sleep(ms(100)).await; // a graceful exit that takes a while
            ok()
        });
    let stub = daemon("stub")
        .when_run_label()
        .with(|s| (s.cancellation_timeout, s.backoff) = (Some(secs(1)), secs(1)))
        .run(|ctx| async move {
            if ctx.call % 3 == 0 {
                return Err(HandlerError::temporary("flaky", secs(1)));
            }
            std::future::pending::<()>().await;
            ok()
        });
    let tick = timer("tick")
        .with(|s| s.schedule.interval = Some(ms(700)))
        .with(|s| s.cancellation_timeout = Some(ms(200)))
        .run(|_| async {
            tokio::time::sleep(ms(300)).await;
            ok()
        });
    let idle = timer("idle")
        .when_run_label()
        .with(|s| s.schedule.idle = Some(secs(1)));
    let quick = timer("quick")
        .with(|s| (s.schedule.interval, s.schedule.sharp) = (Some(ms(500)), true))
        .run_quick(|_| ok());
    // Blocking and deaf to their flags for a few real milliseconds, while paused time races
    // ahead: abandoned (by the ladder, or their timeout) while their threads run on. A respawn
    // or retry must wait for the thread.
    let deaf = daemon("deaf")
        .when_run_label()
        .with(|s| (s.cancellation_backoff, s.cancellation_timeout) = (Some(ms(50)), Some(ms(50))))
        .with(|s| (s.timeout, s.backoff) = (Some(ms(300)), ms(100)))
        .run_blocking(|_| {
            std::thread::sleep(std::time::Duration::from_millis(3));
            Err(HandlerError::temporary("again", ms(100)))
        });
    let deaf_tick = timer("deaf-tick")
        .with(|s| (s.schedule.interval, s.timeout) = (Some(ms(400)), Some(ms(100))))
        .with(|s| s.cancellation_backoff = Some(ms(50)))
        .run_blocking(|_| {
            std::thread::sleep(std::time::Duration::from_millis(3));
            ok()
        });
    vec![coop, stub, tick, idle, quick, deaf, deaf_tick]
}

/// Runs one case; returns the log for the invariant checks.
async fn run_case(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let h = Harness::new(handlers());
    let mut generation = [0u32; 3];
    let mut paused = false;
    let uid = |obj: usize, generation: &[u32; 3]| format!("o{obj}-{}", generation[obj]);
    for op in ops {
        match op {
            Op::Observe { obj, run, spec } => {
                let obj_uid = uid(obj, &generation);
                let object = Obj::named(&obj_uid, &format!("obj{obj}"))
                    .label("run", if run { "yes" } else { "no" })
                    .spec(json!({"v": spec}));
                h.observe(&object);
            }
            Op::Delete { obj } => {
                let obj_uid = uid(obj, &generation);
                h.observe(&Obj::named(&obj_uid, &format!("obj{obj}")).deleting());
                h.log.push(&obj_uid, "-", "deleting");
            }
            Op::Gone { obj } => {
                let obj_uid = uid(obj, &generation);
                h.gone(&obj_uid);
                h.log.push(&obj_uid, "-", "gone");
                generation[obj] += 1;
            }
            Op::Stale { obj } if generation[obj] > 0 => {
                let old = format!("o{obj}-{}", generation[obj] - 1);
                h.observe(&Obj::named(&old, &format!("obj{obj}")).label("run", "yes"));
            }
            Op::Stale { .. } => {}
            Op::Pause => {
                paused = true;
                h.sup.pause();
                h.log.push("-", "-", "pause");
            }
            Op::Resume => {
                paused = false;
                h.sup.resume();
                h.log.push("-", "-", "resume");
            }
            Op::Advance { ms } => tokio::time::sleep(common::ms(ms)).await,
        }
        prop_assert!(
            h.log.max_in_flight() <= 1,
            "two invocations of one pair at once"
        );
        if paused {
            let stats = h.stats();
            let alive = stats.daemons_running
                + stats.timers_running
                + stats.daemons_queued
                + stats.timers_queued;
            prop_assert_eq!(alive, 0, "instances alive while paused: {:?}", stats);
        }
    }
    check_order(&h.log.all())?;
    // Every stop ends: everything gone, then the longest ladder (1 s) and more.
    for uid in h.sup.tracked_uids() {
        h.gone(&uid);
    }
    tokio::time::sleep(secs(5)).await;
    h.settle(|h| h.stats().threads == 0 && h.stats().objects == 0)
        .await;
    let stats = h.stats();
    let expected = Stats {
        fires: stats.fires,
        failures: stats.failures,
        thread_waits: stats.thread_waits,
        daemons_abandoned: stats.daemons_abandoned,
        timers_abandoned: stats.timers_abandoned,
        ..Stats::default()
    };
    prop_assert_eq!(stats, expected);
    prop_assert_eq!(h.log.in_flight(), 0);
    prop_assert!(h.sup.shutdown().await == kopf_runtime::engine::ShutdownReport::default());
    Ok(())
}

/// No call for an object after it was reported deleting or gone; no call while paused.
fn check_order(recs: &[Rec]) -> Result<(), TestCaseError> {
    let mut ended = std::collections::HashSet::new();
    let mut paused = false;
    for rec in recs {
        match rec.what.as_str() {
            "deleting" | "gone" => {
                ended.insert(rec.uid.clone());
            }
            "pause" => paused = true,
            "resume" => paused = false,
            what if what.starts_with("call") => {
                prop_assert!(
                    !ended.contains(&rec.uid),
                    "{} called after its end: {rec:?}",
                    rec.uid
                );
                prop_assert!(!paused, "called while paused: {rec:?}");
            }
            _ => {}
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn random_event_sequences_keep_the_invariants(ops in prop::collection::vec(op(), 1..40)) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(run_case(ops))?;
    }
}
