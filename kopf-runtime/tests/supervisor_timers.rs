//! Timers: soft and sharp intervals, idle, initial delay, jitter, one-shot, errors, stopping.
//! Every instant is exact (paused tokio time, milliseconds from the start of the test).

mod common;

use common::*;
use kopf_runtime::engine::ErrorsMode;
use kopf_runtime::{HandlerError, StopReason};
use serde_json::json;
use std::sync::{Arc, Mutex};

/// A timer whose every run takes `run_ms`.
fn slow(id: &'static str, run_ms: u64) -> H {
    timer(id).run(move |_| async move {
        tokio::time::sleep(ms(run_ms)).await;
        ok()
    })
}

#[tokio::test(start_paused = true)]
async fn a_soft_interval_counts_from_the_end_of_the_previous_run() {
    let t = slow("t", 2000).with(|s| s.schedule.interval = Some(secs(10)));
    let h = Harness::new(vec![t]);
    h.observe(&Obj::new("u1"));
    h.at(40_000).await;
    assert_eq!(h.log.call_times("t"), vec![0, 12_000, 24_000, 36_000]);
}

#[tokio::test(start_paused = true)]
async fn a_soft_interval_with_a_fast_handler() {
    let t = slow("t", 250).with(|s| s.schedule.interval = Some(ms(400)));
    let h = Harness::new(vec![t]);
    h.observe(&Obj::new("u1"));
    h.at(1400).await;
    assert_eq!(h.log.call_times("t"), vec![0, 650, 1300]);
}

#[tokio::test(start_paused = true)]
async fn a_sharp_interval_keeps_to_the_grid() {
    let t =
        slow("t", 250).with(|s| (s.schedule.interval, s.schedule.sharp) = (Some(ms(400)), true));
    let h = Harness::new(vec![t]);
    h.at(100).await;
    h.observe(&Obj::new("u1"));
    h.at(1400).await;
    assert_eq!(h.log.call_times("t"), vec![100, 500, 900, 1300]);
}

#[tokio::test(start_paused = true)]
async fn a_sharp_grid_skips_ticks_missed_by_a_slow_handler() {
    let t =
        slow("t", 500).with(|s| (s.schedule.interval, s.schedule.sharp) = (Some(ms(400)), true));
    let h = Harness::new(vec![t]);
    h.observe(&Obj::new("u1"));
    h.at(2000).await;
    assert_eq!(h.log.call_times("t"), vec![0, 800, 1600]);
    assert_eq!(h.log.max_in_flight(), 1, "runs never overlap");
}

#[tokio::test(start_paused = true)]
async fn after_a_retry_a_sharp_timer_returns_to_its_grid() {
    let t = timer("t")
        .with(|s| (s.schedule.interval, s.schedule.sharp) = (Some(secs(10)), true))
        .run(|ctx| async move {
            if ctx.call == 0 {
                Err(HandlerError::temporary("wait", secs(3)))
            } else {
                ok()
            }
        });
    let h = Harness::new(vec![t]);
    h.observe(&Obj::new("u1"));
    h.at(25_000).await;
    assert_eq!(
        h.log.calls("t"),
        vec![(0, 0), (3000, 1), (10_000, 0), (20_000, 0)]
    );
}

#[tokio::test(start_paused = true)]
async fn a_temporary_error_overrides_the_interval() {
    let t = timer("t")
        .with(|s| s.schedule.interval = Some(secs(10)))
        .run(|ctx| async move {
            if ctx.call == 0 {
                Err(HandlerError::temporary("wait", secs(2)))
            } else {
                ok()
            }
        });
    let h = Harness::new(vec![t]);
    h.observe(&Obj::new("u1"));
    h.at(25_000).await;
    assert_eq!(
        h.log.calls("t"),
        vec![(0, 0), (2000, 1), (12_000, 0), (22_000, 0)]
    );
    assert_eq!(h.failures("t"), vec![(0, false)]);
}

#[tokio::test(start_paused = true)]
async fn a_cycle_that_ends_in_failure_is_followed_by_the_next_after_the_interval() {
    let t = timer("t")
        .with(|s| (s.schedule.interval, s.retries) = (Some(secs(10)), Some(2)))
        .run(|_| async { Err(HandlerError::temporary("flaky", secs(1))) });
    let h = Harness::new(vec![t]);
    h.observe(&Obj::new("u1"));
    h.at(22_500).await;
    assert_eq!(
        h.log.calls("t"),
        vec![(0, 0), (1000, 1), (11_000, 0), (12_000, 1), (22_000, 0)]
    );
    assert_eq!(
        h.failures("t"),
        vec![
            (0, false),
            (1000, true),
            (11_000, false),
            (12_000, true),
            (22_000, false)
        ]
    );
    assert!(h.sup.holds_finalizer("u1"));
}

