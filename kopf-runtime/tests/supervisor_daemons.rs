//! Daemons: start, initial delay, outcomes and retries, timeouts, panics, the live view.
//! Every instant is exact (paused tokio time, milliseconds from the start of the test).

mod common;

use common::*;
use kopf_runtime::engine::{ErrorsMode, SupervisorConfig};
use kopf_runtime::{HandlerError, StopReason};
use serde_json::json;

fn waiting_daemon(id: &'static str) -> H {
    daemon(id).run(|ctx| async move {
        ctx.until_stopped().await;
        ok()
    })
}

#[tokio::test(start_paused = true)]
async fn a_daemon_starts_when_its_object_first_matches_and_only_once() {
    let h = Harness::new(vec![waiting_daemon("d")]);
    h.at(1000).await;
    h.observe(&Obj::new("u1"));
    h.at(2000).await;
    h.observe(&Obj::new("u1").version(2));
    h.observe(&Obj::new("u1").version(3));
    h.at(3000).await;
    assert_eq!(h.log.calls("d"), vec![(1000, 0)]);
    assert_eq!(h.finalizer("u1"), vec![(1000, true)]);
    assert!(h.sup.holds_finalizer("u1"));
    let s = h.stats();
    assert_eq!(
        (s.objects, s.daemons_running, s.daemons_stopping, s.fires),
        (1, 1, 0, 1)
    );
}

#[tokio::test(start_paused = true)]
async fn deletion_stops_a_daemon_with_resource_deleted_and_releases_the_finalizer_at_once() {
    let h = Harness::new(vec![waiting_daemon("d")]);
    h.observe(&Obj::new("u1"));
    h.at(5000).await;
    h.observe(&Obj::new("u1").deleting());
    h.at(6000).await;
    assert_eq!(
        h.log.events("d"),
        vec![
            (0, "call r0".into()),
            (5000, "stopped: resource deleted".into())
        ]
    );
    assert_eq!(h.finalizer("u1"), vec![(0, true), (5000, false)]);
    assert!(!h.sup.holds_finalizer("u1"));
    assert_eq!(h.stats().daemons_running + h.stats().daemons_stopping, 0);
}

#[tokio::test(start_paused = true)]
async fn nothing_starts_for_a_deleting_object_or_on_gone() {
    let h = Harness::new(vec![waiting_daemon("d")]);
    h.observe(&Obj::new("u1").deleting());
    h.gone("u2"); // never seen: nothing happens
    h.at(1000).await;
    assert!(h.log.calls("d").is_empty());
    assert_eq!(h.finalizer("u1"), vec![(0, false)]);
    // A positive control: a live object does start.
    h.observe(&Obj::new("u3"));
    h.at(2000).await;
    assert_eq!(h.log.calls("d"), vec![(1000, 0)]);
}

#[tokio::test(start_paused = true)]
async fn initial_delay_comes_before_the_first_call() {
    let d = waiting_daemon("d").with(|s| s.initial_delay = Some(secs(10)));
    let h = Harness::new(vec![d]);
    h.at(2000).await;
    h.observe(&Obj::new("u1"));
    h.at(30_000).await;
    assert_eq!(h.log.calls("d"), vec![(12_000, 0)]);
    assert_eq!(h.finalizer("u1"), vec![(2000, true)]);
}

#[tokio::test(start_paused = true)]
async fn initial_delay_interrupted_by_the_stop_flag_never_calls_the_handler() {
    let d = waiting_daemon("d").with(|s| s.initial_delay = Some(secs(10)));
    let h = Harness::new(vec![d]);
    h.observe(&Obj::new("u1"));
    h.at(3000).await;
    h.observe(&Obj::new("u1").deleting());
    h.at(60_000).await;
    assert!(h.log.calls("d").is_empty());
    assert_eq!(h.finalizer("u1"), vec![(0, true), (3000, false)]);
    assert_eq!(h.stats().fires, 0);
}

