//! Object lifecycles: filters, deletion and gone, recreation, finalizers, skipped objects,
//! pausing, the dedicated-thread cap, and memory.

mod common;

use std::sync::Arc;

use common::*;
use kopf_runtime::StopReason;
use kopf_runtime::engine::{BlockingPool, MatchError, Stats, SupervisorConfig};
use serde_json::json;

fn waiting(id: &'static str) -> H {
    daemon(id).run(|ctx| async move {
        ctx.until_stopped().await;
        ok()
    })
}

/// Async, ignores its flag; cancelled `backoff` s after the stop.
fn stubborn(id: &'static str, backoff: u64) -> H {
    daemon(id)
        .with(move |s| {
            (s.cancellation_backoff, s.cancellation_timeout) = (Some(secs(backoff)), Some(secs(1)))
        })
        .run(|ctx| async move {
            let _note = ctx.on_drop("dropped");
            std::future::pending::<()>().await;
            ok()
        })
}

#[tokio::test(start_paused = true)]
async fn a_filter_mismatch_stops_the_daemon_and_a_rematch_respawns_it_with_initial_delay() {
    let d = waiting("d")
        .when_run_label()
        .with(|s| s.initial_delay = Some(secs(2)));
    let h = Harness::new(vec![d]);
    h.observe(&Obj::new("u1").label("run", "yes"));
    h.at(5000).await;
    h.observe(&Obj::new("u1").label("run", "no"));
    h.at(8000).await;
    h.observe(&Obj::new("u1").label("run", "yes"));
    h.at(20_000).await;
    let events = h.log.events("d");
    assert_eq!(
        events,
        vec![
            (2000, "call r0".into()),
            (5000, "stopped: filters mismatch".into()),
            (10_000, "call r0".into())
        ]
    );
    assert_eq!(
        h.finalizer("u1"),
        vec![(0, true), (5000, false), (8000, true)]
    );
}

#[tokio::test(start_paused = true)]
async fn a_rematch_while_still_stopping_respawns_only_after_the_exit() {
    let d = stubborn("d", 3).when_run_label();
    let h = Harness::new(vec![d]);
    h.observe(&Obj::new("u1").label("run", "yes"));
    h.at(1000).await;
    h.observe(&Obj::new("u1").label("run", "no"));
    h.at(2000).await;
    h.observe(&Obj::new("u1").label("run", "yes"));
    h.at(3999).await;
    assert_eq!(h.log.call_times("d"), vec![0]);
    assert_eq!(h.stats().daemons_stopping, 1);
    h.at(10_000).await;
    assert_eq!(
        h.log.call_times("d"),
        vec![0, 4000],
        "respawned the moment it exited"
    );
    assert_eq!(h.log.max_in_flight(), 1);
    assert_eq!(h.finalizer("u1"), vec![(0, true)]);
    assert_eq!(h.stats().daemons_running, 1);
}

#[tokio::test(start_paused = true)]
async fn a_daemon_that_ended_on_its_own_is_not_respawned_by_filter_flips() {
    let d = daemon("d").when_run_label();
    let h = Harness::new(vec![d]);
    h.observe(&Obj::new("u1").label("run", "yes"));
    h.at(1000).await;
    h.observe(&Obj::new("u1").label("run", "no"));
    h.at(2000).await;
    h.observe(&Obj::new("u1").label("run", "yes"));
    h.at(10_000).await;
    assert_eq!(h.log.call_times("d"), vec![0]);
    assert_eq!(h.finalizer("u1"), vec![(0, true), (0, false)]);
}

#[tokio::test(start_paused = true)]
async fn gone_stops_everything_sends_nothing_more_and_forgets_the_object() {
    let d = daemon("d").run(|ctx| async move {
        ctx.until_stopped().await;
        ok_result(json!("late"))
    });
    let h = Harness::new(vec![d]);
    h.observe(&Obj::new("u1").version(9));
    h.at(1000).await;
    h.gone("u1");
    assert!(h.sup.tracked_uids().is_empty());
    assert!(!h.sup.holds_finalizer("u1"));
    h.observe(&Obj::new("u1").version(9)); // stale events after gone
    h.observe(&Obj::new("u1").version(5));
    h.at(2000).await;
    assert_eq!(
        h.log.events("d")[1],
        (1000, "stopped: resource deleted".into())
    );
    assert_eq!(h.log.call_times("d"), vec![0]);
    assert_eq!(h.finalizer("u1"), vec![(0, true)]);
    assert!(h.results("d").is_empty());
    assert_eq!(
        h.stats(),
        Stats {
            fires: 1,
            ..Stats::default()
        }
    );
}

