//! Cron timers on paused time with a wall clock that follows it: occurrences, daylight-saving
//! days in two zones, jitter, retries bounded by the next occurrence, missed occurrences, the
//! record of the last run, and wall-clock jumps. Instants are milliseconds from the start.

mod common;

use common::*;
use kopf_runtime::HandlerError;
use kopf_runtime::engine::{CronSchedule, Effect, Missed, SupervisorConfig, WallClock};

const HOUR: u64 = 3_600_000;
const MINUTE: u64 = 60_000;

fn cron(id: &'static str, expr: &'static str, tz: &'static str, missed: Missed) -> H {
    timer(id).with(move |s| s.schedule.cron = Some(CronSchedule { expr, tz, missed }))
}

/// A harness whose wall clock reads `start` at the start of the test.
fn harness_at(start: &str, handlers: Vec<H>) -> (Harness, WallClock) {
    let clock = WallClock::following_tokio(start.parse().expect("a timestamp"));
    let config = SupervisorConfig {
        wall_clock: clock.clone(),
        ..config()
    };
    (Harness::with_config(handlers, config), clock)
}

/// The occurrences recorded in `handler`'s output patches, in order.
fn recorded(h: &Harness, key: &str) -> Vec<String> {
    h.effects()
        .into_iter()
        .filter_map(|(_, e)| match e {
            Effect::Output {
                patch: Some(patch), ..
            } => patch["metadata"]["annotations"][key]
                .as_str()
                .map(str::to_owned),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn runs_on_each_occurrence_and_records_it() {
    let t = cron("t", "* * * * * *", "UTC", Missed::Skip);
    let (h, _) = harness_at("2026-12-01T12:00:00.500Z", vec![t]);
    h.observe(&Obj::new("u1"));
    h.at(3600).await;
    assert_eq!(h.log.call_times("t"), vec![500, 1500, 2500, 3500]);
    assert_eq!(
        recorded(&h, "kopf.dev/finalizer.t.cron"),
        [
            "2026-12-01T12:00:01Z",
            "2026-12-01T12:00:02Z",
            "2026-12-01T12:00:03Z",
            "2026-12-01T12:00:04Z"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn berlin_spring_forward_and_fall_back() {
    // 2026-03-29 02:30 does not exist in Berlin: the fixed time runs at 03:00 CEST (01:00 UTC).
    let t = cron("t", "30 2 * * *", "Europe/Berlin", Missed::Skip);
    let (h, _) = harness_at("2026-03-28T23:00:00Z", vec![t]);
    h.observe(&Obj::new("u1"));
    h.at(2 * 24 * HOUR).await;
    assert_eq!(
        h.log.call_times("t"),
        vec![2 * HOUR, 25 * HOUR + 30 * MINUTE]
    );
    // 2026-10-25 02:30 happens twice in Berlin: the fixed time runs once, in the first pass.
    let t = cron("t", "30 2 * * *", "Europe/Berlin", Missed::Skip);
    let (h, _) = harness_at("2026-10-24T23:00:00Z", vec![t]);
    h.observe(&Obj::new("u1"));
    h.at(2 * 24 * HOUR).await;
    assert_eq!(
        h.log.call_times("t"),
        vec![HOUR + 30 * MINUTE, 26 * HOUR + 30 * MINUTE]
    );
}

#[tokio::test(start_paused = true)]
async fn new_york_wildcards_skip_the_gap_and_repeat_the_hour() {
    // 2026-03-08: 02:00 EST jumps to 03:00 EDT; */30 runs 01:30 EST, then 03:00 EDT.
    let t = cron("t", "*/30 * * * *", "America/New_York", Missed::Skip);
    let (h, _) = harness_at("2026-03-08T06:15:00Z", vec![t]);
    h.observe(&Obj::new("u1"));
    h.at(80 * MINUTE).await;
    assert_eq!(
        h.log.call_times("t"),
        vec![15 * MINUTE, 45 * MINUTE, 75 * MINUTE]
    );
    // 2026-11-01: 01:00-02:00 happens twice; */30 in hour 1 runs in both passes.
    let t = cron("t", "*/30 1 * * *", "America/New_York", Missed::Skip);
    let (h, _) = harness_at("2026-11-01T04:45:00Z", vec![t]);
    h.observe(&Obj::new("u1"));
    h.at(2 * HOUR).await;
    assert_eq!(
        h.log.call_times("t"),
        vec![15 * MINUTE, 45 * MINUTE, 75 * MINUTE, 105 * MINUTE]
    );
}

#[tokio::test(start_paused = true)]
async fn jitter_delays_each_run_within_its_bound() {
    let t =
        cron("t", "0 * * * * *", "UTC", Missed::Skip).with(|s| s.schedule.jitter = Some(secs(10)));
    let (h, _) = harness_at("2026-12-01T12:00:00Z", vec![t]);
    h.observe(&Obj::new("u1"));
    h.at(5 * MINUTE + 11_000).await;
    let calls = h.log.call_times("t");
    assert_eq!(calls.len(), 5);
    for (n, at) in (1..).zip(calls) {
        let occurrence = n * MINUTE;
        assert!((occurrence..=occurrence + 10_000).contains(&at), "{at}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_retry_runs_only_before_the_next_occurrence() {
    // Every 10 s; the first call fails asking for a retry in 3 s (it runs, within its
    // occurrence), the third asks for one in 15 s (past the next occurrence: dropped).
    let t = cron("t", "*/10 * * * * *", "UTC", Missed::Skip).run(|ctx| async move {
        match ctx.call {
            0 => Err(HandlerError::temporary("soon", secs(3))),
            2 => Err(HandlerError::temporary("late", secs(15))),
            _ => ok(),
        }
    });
    let logs = Logs::capture();
    let (h, _) = harness_at("2026-12-01T12:00:05Z", vec![t]);
    h.observe(&Obj::new("u1"));
    h.at(36_000).await;
    assert_eq!(
        h.log.calls("t"),
        vec![(5000, 0), (8000, 1), (15_000, 0), (25_000, 0), (35_000, 0)]
    );
    let dropped = logs.lines_with(&["would run into the next occurrence"]);
    assert_eq!(dropped.len(), 1, "{}", logs.text());
    // The occurrence with the dropped retry is recorded too: it is not run again.
    assert_eq!(recorded(&h, "kopf.dev/finalizer.t.cron").len(), 4);
}

/// An object created at 11:00 whose hourly timer last ran at `last` (if any); the wall clock
/// reads 12:30.
async fn missed(missed: Missed, last: Option<&str>, created: &str) -> Vec<u64> {
    let t = cron("t", "0 * * * *", "UTC", missed);
    let (h, _) = harness_at("2026-12-01T12:30:00Z", vec![t]);
    let mut obj = Obj::new("u1").created(created);
    if let Some(last) = last {
        obj = obj.annotation("kopf.dev/finalizer.t.cron", last);
    }
    h.observe(&obj);
    h.at(31 * MINUTE).await;
    h.log.call_times("t")
}

#[tokio::test(start_paused = true)]
async fn missed_occurrences_are_skipped_or_the_latest_runs_once() {
    let (earlier, latest) = (Some("2026-12-01T09:00:00Z"), Some("2026-12-01T12:00:00Z"));
    let created = "2026-12-01T08:00:00Z";
    assert_eq!(
        missed(Missed::Skip, earlier, created).await,
        vec![30 * MINUTE]
    );
    assert_eq!(
        missed(Missed::RunOnce, earlier, created).await,
        vec![0, 30 * MINUTE]
    );
    // The latest occurrence already ran: not again.
    assert_eq!(
        missed(Missed::RunOnce, latest, created).await,
        vec![30 * MINUTE]
    );
    // No record: an occurrence since the object's creation is missed, one before is not.
    assert_eq!(
        missed(Missed::RunOnce, None, "2026-12-01T11:50:00Z").await,
        vec![0, 30 * MINUTE]
    );
    assert_eq!(
        missed(Missed::RunOnce, None, "2026-12-01T12:10:00Z").await,
        vec![30 * MINUTE]
    );
}

#[tokio::test(start_paused = true)]
async fn a_restarted_instance_does_not_run_an_occurrence_again() {
    // The record on the object lags (the harness applies no patch): the process remembers.
    let t = cron("t", "0 * * * * *", "UTC", Missed::RunOnce).when_run_label();
    let (h, _) = harness_at("2026-12-01T12:00:30Z", vec![t]);
    let obj = Obj::new("u1")
        .label("run", "yes")
        .version(1)
        .created("2026-12-01T12:00:00Z");
    h.observe(&obj);
    h.at(31_000).await;
    h.observe(&obj.clone().label("run", "no").version(2));
    h.at(32_000).await;
    h.observe(&obj.clone().label("run", "yes").version(3));
    h.at(95_000).await;
    // Created 12:00:00 (an occurrence, not after the creation): first run 12:01, then 12:02.
    assert_eq!(h.log.call_times("t"), vec![30_000, 90_000]);
}

#[tokio::test(start_paused = true)]
async fn a_wall_clock_jump_is_noticed_and_nothing_runs_twice() {
    let t = cron("t", "* * * * *", "UTC", Missed::Skip);
    let logs = Logs::capture();
    let (h, clock) = harness_at("2026-12-01T12:00:30Z", vec![t]);
    h.observe(&Obj::new("u1"));
    h.at(40_000).await; // ran at 12:01 (30 s)
    clock.jump(jiff::SignedDuration::from_mins(-10)); // now 11:51:10
    h.at(12 * MINUTE).await;
    // 12:01 is not run again; 12:02 runs when the clock reads it again (10 min 50 s later).
    assert_eq!(h.log.call_times("t"), vec![30_000, 690_000]);
    assert_eq!(logs.lines_with(&["the wall clock jumped"]).len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_jump_forward_runs_the_latest_missed_occurrence_once() {
    let t = cron("t", "* * * * *", "UTC", Missed::RunOnce);
    let (h, clock) = harness_at("2026-12-01T12:00:30Z", vec![t]);
    let obj = Obj::new("u1").created("2026-12-01T12:00:00Z");
    h.observe(&obj);
    h.at(40_000).await; // ran at 12:01
    clock.jump(jiff::SignedDuration::from_hours(2)); // now 14:01:10
    h.at(5 * MINUTE).await;
    // Noticed when the nap ends (90 s, the clock reads 14:02:00): the latest missed occurrence
    // (14:02) runs once at once, then every minute again.
    assert_eq!(
        h.log.call_times("t"),
        vec![30_000, 90_000, 150_000, 210_000, 270_000]
    );
}

#[tokio::test(start_paused = true)]
async fn every_run_knows_its_occurrence_also_a_retry_and_a_late_one() {
    let t = cron("t", "0 * * * *", "UTC", Missed::RunOnce).run(|ctx| async move {
        let occurrence = ctx
            .inv
            .occurrence
            .map(|o| o.to_string())
            .unwrap_or_default();
        ctx.note(format!("for {occurrence}"));
        if ctx.call == 1 {
            return Err(HandlerError::temporary("again", secs(5)));
        }
        ok()
    });
    let (h, _) = harness_at("2026-12-01T12:30:00Z", vec![t]);
    h.observe(&Obj::new("u1").created("2026-12-01T11:00:00Z"));
    h.at(31 * MINUTE).await;
    let notes: Vec<(u64, String)> = h
        .log
        .events("t")
        .into_iter()
        .filter(|(_, what)| what.starts_with("for "))
        .collect();
    assert_eq!(
        notes,
        vec![
            (0, "for 2026-12-01T12:00:00Z".to_owned()), // caught up late
            (30 * MINUTE, "for 2026-12-01T13:00:00Z".to_owned()),
            (30 * MINUTE + 5000, "for 2026-12-01T13:00:00Z".to_owned()), // its retry
        ]
    );
}