#[tokio::test(start_paused = true)]
async fn an_initial_delay_function_is_evaluated_per_object() {
    let d = waiting_daemon("d").delay_fn(|o| {
        o.field(&["spec", "delay"])
            .and_then(|v| v.as_u64())
            .map(secs)
    });
    let h = Harness::new(vec![d]);
    h.observe(&Obj::new("u1").spec(json!({"delay": 4})));
    h.observe(&Obj::new("u2").spec(json!({"delay": 7})));
    h.observe(&Obj::new("u3"));
    h.at(10_000).await;
    let mut calls = h
        .log
        .all()
        .into_iter()
        .map(|r| (r.at, r.uid))
        .collect::<Vec<_>>();
    calls.sort();
    assert_eq!(
        calls,
        vec![(0, "u3".into()), (4000, "u1".into()), (7000, "u2".into())]
    );
}

#[tokio::test(start_paused = true)]
async fn a_returning_daemon_is_done_and_never_restarted_in_this_process() {
    let d = daemon("d").run(|ctx| async move {
        tokio::time::sleep(secs(2)).await;
        ctx.note("returning");
        ok_result(json!({"done": true}))
    });
    let h = Harness::new(vec![d]);
    h.observe(&Obj::new("u1"));
    h.at(5000).await;
    h.observe(&Obj::new("u1").version(2));
    h.at(10_000).await;
    assert_eq!(h.log.call_times("d"), vec![0]);
    assert_eq!(h.results("d"), vec![(2000, Some(json!({"done": true})))]);
    assert_eq!(h.finalizer("u1"), vec![(0, true), (2000, false)]);
    assert_eq!(h.log.stopper("d", 0).reason(), StopReason::DONE);
    assert!(!h.sup.holds_finalizer("u1"));
}

#[tokio::test(start_paused = true)]
async fn a_temporary_error_retries_in_the_same_instance_counting_retry() {
    let d = daemon("d").run(|ctx| async move {
        ctx.note(format!("started at {}", ctx.started_ms()));
        if ctx.call < 2 {
            return Err(HandlerError::temporary("not ready", secs(5)));
        }
        ctx.until_stopped().await;
        ok()
    });
    let h = Harness::new(vec![d]);
    h.at(1000).await;
    h.observe(&Obj::new("u1"));
    h.at(20_000).await;
    assert_eq!(h.log.calls("d"), vec![(1000, 0), (6000, 1), (11_000, 2)]);
    let started: Vec<_> = h
        .log
        .events("d")
        .into_iter()
        .filter(|(_, w)| w.starts_with("started"))
        .collect();
    assert_eq!(
        started,
        vec![
            (1000, "started at 1000".into()),
            (6000, "started at 1000".into()),
            (11_000, "started at 1000".into())
        ]
    );
    assert_eq!(h.failures("d"), vec![(1000, false), (6000, false)]);
    assert_eq!(h.failure_messages("d")[0], "not ready");
    assert_eq!(h.stats().failures, 2);
    assert!(h.sup.holds_finalizer("u1"));
}

#[tokio::test(start_paused = true)]
async fn a_zero_or_sub_second_delay_is_clamped_to_one_second() {
    let d = daemon("d").run(|ctx| async move {
        match ctx.call {
            0 => Err(HandlerError::temporary("zero", secs(0))),
            1 => Err(HandlerError::temporary("tiny", ms(10))),
            _ => ok(),
        }
    });
    let h = Harness::new(vec![d]);
    h.observe(&Obj::new("u1"));
    h.at(10_000).await;
    assert_eq!(h.log.calls("d"), vec![(0, 0), (1000, 1), (2000, 2)]);
}

#[tokio::test(start_paused = true)]
async fn an_arbitrary_error_retries_after_backoff() {
    let d = daemon("d")
        .with(|s| s.backoff = secs(7))
        .run(|ctx| async move {
            if ctx.call == 0 {
                Err(HandlerError::msg("boom"))
            } else {
                ok()
            }
        });
    let h = Harness::new(vec![d]);
    h.observe(&Obj::new("u1"));
    h.at(60_000).await;
    assert_eq!(h.log.calls("d"), vec![(0, 0), (7000, 1)]);
    assert_eq!(h.finalizer("u1"), vec![(0, true), (7000, false)]);
}