#[tokio::test(start_paused = true)]
async fn a_permanent_error_stops_the_timer_for_this_object() {
    let t = timer("t")
        .with(|s| s.schedule.interval = Some(secs(1)))
        .run(|_| async { Err(HandlerError::permanent("never")) });
    let h = Harness::new(vec![t]);
    h.observe(&Obj::new("u1"));
    h.at(1000).await;
    h.observe(&Obj::new("u1").version(2));
    h.at(60_000).await;
    assert_eq!(h.log.call_times("t"), vec![0]);
    assert_eq!(h.failures("t"), vec![(0, true)]);
    assert_eq!(h.finalizer("u1"), vec![(0, true), (0, false)]);
    assert_eq!(h.stats().timers_running, 0);
}

#[tokio::test(start_paused = true)]
async fn errors_permanent_mode_stops_the_timer_and_ignored_mode_goes_on() {
    let perm = timer("perm")
        .with(|s| (s.schedule.interval, s.errors) = (Some(secs(5)), ErrorsMode::Permanent))
        .run(|_| async { Err(HandlerError::msg("x")) });
    let ign = timer("ign")
        .with(|s| (s.schedule.interval, s.errors) = (Some(secs(5)), ErrorsMode::Ignored))
        .run(|_| async { Err(HandlerError::msg("y")) });
    let h = Harness::new(vec![perm, ign]);
    h.observe(&Obj::new("u1"));
    h.at(12_000).await;
    assert_eq!(h.log.call_times("perm"), vec![0]);
    assert_eq!(h.log.call_times("ign"), vec![0, 5000, 10_000]);
    assert_eq!(h.failures("ign"), vec![]);
}

#[tokio::test(start_paused = true)]
async fn initial_delay_comes_before_the_first_run_only() {
    let t = timer("t").with(|s| {
        (s.initial_delay, s.schedule.interval) = (Some(secs(2)), Some(secs(10)));
    });
    let h = Harness::new(vec![t]);
    h.observe(&Obj::new("u1"));
    h.at(25_000).await;
    assert_eq!(h.log.call_times("t"), vec![2000, 12_000, 22_000]);
}

#[tokio::test(start_paused = true)]
async fn a_one_shot_timer_runs_once_and_releases_the_finalizer() {
    let once = timer("once").with(|s| (s.initial_delay, s.schedule.once) = (Some(secs(3)), true));
    let bare = timer("bare"); // neither interval nor idle: one-shot too
    let h = Harness::new(vec![once, bare]);
    h.observe(&Obj::new("u1"));
    h.at(2000).await;
    h.observe(&Obj::new("u1").version(2)); // later events do not rerun it
    h.at(60_000).await;
    assert_eq!(h.log.call_times("once"), vec![3000]);
    assert_eq!(h.log.call_times("bare"), vec![0]);
    assert_eq!(h.finalizer("u1"), vec![(0, true), (3000, false)]);
}

#[tokio::test(start_paused = true)]
async fn a_one_shot_timer_retries_until_its_run_succeeds() {
    let t = timer("t")
        .with(|s| s.schedule.once = true)
        .run(|ctx| async move {
            if ctx.call < 2 {
                Err(HandlerError::temporary("no", secs(5)))
            } else {
                ok_result(json!(1))
            }
        });
    let h = Harness::new(vec![t]);
    h.observe(&Obj::new("u1"));
    h.at(60_000).await;
    assert_eq!(h.log.calls("t"), vec![(0, 0), (5000, 1), (10_000, 2)]);
    assert_eq!(h.results("t"), vec![(10_000, Some(json!(1)))]);
}

#[tokio::test(start_paused = true)]
async fn idle_fires_after_a_quiet_period_counted_from_when_the_object_was_first_seen() {
    let t = timer("t").with(|s| s.schedule.idle = Some(secs(5)));
    let h = Harness::new(vec![t]);
    h.at(1000).await;
    h.observe(&Obj::new("u1"));
    h.at(8000).await;
    h.observe(&Obj::new("u1").spec(json!({"size": 2})));
    h.at(20_000).await;
    h.observe(
        &Obj::new("u1")
            .spec(json!({"size": 2}))
            .status(json!({"t": "done"})),
    );
    h.at(40_000).await;
    assert_eq!(h.log.call_times("t"), vec![6000, 13_000]);
}

