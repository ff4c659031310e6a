//! The stop flag's tests: its waiters, reasons, validity and sleeps.

use std::time::Duration;

use super::*;

#[tokio::test(start_paused = true)]
async fn every_async_waiter_wakes_when_the_flag_is_set_later() {
    let s = Stopper::new();
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let s = s.clone();
            tokio::spawn(async move { s.stopped().await })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        waiters.iter().all(|w| !w.is_finished()),
        "woken before the stop"
    );
    s.stop(StopReason::RESOURCE_DELETED);
    for w in waiters {
        tokio::time::timeout(Duration::from_secs(1), w)
            .await
            .expect("a waiter was not woken")
            .expect("a waiter panicked");
    }
}

#[test]
fn a_token_follows_the_flag_whether_made_before_or_after_the_stop() {
    let s = Stopper::new();
    let before = s.token();
    assert!(!before.is_cancelled());
    s.stop(StopReason::OPERATOR_EXITING);
    assert!(before.is_cancelled());
    assert!(s.token().is_cancelled());
    let late = Stopper::new();
    late.stop(StopReason::DONE);
    assert!(late.token().is_cancelled());
}

/// The condvar is woken only for counted waiters: a stop racing a thread that is about to
/// block must still wake it (a miss would block the thread for the whole hour).
#[test]
fn a_blocked_thread_raced_against_the_stop_is_always_woken() {
    for _ in 0..200 {
        let s = Stopper::new();
        let s2 = s.clone();
        let t = std::thread::spawn(move || s2.wait(Duration::from_secs(3600)));
        s.stop(StopReason::OPERATOR_EXITING);
        assert!(t.join().expect("the waiting thread panicked"));
    }
    let s = Stopper::new();
    let s2 = s.clone();
    let t = std::thread::spawn(move || s2.wait(Duration::from_secs(3600)));
    while s.lock().blocked == 0 {
        std::thread::yield_now();
    }
    s.stop(StopReason::OPERATOR_EXITING);
    assert!(
        t.join().expect("the waiting thread panicked"),
        "woken while blocked"
    );
    assert_eq!(s.lock().blocked, 0);
}

/// A daemon's loop, `while !stopper.sleep(d).await { body }`, in a process frozen past its
/// validity: when it thaws, the sleep that ran out meanwhile reports the stop, and no body
/// runs, though nobody has set the flag yet. A validity that is renewed keeps it running.
#[tokio::test(start_paused = true)]
async fn a_sleep_that_ends_past_the_validity_reports_the_stop() {
    let start = Instant::now();
    let (validity, bound) = watch::channel(Some(start + Duration::from_secs(10)));
    let s = Stopper::new();
    s.bind_validity(|| bound);
    // Renewed while it runs: a sleep across the old deadline goes on.
    assert!(!s.sleep(Duration::from_secs(8)).await);
    validity.send_replace(Some(start + Duration::from_secs(20)));
    assert!(!s.sleep(Duration::from_secs(8)).await);
    assert!(!s.is_stopped());
    // Frozen for 30 s in the middle of a sleep (the clock jumps, the timer is overdue).
    let sleeping = tokio::spawn({
        let s = s.clone();
        async move { s.sleep(Duration::from_secs(1)).await }
    });
    tokio::task::yield_now().await;
    tokio::time::advance(Duration::from_secs(30)).await;
    assert!(sleeping.await.is_ok_and(|stopped| stopped));
    assert_eq!(s.reason(), StopReason::OPERATOR_PAUSING);
    assert!(s.token().is_cancelled());
    s.stopped().await;
    // The first set time is when the lapse was seen.
    assert_eq!(s.since(), Some(start + Duration::from_secs(46)));
}

#[tokio::test(start_paused = true)]
async fn every_check_of_a_lapsed_or_withdrawn_validity_reports_the_stop() {
    let now = Instant::now();
    for (until, stopped) in [
        (Some(now + Duration::from_secs(1)), false),
        (Some(now), true),
        (Some(now - Duration::from_secs(1)), true),
        (None, true),
    ] {
        let s = Stopper::new();
        let (_validity, bound) = watch::channel(until);
        s.bind_validity(|| bound);
        assert_eq!(s.is_stopped(), stopped, "{until:?}");
        assert_eq!(!s.reason().is_empty(), stopped, "{until:?}");
        assert_eq!(s.token().is_cancelled(), stopped, "{until:?}");
        assert_eq!(s.wait(Duration::ZERO), stopped, "{until:?}");
    }
    // Unbound: no validity, no lapse.
    assert!(!Stopper::new().is_stopped());
    // The first validity bound stays.
    let s = Stopper::new();
    let (_first, bound) = watch::channel(Some(now + Duration::from_secs(1)));
    s.bind_validity(|| bound);
    let (_second, bound) = watch::channel(None);
    s.bind_validity(|| bound);
    assert!(!s.is_stopped());
}

#[test]
fn a_token_raced_against_the_stop_is_always_cancelled() {
    for _ in 0..200 {
        let s = Stopper::new();
        let s2 = s.clone();
        let t = std::thread::spawn(move || s2.token());
        s.stop(StopReason::OPERATOR_EXITING);
        let token = t.join().expect("the token thread panicked");
        assert!(token.is_cancelled());
    }
}

#[test]
fn it_is_smaller_than_the_select_it_replaces() {
    let size = std::mem::size_of::<StopSleep<'static>>();
    let parts = std::mem::size_of::<Sleep>() + 16;
    assert_eq!(size, parts, "a Sleep and a waiter of two words");
    assert!(size < 248, "{size} bytes");
}