#[tokio::test(start_paused = true)]
async fn retries_n_means_n_attempts_in_total() {
    let d = daemon("d")
        .with(|s| (s.retries, s.backoff) = (Some(3), secs(2)))
        .run(|_| async { Err(HandlerError::msg("always")) });
    let h = Harness::new(vec![d]);
    h.observe(&Obj::new("u1"));
    h.at(100_000).await;
    assert_eq!(h.log.calls("d"), vec![(0, 0), (2000, 1), (4000, 2)]);
    assert_eq!(
        h.failures("d"),
        vec![(0, false), (2000, false), (4000, true)]
    );
    assert_eq!(h.finalizer("u1"), vec![(0, true), (4000, false)]);
    assert_eq!(h.stats().daemons_running, 0);
}

#[tokio::test(start_paused = true)]
async fn retry_timeout_ends_retrying_when_the_next_attempt_would_be_too_late() {
    let d = daemon("d")
        .with(|s| s.retry_timeout = Some(secs(10)))
        .run(|_| async { Err(HandlerError::temporary("later", secs(4))) });
    let h = Harness::new(vec![d]);
    h.observe(&Obj::new("u1"));
    h.at(100_000).await;
    assert_eq!(h.log.calls("d"), vec![(0, 0), (4000, 1), (8000, 2)]);
    assert_eq!(
        h.failures("d"),
        vec![(0, false), (4000, false), (8000, true)]
    );
}

#[tokio::test(start_paused = true)]
async fn a_permanent_error_ends_the_daemon_and_later_events_do_not_respawn_it() {
    let d = daemon("d").run(|_| async { Err(HandlerError::permanent("bad spec")) });
    let h = Harness::new(vec![d]);
    h.observe(&Obj::new("u1"));
    h.at(1000).await;
    h.observe(&Obj::new("u1").version(2).spec(json!({"fixed": true})));
    h.at(100_000).await;
    assert_eq!(h.log.calls("d"), vec![(0, 0)]);
    assert_eq!(h.failures("d"), vec![(0, true)]);
    assert_eq!(h.finalizer("u1"), vec![(0, true), (0, false)]);
}

#[tokio::test(start_paused = true)]
async fn errors_permanent_and_ignored_modes_end_the_daemon_at_once() {
    let perm = daemon("perm")
        .with(|s| s.errors = ErrorsMode::Permanent)
        .run(|_| async { Err(HandlerError::msg("x")) });
    let ign = daemon("ign")
        .with(|s| s.errors = ErrorsMode::Ignored)
        .run(|_| async { Err(HandlerError::msg("y")) });
    let h = Harness::new(vec![perm, ign]);
    h.observe(&Obj::new("u1"));
    h.at(100_000).await;
    assert_eq!(h.log.calls("perm"), vec![(0, 0)]);
    assert_eq!(h.log.calls("ign"), vec![(0, 0)]);
    assert_eq!(h.failures("perm"), vec![(0, true)]);
    assert_eq!(h.failures("ign"), vec![]);
    assert_eq!(h.stats().failures, 2);
    assert_eq!(h.finalizer("u1"), vec![(0, true), (0, false)]);
}

#[tokio::test(start_paused = true)]
async fn a_panic_is_caught_logged_and_treated_as_an_arbitrary_error() {
    let logs = Logs::capture();
    let d = daemon("d")
        .with(|s| s.backoff = secs(3))
        .run(|ctx| async move {
            if ctx.call == 0 {
                panic!("kaboom");
            }
            ok()
        });
    let h = Harness::new(vec![d]);
    h.observe(&Obj::new("u1"));
    h.at(10_000).await;
    assert_eq!(h.log.calls("d"), vec![(0, 0), (3000, 1)]);
    assert_eq!(
        h.failure_messages("d"),
        vec!["the handler panicked: kaboom".to_owned()]
    );
    assert_eq!(h.failures("d"), vec![(0, false)]);
    assert_eq!(
        logs.lines_with(&["ns/obj-u1", "handler=\"d\"", "daemon panicked: kaboom"])
            .len(),
        1,
        "{}",
        logs.text()
    );
}