#[tokio::test(start_paused = true)]
async fn an_object_gone_from_the_selector_is_served_again_at_a_later_version() {
    let d = waiting("d");
    let h = Harness::new(vec![d]);
    h.observe(&Obj::new("u1").version(3));
    h.at(1000).await;
    // Its label left the watch's selector at version 4: a deletion event carrying version 4.
    h.sup.gone_at("u1", "4");
    h.observe(&Obj::new("u1").version(4)); // stale: ignored
    h.observe(&Obj::new("u1").version(5).deleting()); // deleting: never brought back
    h.at(2000).await;
    assert!(h.sup.tracked_uids().is_empty());
    h.observe(&Obj::new("u1").version(6)); // the label came back
    h.at(3000).await;
    assert_eq!(h.log.call_times("d"), vec![0, 2000]);
    assert_eq!(h.finalizer("u1"), vec![(0, true), (2000, true)]);
    // Gone again, then a version between the two deletions is stale too.
    h.sup.gone_at("u1", "9");
    h.observe(&Obj::new("u1").version(8));
    h.at(4000).await;
    assert!(h.sup.tracked_uids().is_empty());
    assert_eq!(h.log.call_times("d"), vec![0, 2000]);
    assert_eq!(h.log.max_in_flight(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_daemon_awaits_its_finalizer_when_configured_and_timers_do_not() {
    let config = SupervisorConfig {
        daemons_await_finalizer: true,
        ..common::config()
    };
    let fin = config.finalizer.to_string();
    let ticker = timer("t").with(|s| s.schedule.interval = Some(secs(10)));
    let unheld = waiting("free").with(|s| s.finalizer = false);
    let h = Harness::with_config(vec![waiting("d"), ticker, unheld], config);
    h.observe(&Obj::new("u1"));
    h.at(500).await;
    assert_eq!(h.finalizer("u1"), vec![(0, true)], "asked for at once");
    assert_eq!(
        h.log.call_times("d"),
        Vec::<u64>::new(),
        "not before the finalizer is on"
    );
    assert_eq!(
        (h.log.call_times("t"), h.log.call_times("free")),
        (vec![0], vec![0])
    );
    h.observe(&Obj::new("u1").version(2).finalizer(&fin));
    h.at(1000).await;
    assert_eq!(h.log.call_times("d"), vec![500]);
    // Deleted before its finalizer was ever placed: the daemon never starts.
    h.observe(&Obj::new("u2"));
    h.observe(&Obj::new("u2").version(2).deleting());
    h.gone("u2");
    h.at(2000).await;
    assert_eq!(h.log.call_times("d"), vec![500], "never for u2");
}

#[tokio::test(start_paused = true)]
async fn the_memo_is_per_object_shared_by_its_handlers_and_kept_across_respawns() {
    use std::sync::atomic::{AtomicU32, Ordering};
    let counting = |id: &'static str| {
        daemon(id).when_run_label().run(|ctx| async move {
            let n = ctx
                .inv
                .memo
                .get_or_default::<AtomicU32>()
                .fetch_add(1, Ordering::SeqCst);
            ctx.note(format!("memo {n}"));
            ctx.until_stopped().await;
            ok()
        })
    };
    let h = Harness::new(vec![counting("a"), counting("b")]);
    h.observe(&Obj::named("u1", "x").label("run", "yes"));
    h.at(1000).await;
    h.observe(&Obj::named("u1", "x").label("run", "no").version(2));
    h.at(2000).await;
    h.observe(&Obj::named("u1", "x").label("run", "yes").version(3)); // respawn: same memo
    h.at(3000).await;
    h.gone("u1");
    h.observe(&Obj::named("u2", "x").label("run", "yes")); // same name, new object: a new memo
    h.at(4000).await;
    let mut seen: Vec<String> = ["a", "b"]
        .iter()
        .flat_map(|id| h.log.events(id))
        .map(|(_, what)| what)
        .filter(|what| what.starts_with("memo"))
        .collect();
    seen.sort();
    // u1: four starts over two handlers share one counter (0..=3); u2 starts again from 0.
    assert_eq!(
        seen,
        ["memo 0", "memo 0", "memo 1", "memo 1", "memo 2", "memo 3"]
    );
}

#[tokio::test(start_paused = true)]
async fn rapid_delete_and_recreate_under_one_name_never_doubles_an_instance() {
    let d = stubborn("d", 5);
    let h = Harness::new(vec![d]);
    for (i, uid) in ["u1", "u2", "u3", "u4"].into_iter().enumerate() {
        h.at(500 * i as u64).await;
        h.observe(&Obj::named(uid, "same-name"));
        h.at(500 * i as u64 + 100).await;
        h.observe(&Obj::named(uid, "same-name").deleting());
        h.gone(uid);
    }
    h.observe(&Obj::named("u5", "same-name"));
    // The same UID flapping many times within one instant.
    for i in 0..100 {
        let label = if i % 2 == 0 { "no" } else { "yes" };
        h.observe(&Obj::named("u5", "same-name").label("run", label));
    }
    h.at(60_000).await;
    let mut calls: Vec<_> = h
        .log
        .all()
        .into_iter()
        .filter(|r| r.what.starts_with("call"))
        .map(|r| (r.uid, r.at))
        .collect();
    calls.sort();
    let expected = vec![
        ("u1".into(), 0),
        ("u2".into(), 500),
        ("u3".into(), 1000),
        ("u4".into(), 1500),
        ("u5".into(), 1600),
    ];
    assert_eq!(calls, expected);
    assert_eq!(h.log.max_in_flight(), 1);
    assert_eq!(h.sup.tracked_uids(), vec![Arc::<str>::from("u5")]);
    assert_eq!(h.stats().objects, 1);
}

#[tokio::test(start_paused = true)]
async fn handlers_without_the_finalizer_option_do_not_hold_it() {
    let d = waiting("d").with(|s| s.finalizer = false);
    let h = Harness::new(vec![d]);
    h.observe(&Obj::new("u1"));
    h.at(1000).await;
    assert_eq!(h.log.call_times("d"), vec![0]);
    assert_eq!(h.finalizer("u1"), vec![(0, false)]);
    assert!(!h.sup.holds_finalizer("u1"));
}

#[tokio::test(start_paused = true)]
async fn the_finalizer_is_released_when_the_last_holding_instance_exits() {
    let fast = waiting("fast");
    let slow = stubborn("slow", 5);
    let free = stubborn("free", 30).with(|s| s.finalizer = false);
    let h = Harness::new(vec![fast, slow, free]);
    h.observe(&Obj::new("u1"));
    h.at(1000).await;
    h.observe(&Obj::new("u1").deleting());
    h.at(5999).await;
    assert!(h.sup.holds_finalizer("u1"));
    h.at(7000).await;
    assert_eq!(h.finalizer("u1"), vec![(0, true), (6000, false)]);
    assert_eq!(
        h.stats().daemons_stopping,
        1,
        "the non-holding daemon is still stopping"
    );
}

fn decode_error() -> MatchError {
    let source = serde_json::from_str::<u32>("\"x\"").expect_err("not a number");
    MatchError::Decode {
        type_name: "MyResource",
        source: Arc::new(source),
    }
}

#[tokio::test(start_paused = true)]
async fn an_object_that_cannot_be_evaluated_is_skipped_once_per_version() {
    let bad = waiting("bad").filter(|o| {
        if o.label("ok") == Some("1") {
            Ok(true)
        } else {
            Err(decode_error())
        }
    });
    let panicky = waiting("panicky").when(|_| panic!("filter bug"));
    let h = Harness::new(vec![bad, panicky]);
    h.observe(&Obj::new("u1"));
    h.observe(&Obj::new("u1"));
    h.at(1000).await;
    h.observe(&Obj::new("u1").version(2));
    h.at(2000).await;
    h.observe(&Obj::new("u1").label("ok", "1"));
    h.at(3000).await;
    let skipped: Vec<_> = h
        .effects()
        .into_iter()
        .filter_map(|(at, e)| match e {
            kopf_runtime::engine::Effect::Skipped {
                handler, message, ..
            } => Some((at, handler, message)),
            _ => None,
        })
        .collect();
    let msg = "the object does not deserialize into `MyResource`: invalid type: string \"x\", expected u32 at line 1 column 3".to_owned();
    let panic = "the filters panicked: filter bug".to_owned();
    assert_eq!(
        skipped,
        vec![
            (0, "bad", msg.clone()),
            (0, "panicky", panic.clone()),
            (1000, "bad", msg),
            (1000, "panicky", panic.clone()),
            (2000, "panicky", panic)
        ]
    );
    assert_eq!(h.log.call_times("bad"), vec![2000]);
    assert!(h.log.call_times("panicky").is_empty());
}

#[tokio::test(start_paused = true)]
async fn pausing_stops_everything_and_resuming_starts_what_matches_at_once() {
    let h = Harness::new(vec![waiting("d")]);
    h.observe(&Obj::new("u1"));
    h.observe(&Obj::new("u2"));
    h.at(1000).await;
    h.sup.pause();
    h.at(2000).await;
    h.observe(&Obj::new("u1").version(2)); // paused: nothing starts
    h.observe(&Obj::new("u3"));
    h.at(3000).await;
    assert_eq!(h.stats().daemons_running, 0);
    assert_eq!(
        h.log.call_times("d"),
        vec![0, 0],
        "nothing starts while paused"
    );
    h.sup.resume();
    h.at(4000).await;
    // Resuming starts every matching object at once, the one first seen while paused included;
    // later versions do not start them twice.
    h.observe(&Obj::new("u1").version(3));
    h.observe(&Obj::new("u3").version(2));
    h.at(5000).await;
    let stops: Vec<_> = h
        .log
        .events("d")
        .into_iter()
        .filter(|(_, w)| w.starts_with("stopped"))
        .collect();
    assert_eq!(stops, vec![(1000, "stopped: operator pausing".into()); 2]);
    assert_eq!(h.log.call_times("d"), vec![0, 0, 3000, 3000, 3000]);
    assert_eq!(
        h.finalizer("u1"),
        vec![(0, true)],
        "pausing keeps finalizers"
    );
    assert_eq!(h.finalizer("u3"), vec![(2000, true)]);
}

#[tokio::test(start_paused = true)]
async fn over_the_thread_cap_blocking_daemons_queue_and_a_gone_one_is_dropped() {
    let logs = Logs::capture();
    let d = daemon("d").run_blocking(|ctx| {
        ctx.block_until_stopped();
        ok()
    });
    let config = SupervisorConfig {
        blocking: BlockingPool::new(1),
        ..config()
    };
    let h = Harness::with_config(vec![d], config);
    h.observe(&Obj::new("u1"));
    h.at(1000).await;
    h.observe(&Obj::new("u2"));
    h.observe(&Obj::new("u3"));
    h.at(2000).await;
    assert_eq!(
        (h.stats().daemons_running, h.stats().daemons_queued),
        (1, 2)
    );
    assert_eq!(
        logs.lines_with(&["WARN", "all 1 dedicated threads are busy"])
            .len(),
        2
    );
    h.gone("u2");
    h.at(3000).await;
    assert_eq!(
        (h.stats().daemons_running, h.stats().daemons_queued),
        (1, 1)
    );
    h.observe(&Obj::new("u1").deleting());
    h.settle(|h| h.log.calls("d").len() == 2).await;
    let calls: Vec<_> = h
        .log
        .all()
        .into_iter()
        .filter(|r| r.what.starts_with("call"))
        .map(|r| (r.at, r.uid))
        .collect();
    assert_eq!(calls, vec![(0, "u1".into()), (3000, "u3".into())]);
    assert_eq!(
        h.finalizer("u2"),
        vec![(1000, true)],
        "no effects after gone"
    );
    h.observe(&Obj::new("u3").deleting());
    h.gone("u1");
    h.gone("u3");
    h.settle(|h| {
        h.stats()
            == Stats {
                fires: 2,
                ..Stats::default()
            }
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn stats_count_running_stopping_and_queued_instances_of_each_kind() {
    let d = stubborn("d", 10);
    let t = timer("t").with(|s| s.schedule.interval = Some(secs(1)));
    let h = Harness::new(vec![d, t]);
    h.observe(&Obj::new("u1"));
    h.observe(&Obj::new("u2"));
    h.at(500).await;
    let s = h.stats();
    assert_eq!(
        (s.objects, s.daemons_running, s.timers_running, s.fires),
        (2, 2, 2, 4)
    );
    h.observe(&Obj::new("u1").deleting());
    h.at(600).await;
    let s = h.stats();
    assert_eq!(
        (
            s.daemons_running,
            s.daemons_stopping,
            s.timers_running,
            s.timers_stopping
        ),
        (1, 1, 1, 0)
    );
    h.at(12_500).await;
    let s = h.stats();
    assert_eq!(
        (
            s.objects,
            s.daemons_running,
            s.daemons_stopping,
            s.timers_running
        ),
        (2, 1, 0, 1)
    );
    h.gone("u1");
    h.gone("u2");
    h.at(30_000).await;
    // Two daemons and two timers at 0, then the timer of u2 every second up to 12 s.
    assert_eq!(
        h.stats(),
        Stats {
            fires: 4 + 12,
            ..Stats::default()
        }
    );
}

#[tokio::test(start_paused = true)]
async fn ten_thousand_create_and_gone_cycles_leave_nothing_behind() {
    let never = waiting("never").with(|s| s.initial_delay = Some(secs(3600)));
    let quick = daemon("quick");
    let ticker = timer("ticker")
        .with(|s| (s.schedule.interval, s.schedule.idle) = (Some(secs(1)), Some(secs(5))));
    let h = Harness::new(vec![never, quick, ticker]);
    for i in 0..10_000 {
        let uid = format!("u{i}");
        h.observe(&Obj::new(&uid));
        if i % 2 == 0 {
            h.observe(&Obj::new(&uid).deleting());
        }
        h.gone(&uid);
        if i % 1000 == 0 {
            h.spin().await;
        }
    }
    h.at(1).await;
    assert_eq!(
        h.stats(),
        Stats {
            fires: h.stats().fires,
            ..Stats::default()
        }
    );
    assert!(h.stats().fires <= 10_000, "only `quick` can have run");
    assert!(h.sup.tracked_uids().is_empty());
}

#[tokio::test(start_paused = true)]
async fn ten_thousand_cycles_without_any_invocation_bring_stats_back_to_default() {
    let h = Harness::new(vec![
        waiting("d").with(|s| s.initial_delay = Some(secs(60))),
    ]);
    for i in 0..10_000 {
        let uid = format!("u{i}");
        h.observe(&Obj::new(&uid));
        h.gone(&uid);
    }
    assert_eq!(
        h.stats().objects,
        10_000,
        "a positive control: instances are still exiting"
    );
    h.at(1).await;
    assert_eq!(h.stats(), Stats::default());
}

#[tokio::test(start_paused = true)]
async fn dropping_the_last_supervisor_handle_stops_every_instance() {
    let h = Harness::new(vec![waiting("d")]);
    h.observe(&Obj::new("u1"));
    h.at(1000).await;
    let copy = h.sup.clone();
    let Harness { sup, log, .. } = h;
    drop(sup);
    tokio::time::sleep(secs(1)).await;
    assert_eq!(log.events("d").len(), 1, "a clone still lives");
    drop(copy);
    tokio::time::sleep(secs(1)).await;
    assert_eq!(
        log.events("d")[1],
        (2000, "stopped: operator exiting".into())
    );
}

#[tokio::test(start_paused = true)]
async fn instance_flags_carry_the_lifecycle_reason() {
    let h = Harness::new(vec![waiting("d").when_run_label()]);
    h.observe(&Obj::new("u1").label("run", "yes"));
    h.at(1000).await;
    h.observe(&Obj::new("u1").label("run", "no"));
    h.at(2000).await;
    let flag = h.log.stopper("d", 0);
    assert_eq!(
        flag.reason(),
        StopReason::FILTERS_MISMATCH | StopReason::DONE
    );
    assert_eq!(flag.since(), Some(h.log.t0 + ms(1000)));
}

#[test]
fn dropping_the_runtime_ends_instances_without_starting_new_ones() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let h = rt.block_on(async {
        let h = Harness::new(vec![waiting("d")]);
        h.observe(&Obj::new("u1"));
        h.at(1000).await;
        h
    });
    assert_eq!(h.stats().daemons_running, 1);
    drop(rt);
    assert_eq!(h.log.call_times("d"), vec![0]);
    let s = h.stats();
    assert_eq!(
        (s.objects, s.daemons_running, s.daemons_stopping),
        (1, 0, 0)
    );
    assert!(h.sup.holds_finalizer("u1"), "the object still matches");
}

#[tokio::test(start_paused = true)]
async fn the_debug_output_shows_the_handlers_and_the_stats() {
    let h = Harness::new(vec![
        waiting("d"),
        timer("t").with(|s| s.schedule.interval = Some(secs(1))),
    ]);
    h.observe(&Obj::new("u1"));
    h.at(500).await;
    let text = format!("{:?}", h.sup);
    assert!(
        text.starts_with("Supervisor { handlers: 2, stats: Stats { objects: 1, daemons_running: 1"),
        "{text}"
    );
    assert!(text.contains("timers_running: 1"), "{text}");
}

#[tokio::test(start_paused = true)]
async fn tracked_uids_are_sorted_and_exclude_gone_objects() {
    let h = Harness::new(vec![stubborn("d", 5)]);
    for uid in ["c", "a", "d", "b"] {
        h.observe(&Obj::new(uid));
    }
    h.gone("d");
    let uids: Vec<String> = h.sup.tracked_uids().iter().map(|u| u.to_string()).collect();
    assert_eq!(uids, ["a", "b", "c"]);
    assert_eq!(h.stats().objects, 4, "d is still stopping");
}

#[tokio::test(start_paused = true)]
async fn a_blocking_timer_over_the_cap_is_counted_as_queued() {
    let d = daemon("d").run_blocking(|ctx| {
        ctx.block_until_stopped();
        ok()
    });
    let t = timer("t")
        .with(|s| s.schedule.interval = Some(secs(1)))
        .run_quick(|_| ok());
    let config = SupervisorConfig {
        blocking: BlockingPool::new(1),
        ..config()
    };
    let h = Harness::with_config(vec![d, t], config);
    h.observe(&Obj::new("u1"));
    h.at(1000).await;
    let s = h.stats();
    assert_eq!(
        (s.daemons_running, s.timers_queued, s.timers_running),
        (1, 1, 0)
    );
    assert!(h.log.calls("t").is_empty());
    h.gone("u1");
    h.settle(|h| h.stats().objects == 0).await;
    assert!(
        h.log.calls("t").is_empty(),
        "a queued timer whose object is gone never runs"
    );
}

#[tokio::test(start_paused = true)]
async fn the_thread_pool_counts_threads_in_use_across_handlers() {
    let logs = Logs::capture();
    let pool = BlockingPool::new(2);
    let d = daemon("d").run_blocking(|ctx| {
        ctx.block_until_stopped();
        ok()
    });
    let config = SupervisorConfig {
        blocking: pool.clone(),
        ..config()
    };
    let h = Harness::with_config(vec![d], config);
    for uid in ["u1", "u2", "u3"] {
        h.observe(&Obj::new(uid));
    }
    h.settle(|h| h.log.calls("d").len() == 2).await;
    assert_eq!((pool.capacity(), pool.in_use()), (2, 2));
    assert!(format!("{pool:?}").contains("capacity: 2, in_use: 2"));
    assert_eq!(
        logs.lines_with(&["all 2 dedicated threads are busy"]).len(),
        1
    );
    for uid in ["u1", "u2", "u3"] {
        h.gone(uid);
    }
    h.settle(|h| h.stats().threads == 0 && h.stats().objects == 0)
        .await;
    assert_eq!(pool.in_use(), 0);
}