#[tokio::test(start_paused = true)]
async fn idle_is_reset_by_a_spec_change_but_not_by_status_or_framework_metadata() {
    let t = timer("t").with(|s| s.schedule.idle = Some(secs(5)));
    let h = Harness::new(vec![t]);
    h.observe(&Obj::new("u1"));
    h.at(1000).await;
    let noise = Obj::new("u1")
        .version(7)
        .status(json!({"t": {"runs": 1}}))
        .annotation("kopf.dev/t", "last-run")
        .finalizer("kopf.dev/finalizer");
    h.observe(&noise);
    h.at(2000).await;
    h.observe(&noise.clone().spec(json!({"size": 3})));
    h.at(6000).await;
    assert!(
        h.log.call_times("t").is_empty(),
        "the spec change at 2000 reset idle"
    );
    h.at(8000).await;
    assert_eq!(h.log.call_times("t"), vec![7000]);
}

#[tokio::test(start_paused = true)]
async fn idle_is_reset_by_labels_and_foreign_annotations() {
    let t = timer("t").with(|s| s.schedule.idle = Some(secs(5)));
    let h = Harness::new(vec![t]);
    h.observe(&Obj::new("u1"));
    h.at(1000).await;
    h.observe(&Obj::new("u1").label("team", "a"));
    h.at(2000).await;
    h.observe(
        &Obj::new("u1")
            .label("team", "a")
            .annotation("example.com/x", "1"),
    );
    h.at(10_000).await;
    assert_eq!(h.log.call_times("t"), vec![7000]);
}

#[tokio::test(start_paused = true)]
async fn idle_with_interval_rechecks_idle_after_every_interval() {
    let t = timer("t")
        .with(|s| (s.schedule.idle, s.schedule.interval) = (Some(ms(300)), Some(ms(200))));
    let h = Harness::new(vec![t]);
    h.observe(&Obj::new("u1"));
    h.at(450).await;
    h.observe(&Obj::new("u1").spec(json!({"changed": true})));
    h.at(1200).await;
    assert_eq!(h.log.call_times("t"), vec![300, 750, 950, 1150]);
}

#[tokio::test(start_paused = true)]
async fn idle_only_runs_once_per_quiet_period() {
    let t = timer("t").with(|s| s.schedule.idle = Some(ms(300)));
    let h = Harness::new(vec![t]);
    h.observe(&Obj::new("u1"));
    h.at(500).await;
    h.observe(&Obj::new("u1").spec(json!({"changed": true})));
    h.at(2000).await;
    assert_eq!(h.log.call_times("t"), vec![300, 800]);
}

#[tokio::test(start_paused = true)]
async fn jitter_is_drawn_for_every_run_from_the_seeded_source() {
    let t = timer("t")
        .with(|s| (s.schedule.interval, s.schedule.jitter) = (Some(secs(10)), Some(secs(1))));
    let h = Harness::new(vec![t]); // seed 1
    h.observe(&Obj::new("u1"));
    h.at(40_000).await;
    let mut rng = fastrand::Rng::with_seed(1);
    let mut expected = Vec::new();
    let mut at = 0;
    while expected.len() < 3 {
        at += rng.u64(0..=1000);
        expected.push(at);
        at += 10_000;
    }
    assert_eq!(h.log.call_times("t")[..3], expected[..]);
    assert!(
        expected
            .iter()
            .zip(&expected[1..])
            .all(|(a, b)| (10_000..=11_000).contains(&(b - a)))
    );
}

#[tokio::test(start_paused = true)]
async fn a_timer_between_runs_stops_at_once() {
    let t = timer("t").with(|s| s.schedule.interval = Some(secs(10)));
    let h = Harness::new(vec![t]);
    h.observe(&Obj::new("u1"));
    h.at(5000).await;
    h.observe(&Obj::new("u1").deleting());
    h.at(30_000).await;
    assert_eq!(h.log.call_times("t"), vec![0]);
    assert_eq!(h.finalizer("u1"), vec![(0, true), (5000, false)]);
}