#[tokio::test(start_paused = true)]
async fn a_panic_in_a_blocking_daemon_is_caught_too() {
    let d = daemon("d")
        .with(|s| (s.errors, s.backoff) = (ErrorsMode::Permanent, secs(1)))
        .run_quick(|_| panic!("thread kaboom"));
    let h = Harness::new(vec![d]);
    h.observe(&Obj::new("u1"));
    h.at(10_000).await;
    assert_eq!(h.log.calls("d"), vec![(0, 0)]);
    assert_eq!(
        h.failure_messages("d"),
        vec!["the handler panicked: thread kaboom".to_owned()]
    );
    assert_eq!(h.finalizer("u1"), vec![(0, true), (0, false)]);
    assert_eq!(h.stats().threads, 0);
}

#[tokio::test(start_paused = true)]
async fn a_handler_timeout_cancels_an_async_invocation_and_retries_after_backoff() {
    let d = daemon("d")
        .with(|s| (s.timeout, s.backoff) = (Some(secs(3)), secs(10)))
        .run(|ctx| async move {
            let _note = ctx.on_drop("dropped");
            std::future::pending::<()>().await;
            ok()
        });
    let h = Harness::new(vec![d]);
    h.observe(&Obj::new("u1"));
    h.at(14_000).await;
    assert_eq!(h.log.calls("d"), vec![(0, 0), (13_000, 1)]);
    assert_eq!(
        h.log.events("d")[1],
        (3000, "dropped: handler timeout, cancelled".to_owned())
    );
    assert_eq!(h.failures("d"), vec![(3000, false)]);
    assert_eq!(
        h.failure_messages("d"),
        vec!["the invocation ran past its timeout of 3s".to_owned()]
    );
    assert!(
        !h.log.stopper("d", 1).is_stopped(),
        "the retry gets a fresh flag"
    );
}

#[tokio::test(start_paused = true)]
async fn a_handler_timeout_goes_through_the_cancellation_backoff() {
    let d = daemon("d")
        .with(|s| {
            (s.timeout, s.backoff, s.retries) = (Some(secs(3)), secs(1), Some(1));
            s.cancellation_backoff = Some(secs(2));
        })
        .run(|ctx| async move {
            let _note = ctx.on_drop("dropped");
            std::future::pending::<()>().await;
            ok()
        });
    let h = Harness::new(vec![d]);
    h.observe(&Obj::new("u1"));
    h.at(4000).await;
    let flag = h.log.stopper("d", 0);
    assert_eq!(
        flag.reason(),
        StopReason::HANDLER_TIMEOUT | StopReason::SIGNALLED
    );
    h.at(10_000).await;
    assert_eq!(
        h.log.events("d")[1],
        (
            5000,
            "dropped: handler timeout, signalled, cancelled".into()
        )
    );
    assert_eq!(h.failures("d"), vec![(5000, true)]);
    assert_eq!(h.finalizer("u1"), vec![(0, true), (5000, false)]);
}

