//! The stop ladder (signal -> cancellation_backoff -> cancel -> cancellation_timeout ->
//! abandon) for async and blocking daemons, with each combination of the two options.
//! The object is deleted at 1000 ms in every test.

mod common;

use common::*;
use kopf_runtime::StopReason;
use kopf_runtime::engine::HandlerSpec;

const DELETED: StopReason = StopReason::RESOURCE_DELETED;
const SIGNALLED: StopReason = StopReason::SIGNALLED;
const CANCELLED: StopReason = StopReason::CANCELLED;
const ABANDONED: StopReason = StopReason::ABANDONED;

fn ladder(backoff: Option<u64>, timeout: Option<u64>) -> impl FnOnce(&mut HandlerSpec) {
    move |s| {
        s.cancellation_backoff = backoff.map(secs);
        s.cancellation_timeout = timeout.map(secs);
        s.cancellation_polling = secs(10);
    }
}

/// An async daemon that ignores its flag: only cancellation ends it.
fn stubborn(b: Option<u64>, t: Option<u64>) -> H {
    daemon("d").with(ladder(b, t)).run(|ctx| async move {
        let _note = ctx.on_drop("dropped");
        std::future::pending::<()>().await;
        ok()
    })
}

/// A blocking daemon that ignores its flag until the gate opens.
fn stuck(b: Option<u64>, t: Option<u64>, gate: &Gate) -> H {
    let gate = gate.clone();
    daemon("d").with(ladder(b, t)).run_blocking(move |ctx| {
        gate.wait();
        ctx.note("released");
        ok()
    })
}

async fn delete_at_1000(h: &Harness) {
    h.observe(&Obj::new("u1"));
    h.at(1000).await;
    h.observe(&Obj::new("u1").deleting());
}

#[tokio::test(start_paused = true)]
async fn async_neither_option_cancels_right_after_the_flag() {
    let h = Harness::new(vec![stubborn(None, None)]);
    delete_at_1000(&h).await;
    h.at(10_000).await;
    assert_eq!(
        h.log.events("d")[1],
        (1000, "dropped: resource deleted, cancelled".into())
    );
    assert_eq!(h.finalizer("u1"), vec![(0, true), (1000, false)]);
    assert_eq!(h.stats().daemons_stopping, 0);
}

#[tokio::test(start_paused = true)]
async fn async_backoff_only_signals_then_cancels_after_the_backoff() {
    let h = Harness::new(vec![stubborn(Some(5), None)]);
    delete_at_1000(&h).await;
    h.at(5999).await;
    assert_eq!(h.log.stopper("d", 0).reason(), DELETED | SIGNALLED);
    assert_eq!(h.stats().daemons_stopping, 1);
    assert!(h.sup.holds_finalizer("u1"));
    h.at(10_000).await;
    assert_eq!(
        h.log.events("d")[1],
        (
            6000,
            "dropped: resource deleted, signalled, cancelled".into()
        )
    );
    assert_eq!(h.finalizer("u1"), vec![(0, true), (6000, false)]);
}

#[tokio::test(start_paused = true)]
async fn async_timeout_only_cancels_at_once() {
    let h = Harness::new(vec![stubborn(None, Some(3))]);
    delete_at_1000(&h).await;
    h.at(10_000).await;
    assert_eq!(
        h.log.events("d")[1],
        (1000, "dropped: resource deleted, cancelled".into())
    );
    assert_eq!(h.finalizer("u1"), vec![(0, true), (1000, false)]);
    assert_eq!(h.stats().daemons_abandoned, 0);
}

#[tokio::test(start_paused = true)]
async fn async_both_options_signal_then_cancel_after_the_backoff() {
    let h = Harness::new(vec![stubborn(Some(5), Some(3))]);
    delete_at_1000(&h).await;
    h.at(5999).await;
    assert_eq!(h.log.stopper("d", 0).reason(), DELETED | SIGNALLED);
    assert_eq!(h.stats().daemons_stopping, 1);
    h.at(10_000).await;
    assert_eq!(
        h.log.events("d")[1],
        (
            6000,
            "dropped: resource deleted, signalled, cancelled".into()
        )
    );
    assert_eq!(h.finalizer("u1"), vec![(0, true), (6000, false)]);
    assert_eq!(h.stats().daemons_stopping, 0);
}

#[tokio::test(start_paused = true)]
async fn an_async_daemon_that_exits_on_the_flag_ends_the_ladder_at_once() {
    let d = daemon("d")
        .with(ladder(Some(5), Some(3)))
        .run(|ctx| async move {
            ctx.until_stopped().await;
            ok()
        });
    let h = Harness::new(vec![d]);
    delete_at_1000(&h).await;
    h.at(10_000).await;
    assert_eq!(
        h.log.events("d")[1],
        (1000, "stopped: resource deleted".into())
    );
    assert_eq!(h.finalizer("u1"), vec![(0, true), (1000, false)]);
}

#[tokio::test(start_paused = true)]
async fn blocking_neither_option_waits_for_the_thread_however_long_logging_it() {
    let logs = Logs::capture();
    let gate = Gate::default();
    let h = Harness::new(vec![stuck(None, None, &gate)]);
    delete_at_1000(&h).await;
    h.at(1001).await;
    assert_eq!(h.log.stopper("d", 0).reason(), DELETED | CANCELLED);
    h.at(35_000).await;
    let lines = logs.lines_with(&["ns/obj-u1", "handler=\"d\"", "daemon is still exiting"]);
    assert_eq!(lines.len(), 3, "at 11, 21 and 31 s: {}", logs.text());
    h.at(100_000).await;
    assert_eq!(h.log.stopper("d", 0).reason(), DELETED | CANCELLED);
    assert_eq!((h.stats().daemons_stopping, h.stats().threads), (1, 1));
    assert_eq!(h.finalizer("u1"), vec![(0, true)]);
    assert!(h.sup.holds_finalizer("u1"));
    gate.open();
    h.settle(|h| h.finalizer("u1").len() == 2).await;
    assert_eq!(h.finalizer("u1"), vec![(0, true), (100_000, false)]);
    assert_eq!(h.log.events("d")[1], (100_000, "released".into()));
}