#[tokio::test(start_paused = true)]
async fn a_timer_run_in_progress_goes_through_the_stop_ladder() {
    let t = timer("t")
        .with(|s| s.schedule.interval = Some(secs(10)))
        .with(|s| (s.cancellation_backoff, s.cancellation_timeout) = (Some(secs(1)), Some(secs(2))))
        .run(|ctx| async move {
            let _note = ctx.on_drop("dropped");
            std::future::pending::<()>().await;
            ok()
        });
    let h = Harness::new(vec![t]);
    h.observe(&Obj::new("u1"));
    h.at(3000).await;
    h.observe(&Obj::new("u1").deleting());
    h.at(30_000).await;
    let expected = "dropped: resource deleted, signalled, cancelled";
    assert_eq!(
        h.log.events("t"),
        vec![(0, "call r0".into()), (4000, expected.into())]
    );
    assert_eq!(h.finalizer("u1"), vec![(0, true), (4000, false)]);
}

#[tokio::test(start_paused = true)]
async fn timer_results_are_reported_after_each_run() {
    let t = timer("t")
        .with(|s| s.schedule.interval = Some(secs(5)))
        .run(|ctx| async move { ok_result(json!({"run": ctx.call})) });
    let h = Harness::new(vec![t]);
    h.observe(&Obj::new("u1"));
    h.at(12_000).await;
    let runs = vec![
        (0, Some(json!({"run": 0}))),
        (5000, Some(json!({"run": 1}))),
        (10_000, Some(json!({"run": 2}))),
    ];
    assert_eq!(h.results("t"), runs);
    assert_eq!(h.stats().fires, 3);
}

#[tokio::test(start_paused = true)]
async fn a_blocking_timer_runs_on_its_schedule() {
    let t = timer("t")
        .with(|s| s.schedule.interval = Some(secs(5)))
        .run_quick(|ctx| {
            assert!(!ctx.stopper().is_stopped());
            ok_result(json!(std::thread::current().name().map(str::to_owned)))
        });
    let h = Harness::new(vec![t]);
    h.observe(&Obj::new("u1"));
    h.at(12_000).await;
    assert_eq!(h.log.call_times("t"), vec![0, 5000, 10_000]);
    assert_eq!(h.results("t")[0].1, Some(json!("kopf:t")));
    h.settle(|h| h.stats().threads == 0).await;
}

#[tokio::test(start_paused = true)]
async fn a_blocking_timer_in_a_run_gets_its_flag_on_deletion() {
    let t = timer("t")
        .with(|s| s.schedule.interval = Some(secs(5)))
        .run_blocking(|ctx| {
            ctx.block_until_stopped();
            ok()
        });
    let h = Harness::new(vec![t]);
    h.observe(&Obj::new("u1"));
    h.at(2000).await;
    h.observe(&Obj::new("u1").deleting());
    h.settle(|h| h.finalizer("u1").len() == 2).await;
    assert_eq!(h.finalizer("u1"), vec![(0, true), (2000, false)]);
    // CANCELLED too, unless the thread returned before the ladder's first step.
    let flag = h.log.stopper("t", 0).reason();
    assert!(
        flag.contains(StopReason::RESOURCE_DELETED | StopReason::DONE),
        "{flag}"
    );
}

#[tokio::test(start_paused = true)]
async fn idle_only_counts_a_change_made_in_the_same_instant_after_a_run_started() {
    let t = timer("t").with(|s| s.schedule.idle = Some(ms(300)));
    let h = Harness::new(vec![t]);
    h.observe(&Obj::new("u1"));
    h.at(300).await;
    h.spin().await;
    assert_eq!(
        h.log.call_times("t"),
        vec![300],
        "the run started before the change"
    );
    h.observe(&Obj::new("u1").spec(json!({"changed": true})));
    h.at(2000).await;
    assert_eq!(h.log.call_times("t"), vec![300, 600]);
}