#[tokio::test(start_paused = true)]
async fn a_handler_timeout_abandons_a_blocking_invocation_that_ignores_its_flag() {
    let gate = Gate::default();
    let g = gate.clone();
    let d = daemon("d")
        .with(|s| (s.timeout, s.retries) = (Some(secs(3)), Some(1)))
        .with(|s| s.cancellation_backoff = Some(secs(1)))
        .run_blocking(move |_| {
            g.wait();
            ok()
        });
    let h = Harness::new(vec![d]);
    h.observe(&Obj::new("u1"));
    h.at(3500).await;
    assert_eq!(
        h.log.stopper("d", 0).reason(),
        StopReason::HANDLER_TIMEOUT | StopReason::SIGNALLED
    );
    h.at(10_000).await;
    let flag = h.log.stopper("d", 0);
    assert!(
        flag.reason()
            .contains(StopReason::CANCELLED | StopReason::ABANDONED)
    );
    assert_eq!(h.failures("d"), vec![(4000, true)]);
    assert_eq!(h.finalizer("u1"), vec![(0, true), (4000, false)]);
    let s = h.stats();
    assert_eq!(
        (s.threads, s.daemons_abandoned),
        (1, 0),
        "a timeout abandons the call, not the daemon"
    );
    gate.open();
    h.settle(|h| h.stats().threads == 0).await;
}