#[tokio::test(start_paused = true)]
async fn blocking_backoff_only_signals_cancels_and_then_waits() {
    let gate = Gate::default();
    let h = Harness::new(vec![stuck(Some(5), None, &gate)]);
    delete_at_1000(&h).await;
    h.at(5999).await;
    assert_eq!(h.log.stopper("d", 0).reason(), DELETED | SIGNALLED);
    h.at(6000).await;
    h.spin().await;
    assert_eq!(
        h.log.stopper("d", 0).reason(),
        DELETED | SIGNALLED | CANCELLED
    );
    h.at(100_000).await;
    assert_eq!(
        h.log.stopper("d", 0).reason(),
        DELETED | SIGNALLED | CANCELLED
    );
    assert_eq!(
        (h.stats().daemons_stopping, h.stats().daemons_abandoned),
        (1, 0)
    );
    gate.open();
    h.settle(|h| h.stats().threads == 0 && h.finalizer("u1").len() == 2)
        .await;
}

#[tokio::test(start_paused = true)]
async fn blocking_timeout_only_cancels_at_once_and_abandons_after_the_timeout() {
    let logs = Logs::capture();
    let gate = Gate::default();
    let h = Harness::new(vec![stuck(None, Some(3), &gate)]);
    delete_at_1000(&h).await;
    h.at(1001).await;
    assert_eq!(h.log.stopper("d", 0).reason(), DELETED | CANCELLED);
    assert!(h.sup.holds_finalizer("u1"), "a cancelled thread still runs");
    h.at(3999).await;
    assert_eq!(h.finalizer("u1"), vec![(0, true)]);
    h.at(10_000).await;
    let done = StopReason::DONE; // set when the instance ended, for a thread left behind
    assert_eq!(
        h.log.stopper("d", 0).reason(),
        DELETED | CANCELLED | ABANDONED | done
    );
    assert_eq!(h.finalizer("u1"), vec![(0, true), (4000, false)]);
    let s = h.stats();
    assert_eq!(
        (s.daemons_abandoned, s.daemons_stopping, s.threads),
        (1, 0, 1)
    );
    let warnings = logs.lines_with(&["WARN", "ns/obj-u1", "handler=\"d\"", "did not exit in time"]);
    assert_eq!(warnings.len(), 1, "{}", logs.text());
    gate.open();
    h.settle(|h| h.stats().threads == 0).await;
    assert_eq!(
        h.finalizer("u1").len(),
        2,
        "an abandoned thread's end changes nothing"
    );
}

#[tokio::test(start_paused = true)]
async fn blocking_both_options_signal_cancel_then_abandon() {
    let gate = Gate::default();
    let h = Harness::new(vec![stuck(Some(5), Some(3), &gate)]);
    delete_at_1000(&h).await;
    h.at(5999).await;
    assert_eq!(h.log.stopper("d", 0).reason(), DELETED | SIGNALLED);
    h.at(6000).await;
    h.spin().await;
    assert_eq!(
        h.log.stopper("d", 0).reason(),
        DELETED | SIGNALLED | CANCELLED
    );
    h.at(8999).await;
    assert_eq!(h.finalizer("u1"), vec![(0, true)]);
    h.at(20_000).await;
    assert_eq!(h.finalizer("u1"), vec![(0, true), (9000, false)]);
    assert_eq!(h.stats().daemons_abandoned, 1);
    gate.open();
    h.settle(|h| h.stats().threads == 0).await;
}

#[tokio::test(start_paused = true)]
async fn a_blocking_daemon_that_exits_on_the_flag_ends_the_ladder_at_once() {
    let d = daemon("d")
        .with(ladder(Some(5), Some(3)))
        .run_blocking(|ctx| {
            ctx.block_until_stopped();
            ok()
        });
    let h = Harness::new(vec![d]);
    delete_at_1000(&h).await;
    h.settle(|h| h.finalizer("u1").len() == 2).await;
    assert_eq!(h.finalizer("u1"), vec![(0, true), (1000, false)]);
    // The thread may see SIGNALLED too: the runner sets it in the same instant.
    let (at, what) = h.log.events("d")[1].clone();
    assert_eq!(at, 1000);
    assert!(what.starts_with("stopped: resource deleted"), "{what}");
    h.settle(|h| h.stats().threads == 0).await;
}

#[tokio::test(start_paused = true)]
async fn stop_reasons_combine_and_the_first_time_is_kept() {
    let d = stubborn(Some(100), None).when_run_label();
    let h = Harness::new(vec![d]);
    h.observe(&Obj::new("u1").label("run", "yes"));
    h.at(1000).await;
    h.observe(&Obj::new("u1").label("run", "no"));
    h.at(2000).await;
    h.observe(&Obj::new("u1").deleting());
    h.at(3000).await;
    let flag = h.log.stopper("d", 0);
    assert_eq!(
        flag.reason(),
        StopReason::FILTERS_MISMATCH | SIGNALLED | DELETED
    );
    assert_eq!(flag.since(), Some(h.log.t0 + ms(1000)));
}