#[tokio::test(start_paused = true)]
async fn every_run_of_an_instance_logs_in_one_span_that_names_the_object() {
    let logs = Logs::capture();
    let ids = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&ids);
    let t = timer("t")
        .with(|s| s.schedule.interval = Some(secs(1)))
        .run(move |ctx| {
            seen.lock().unwrap().push(ctx.inv.span.id());
            let _entered = ctx.inv.span.enter();
            tracing::info!("tick from the handler");
            async { ok() }
        });
    let h = Harness::new(vec![t]);
    h.observe(&Obj::named("u1", "first"));
    h.at(2500).await;
    let ids = ids.lock().unwrap().clone();
    assert_eq!(ids.len(), 3, "{ids:?}");
    assert!(
        ids[0].is_some(),
        "a subscriber listens, so the span is real"
    );
    assert!(
        ids.iter().all(|id| *id == ids[0]),
        "one span per instance: {ids:?}"
    );
    let lines = logs.lines_with(&["tick from the handler"]);
    assert_eq!(lines.len(), 3, "{lines:?}");
    for needle in [
        r#"kind="timer""#,
        r#"handler="t""#,
        r#"name="first""#,
        r#"uid="u1""#,
    ] {
        assert!(
            lines.iter().all(|l| l.contains(needle)),
            "{needle} in {lines:?}"
        );
    }
}

/// The call instants (ms) of `t` on each object, by object.
fn calls_by_object(h: &Harness) -> Vec<(String, Vec<u64>)> {
    let mut by: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
    for rec in h.log.all() {
        if rec.handler == "t" && rec.what.starts_with("call r") {
            by.entry(rec.uid).or_default().push(rec.at);
        }
    }
    by.into_iter().collect()
}

/// Two objects 14 ms apart with a sharp 1 s timer (and a slack).
async fn two_phases(slack: Option<std::time::Duration>) -> Vec<(String, Vec<u64>)> {
    let t = timer("t").with(move |s| {
        (s.schedule.interval, s.schedule.sharp, s.slack) = (Some(secs(1)), true, slack);
    });
    let h = Harness::new(vec![t]);
    h.at(3).await;
    h.observe(&Obj::new("u1"));
    h.at(17).await;
    h.observe(&Obj::new("u2"));
    h.at(3100).await;
    calls_by_object(&h)
}

#[tokio::test(start_paused = true)]
async fn with_a_slack_a_timers_runs_wake_on_a_shared_grid_never_early() {
    // Without a slack (the positive control): on each object's own grid.
    let exact = two_phases(None).await;
    assert_eq!(
        exact,
        vec![
            ("u1".into(), vec![3, 1003, 2003, 3003]),
            ("u2".into(), vec![17, 1017, 2017, 3017]),
        ]
    );
    // With 50 ms: the first runs are not delayed; every later one wakes on a line of the
    // process's 50 ms grid (where the grid lies depends on the process, so the lines are
    // learnt from the first wake-up), never before its tick and at most 50 ms after it (to the millisecond).
    let slack = two_phases(Some(ms(50))).await;
    let (u1, u2) = (&slack[0].1, &slack[1].1);
    assert_eq!(
        (u1[0], u2[0], u1.len(), u2.len()),
        (3, 17, 4, 4),
        "{slack:?}"
    );
    let line = u1[1] % 50;
    for (calls, phase) in [(u1, 3), (u2, 17)] {
        for (k, &at) in calls.iter().enumerate().skip(1) {
            let tick = 1000 * k as u64 + phase;
            assert!(at >= tick && at <= tick + 50, "{slack:?}");
            assert_eq!(at % 50, line, "on the grid: {slack:?}");
        }
    }
}

/// Each fire gets the version the supervisor keeps: compacted, and read back whole; a new
/// version is compacted too.
#[tokio::test(start_paused = true)]
async fn a_timer_gets_the_kept_version_compacted_and_whole() {
    let t = timer("t")
        .with(|s| s.schedule.interval = Some(secs(1)))
        .run(|ctx| async move {
            let (object, live) = (&ctx.inv.object, ctx.inv.live.borrow().clone());
            let compacted = object.is_compacted() && live.is_compacted();
            ctx.note(format!("{compacted} {}", live.body()["spec"]));
            ok()
        });
    let h = Harness::new(vec![t]);
    h.observe(&Obj::new("u1").spec(json!({"size": 3, "name": "a"})));
    h.at(500).await;
    h.observe(&Obj::new("u1").spec(json!({"size": 4, "name": "a"})));
    h.at(1500).await;
    let notes: Vec<_> = (h.log.events("t").into_iter())
        .filter(|(_, what)| what.starts_with("true") || what.starts_with("false"))
        .collect();
    let expected = [
        (0, r#"true {"name":"a","size":3}"#.to_owned()),
        (1000, r#"true {"name":"a","size":4}"#.to_owned()),
    ];
    assert_eq!(notes, expected);
}
