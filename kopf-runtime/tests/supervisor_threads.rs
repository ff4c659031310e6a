//! At most one invocation per (object, handler), also when a blocking invocation is abandoned
//! while its thread runs on: a retry or a respawn waits for the thread to return.
//! Every instant is exact (paused tokio time, milliseconds from the start of the test).

mod common;

use common::*;
use kopf_runtime::StopReason;

/// A blocking handler whose first call ignores its stop flag until `gate` opens; later calls
/// return at once.
fn stuck_first(h: H, gate: &Gate) -> H {
    let g = gate.clone();
    h.run_stuck_then_quick(move |ctx| {
        if ctx.call == 0 {
            g.wait();
        }
        ok()
    })
}

/// Opens the gate at the current (paused) instant and waits until the thread has returned.
async fn release(h: &Harness, gate: &Gate) {
    gate.open();
    h.settle(|h| h.stats().threads == 0).await;
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_a_timeout_waits_for_the_abandoned_thread() {
    let gate = Gate::default();
    let d = daemon("d")
        .with(|s| (s.timeout, s.retries, s.backoff) = (Some(secs(3)), Some(5), secs(1)))
        .with(|s| s.cancellation_backoff = Some(secs(1)));
    let h = Harness::new(vec![stuck_first(d, &gate)]);
    h.observe(&Obj::new("u1"));
    // Timed out at 3000, abandoned at 4000; the retry is due at 5000 but must wait.
    h.at(7000).await;
    assert_eq!(
        h.log.call_times("d"),
        vec![0],
        "no second call beside the stuck one"
    );
    assert_eq!(h.failures("d"), vec![(4000, false)]);
    assert_eq!(h.stats().thread_waits, 1);
    assert_eq!(
        h.finalizer("u1"),
        vec![(0, true)],
        "the daemon still holds the object"
    );
    release(&h, &gate).await;
    h.settle(|h| h.log.call_times("d").len() == 2).await;
    assert_eq!(
        h.log.call_times("d"),
        vec![0, 7000],
        "retried the moment it returned"
    );
    assert_eq!(h.log.max_in_flight(), 1);
    h.at(9000).await;
    assert_eq!(h.stats().thread_waits, 1, "warned and counted once");
}

#[tokio::test(start_paused = true)]
async fn a_timer_never_overlaps_its_own_abandoned_run() {
    let gate = Gate::default();
    let t = timer("t")
        .with(|s| (s.schedule.interval, s.timeout) = (Some(secs(2)), Some(secs(1))))
        .with(|s| (s.backoff, s.cancellation_backoff) = (secs(1), Some(secs(1))));
    let h = Harness::new(vec![stuck_first(t, &gate)]);
    h.observe(&Obj::new("u1"));
    h.at(10_000).await;
    assert_eq!(
        h.log.call_times("t"),
        vec![0],
        "no run beside the stuck one"
    );
    release(&h, &gate).await;
    h.settle(|h| h.log.call_times("t").len() == 2).await;
    assert_eq!(h.log.call_times("t"), vec![0, 10_000]);
    h.at(13_000).await;
    assert_eq!(h.log.call_times("t"), vec![0, 10_000, 12_000]);
    assert_eq!(h.log.max_in_flight(), 1);
    assert_eq!(h.stats().thread_waits, 1);
}

#[tokio::test(start_paused = true)]
async fn a_filter_flapping_back_within_the_abandon_window_waits_for_the_thread() {
    let gate = Gate::default();
    let d = daemon("d").when_run_label().with(|s| {
        (s.cancellation_backoff, s.cancellation_timeout) = (Some(secs(1)), Some(secs(1)))
    });
    let h = Harness::new(vec![stuck_first(d, &gate)]);
    h.observe(&Obj::new("u1").label("run", "yes"));
    h.at(1000).await;
    h.observe(&Obj::new("u1").label("run", "no")); // signal 1000, cancel 2000, abandon 3000
    h.at(3500).await;
    assert_eq!(h.stats().daemons_abandoned, 1);
    assert_eq!(
        h.stats().thread_waits,
        0,
        "positive control: nothing waits yet"
    );
    h.observe(&Obj::new("u1").label("run", "yes").version(2));
    h.at(6000).await;
    assert_eq!(
        h.log.call_times("d"),
        vec![0],
        "no second thread for one UID and handler"
    );
    assert_eq!(h.stats().thread_waits, 1);
    assert_eq!((h.stats().daemons_running, h.stats().threads), (0, 1));
    // Released at the abandonment, held again for the coming respawn.
    assert_eq!(
        h.finalizer("u1"),
        vec![(0, true), (3000, false), (3500, true)]
    );
    release(&h, &gate).await;
    h.settle(|h| h.log.call_times("d").len() == 2).await;
    assert_eq!(h.log.call_times("d"), vec![0, 6000]);
    assert_eq!(h.log.max_in_flight(), 1);
    h.at(7000).await;
    assert_eq!(
        h.stats().daemons_running,
        0,
        "the second call returned: done"
    );
}

#[tokio::test(start_paused = true)]
async fn deletion_is_not_held_by_an_abandoned_thread_nor_does_a_later_version_double_it() {
    let gate = Gate::default();
    let d = daemon("d").with(|s| {
        (s.cancellation_backoff, s.cancellation_timeout) = (Some(secs(1)), Some(secs(1)))
    });
    let h = Harness::new(vec![stuck_first(d, &gate)]);
    h.observe(&Obj::new("u1").version(3));
    h.at(1000).await;
    h.observe(&Obj::new("u1").version(4).deleting());
    h.at(3500).await;
    let flag = h.log.stopper("d", 0);
    assert!(
        flag.reason()
            .contains(StopReason::RESOURCE_DELETED | StopReason::ABANDONED)
    );
    assert_eq!(
        h.finalizer("u1"),
        vec![(0, true), (3000, false)],
        "released when abandoned"
    );
    // The object left a label selector (not a deletion) and comes back while the thread runs.
    h.sup.gone_at("u1", "5");
    h.observe(&Obj::new("u1").version(6));
    h.at(6000).await;
    assert_eq!(h.log.call_times("d"), vec![0]);
    release(&h, &gate).await;
    h.settle(|h| h.log.call_times("d").len() == 2).await;
    assert_eq!(h.log.call_times("d"), vec![0, 6000]);
    assert_eq!(h.log.max_in_flight(), 1);
    // Gone for good: once its thread returned nothing of the object is kept.
    h.gone("u1");
    h.at(9000).await;
    assert_eq!(h.stats().objects, 0);
}