#[tokio::test(start_paused = true)]
async fn running_daemons_see_the_latest_version_through_the_live_channel() {
    let d = daemon("d").run(|ctx| async move {
        let mut live = ctx.inv.live.clone();
        ctx.note(format!(
            "first {}",
            ctx.inv.object.field(&["spec", "v"]).unwrap()
        ));
        while live.changed().await.is_ok() {
            let v = live.borrow_and_update().field(&["spec", "v"]).cloned();
            ctx.note(format!("saw {}", v.unwrap()));
            if ctx.stopper().is_stopped() {
                break;
            }
        }
        ok()
    });
    let h = Harness::new(vec![d]);
    h.observe(&Obj::new("u1").spec(json!({"v": 1})));
    h.at(1000).await;
    h.observe(&Obj::new("u1").spec(json!({"v": 2})));
    h.observe(&Obj::new("u1").spec(json!({"v": 3}))); // only the latest is seen
    h.at(2000).await;
    h.observe(&Obj::new("u1").spec(json!({"v": 4})).deleting());
    h.at(3000).await;
    let notes: Vec<_> = h.log.events("d").into_iter().skip(1).collect();
    assert_eq!(
        notes,
        vec![
            (0, "first 1".into()),
            (1000, "saw 3".into()),
            (2000, "saw 4".into())
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn an_invoke_error_is_a_failed_invocation_and_is_retried() {
    let d = daemon("d").with(|s| s.backoff = secs(2)).invoke_errors(1);
    let h = Harness::new(vec![d]);
    h.observe(&Obj::new("u1"));
    h.at(10_000).await;
    assert_eq!(h.log.calls("d"), vec![(0, 0), (2000, 1)]);
    let message = "cannot inject a parameter: no such service".to_owned();
    assert_eq!(h.failure_messages("d"), vec![message]);
    assert_eq!(h.failures("d"), vec![(0, false)]);
    assert_eq!(h.finalizer("u1"), vec![(0, true), (2000, false)]);
}

#[tokio::test(start_paused = true)]
async fn a_panic_in_invoke_is_caught_too() {
    let d = daemon("d").with(|s| s.backoff = secs(2)).invoke_panics(1);
    let h = Harness::new(vec![d]);
    h.observe(&Obj::new("u1"));
    h.at(10_000).await;
    assert_eq!(h.log.calls("d"), vec![(0, 0), (2000, 1)]);
    assert_eq!(
        h.failure_messages("d"),
        vec!["the handler panicked: a bug in invoke".to_owned()]
    );
}

#[tokio::test(start_paused = true)]
async fn a_patch_without_a_result_is_reported() {
    let d = daemon("d").run(|_| async {
        Ok(kopf_runtime::engine::Output {
            result: None,
            patch: Some(json!({"spec": {"seen": true}})),
        })
    });
    let h = Harness::new(vec![d]);
    h.observe(&Obj::new("u1"));
    h.at(1000).await;
    let outputs: Vec<_> = h
        .effects()
        .into_iter()
        .filter_map(|(at, e)| match e {
            kopf_runtime::engine::Effect::Output {
                handler: "d",
                result,
                patch,
                ..
            } => Some((at, result, patch)),
            _ => None,
        })
        .collect();
    assert_eq!(
        outputs,
        vec![(0, None, Some(json!({"spec": {"seen": true}})))]
    );
}

#[tokio::test(start_paused = true)]
async fn a_blocking_call_gets_a_thread_even_if_the_spec_says_async() {
    let d = daemon("d")
        .run_quick(|_| ok_result(json!(std::thread::current().name().map(str::to_owned))))
        .with(|s| s.blocking = false);
    let h = Harness::new(vec![d]);
    h.observe(&Obj::new("u1"));
    h.settle(|h| h.results("d").len() == 1).await;
    assert_eq!(h.results("d"), vec![(0, Some(json!("kopf:d")))]);
    h.settle(|h| h.stats().threads == 0).await;
}

#[tokio::test(start_paused = true)]
async fn a_retryable_failure_while_stopping_is_final() {
    let d = daemon("d").run(|ctx| async move {
        ctx.inv.stopper.stopped().await;
        Err(HandlerError::temporary("interrupted", secs(1)))
    });
    let h = Harness::new(vec![d]);
    h.observe(&Obj::new("u1"));
    h.at(1000).await;
    h.observe(&Obj::new("u1").deleting());
    h.at(10_000).await;
    assert_eq!(h.log.call_times("d"), vec![0]);
    assert_eq!(h.failures("d"), vec![(1000, true)]);
    assert_eq!(h.finalizer("u1"), vec![(0, true), (1000, false)]);
}

#[tokio::test(start_paused = true)]
async fn the_operator_s_default_backoff_applies_where_a_handler_sets_none() {
    let failing =
        |id: &'static str| daemon(id).run(|_| async { Err(HandlerError::msg("not yet")) });
    let config = SupervisorConfig {
        default_backoff: Some(secs(3)),
        ..common::config()
    };
    let own = failing("own").with(|s| (s.backoff, s.backoff_set) = (secs(5), true));
    let h = Harness::with_config(vec![failing("default"), own], config);
    h.observe(&Obj::new("u1"));
    h.at(10_500).await;
    assert_eq!(h.log.call_times("default"), vec![0, 3000, 6000, 9000]);
    assert_eq!(
        h.log.call_times("own"),
        vec![0, 5000, 10_000],
        "its own backoff wins"
    );
}

#[tokio::test(start_paused = true)]
async fn a_daemons_sleeps_with_a_slack_end_on_a_shared_grid() {
    let d = |slack| {
        daemon("d")
            .with(move |s| s.slack = slack)
            .run(|ctx| async move {
                while !ctx.stopper().sleep(ms(330)).await {
                    ctx.note("tick");
                }
                ok()
            })
    };
    let ticks = |h: &Harness| {
        let mut by: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
        for rec in h.log.all().into_iter().filter(|r| r.what == "tick") {
            by.entry(rec.uid).or_default().push(rec.at);
        }
        by.into_values().collect::<Vec<_>>()
    };
    for slack in [None, Some(ms(100))] {
        let h = Harness::new(vec![d(slack)]);
        h.observe(&Obj::new("u1"));
        h.at(40).await;
        h.observe(&Obj::new("u2"));
        h.at(1100).await;
        let ticks = ticks(&h);
        match slack {
            // The positive control: each on its own schedule, 330 ms apart.
            None => assert_eq!(ticks, vec![vec![330, 660, 990], vec![370, 700, 1030]]),
            Some(_) => {
                // Every sleep ends on a line of the same 100 ms grid: never early, less than
                // 100 ms late, so both objects' ticks fall on shared instants.
                let lines: std::collections::BTreeSet<u64> = ticks.concat().into_iter().collect();
                let first = *lines.first().unwrap();
                assert!(
                    lines.iter().all(|t| (t - first).is_multiple_of(100)),
                    "{ticks:?}"
                );
                assert!((330..=430).contains(&ticks[0][0]), "{ticks:?}");
                assert!((370..=470).contains(&ticks[1][0]), "{ticks:?}");
            }
        }
    }
}