#[tokio::test(start_paused = true)]
async fn it_sleeps_to_the_deadline_when_not_stopped() {
    let stopper = Stopper::new();
    let start = Instant::now();
    assert!(!StopSleep::new(&stopper, start + Duration::from_secs(5)).await);
    assert_eq!(start.elapsed(), Duration::from_secs(5));
}

#[tokio::test(start_paused = true)]
async fn a_stop_ends_it_at_once() {
    let stopper = Stopper::new();
    let start = Instant::now();
    let stopping = stopper.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(2)).await;
        stopping.stop(StopReason::RESOURCE_DELETED);
    });
    assert!(StopSleep::new(&stopper, start + Duration::from_secs(3600)).await);
    assert_eq!(start.elapsed(), Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn a_stop_before_the_first_poll_is_not_lost() {
    let stopper = Stopper::new();
    let sleep = StopSleep::new(&stopper, Instant::now() + Duration::from_secs(3600));
    stopper.stop(StopReason::OPERATOR_EXITING);
    let start = Instant::now();
    assert!(sleep.await);
    assert_eq!(start.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_validity_that_lapsed_during_the_sleep_counts() {
    // A lapse sets the flag only when the flag is next checked, and notifies nobody: the
    // sleep checks the flag when its deadline passes.
    let stopper = Stopper::new();
    let start = Instant::now();
    let (_keep, validity) = tokio::sync::watch::channel(Some(start + Duration::from_secs(1)));
    stopper.bind_validity(|| validity);
    assert!(StopSleep::new(&stopper, start + Duration::from_secs(2)).await);
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    // The control: with a validity beyond the deadline, the same sleep ends unstopped.
    let stopper = Stopper::new();
    let (_keep, validity) = tokio::sync::watch::channel(Some(start + Duration::from_secs(9)));
    stopper.bind_validity(|| validity);
    assert!(!StopSleep::new(&stopper, start + Duration::from_secs(4)).await);
}

#[tokio::test(start_paused = true)]
async fn every_waiter_is_woken_whether_it_holds_the_slot_or_not() {
    let stopper = Stopper::new();
    let start = Instant::now();
    // Each waiter in a task of its own: a wake-up of one task must not stand in for another's.
    let waiter = |stopper: Stopper| {
        tokio::spawn(async move {
            let mut sleep =
                std::pin::pin!(StopSleep::new(&stopper, start + Duration::from_secs(3600)));
            // The slot is taken at the first poll.
            assert!(futures::poll!(sleep.as_mut()).is_pending());
            let slot = matches!(sleep.wait, StopWait::Slot(_));
            (slot, sleep.await, start.elapsed())
        })
    };
    let (first, second) = (waiter(stopper.clone()), waiter(stopper.clone()));
    tokio::time::sleep(Duration::from_secs(3)).await;
    stopper.stop(StopReason::RESOURCE_DELETED);
    let first = first.await.expect("the first waiter did not panic");
    let second = second.await.expect("the second waiter did not panic");
    assert_eq!(
        first,
        (true, true, Duration::from_secs(3)),
        "the slot's holder"
    );
    assert_eq!(
        second,
        (false, true, Duration::from_secs(3)),
        "the other waiter"
    );
}

#[tokio::test(start_paused = true)]
async fn a_dropped_waiter_frees_the_slot() {
    let stopper = Stopper::new();
    let deadline = Instant::now() + Duration::from_secs(1);
    {
        let mut first = std::pin::pin!(StopSleep::new(&stopper, deadline));
        assert!(
            matches!(first.wait, StopWait::Unpolled(_)),
            "nothing taken before a poll"
        );
        assert!(futures::poll!(first.as_mut()).is_pending());
        assert!(
            matches!(first.wait, StopWait::Slot(_)),
            "the first poll takes the slot"
        );
    }
    let mut again = std::pin::pin!(StopSleep::new(&stopper, deadline));
    assert!(futures::poll!(again.as_mut()).is_pending());
    assert!(
        matches!(again.wait, StopWait::Slot(_)),
        "the slot was freed"
    );
    assert!(!again.await);
}

/// A wait found done at its first poll takes nothing, so a later waiter gets the slot.
#[tokio::test(start_paused = true)]
async fn a_wait_done_at_once_takes_nothing() {
    let stopper = Stopper::new();
    stopper.stop(StopReason::DONE);
    let mut done = std::pin::pin!(stopper.reasons(|r| !r.is_empty()));
    assert!(futures::poll!(done.as_mut()).is_ready());
    assert!(matches!(done.wait, StopWait::Unpolled(_)));
}

#[tokio::test(start_paused = true)]
async fn reasons_wait_for_their_condition() {
    let stopper = Stopper::new();
    let stopping = stopper.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        stopping.stop(StopReason::SIGNALLED);
        tokio::time::sleep(Duration::from_secs(1)).await;
        stopping.stop(StopReason::ABANDONED);
    });
    let start = Instant::now();
    stopper.reasons(|r| r.contains(StopReason::ABANDONED)).await;
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(2),
        "not woken done by the first stop"
    );
}

/// A stop from another thread, racing the waiter's registration: never lost.
#[test]
fn a_stop_racing_the_slot_waiter_is_never_lost() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("a runtime");
    for _ in 0..500 {
        let stopper = Stopper::new();
        let stopping = stopper.clone();
        let waiter = runtime.spawn(async move { stopper.sleep(Duration::from_secs(3600)).await });
        let thread = std::thread::spawn(move || stopping.stop(StopReason::OPERATOR_EXITING));
        let stopped = runtime
            .block_on(async { tokio::time::timeout(Duration::from_secs(10), waiter).await })
            .expect("the waiter was woken")
            .expect("the waiter did not panic");
        assert!(stopped);
        thread.join().expect("the stopping thread did not panic");
    }
}
