use std::time::Duration;

use super::*;

fn version(rv: u64) -> Arc<ObjectState> {
    let meta = serde_json::json!({"name": "a", "uid": "u", "resourceVersion": rv.to_string()});
    Arc::new(ObjectState::from_json(serde_json::json!({ "metadata": meta })).expect("valid"))
}

fn rv(object: &ObjectState) -> u64 {
    object.resource_version_number().expect("a number")
}

#[test]
fn it_takes_a_fifth_of_a_watch_channel() {
    // The shared part, with the allocation's two counters; a watch channel's was 352 bytes.
    let bytes = std::mem::size_of::<Shared>() + 2 * std::mem::size_of::<usize>();
    assert!(bytes <= 80, "{bytes} bytes");
}

#[tokio::test(start_paused = true)]
async fn a_sent_version_wakes_a_waiting_watch_once() {
    let (sender, mut watch) = ObjectWatch::channel(version(1));
    assert_eq!(watch.has_changed(), Ok(false));
    let waiter = tokio::spawn(async move {
        watch.changed().await.expect("open");
        let seen = rv(&watch.borrow());
        (watch, seen)
    });
    tokio::task::yield_now().await;
    sender.send_replace(version(2));
    let (mut watch, seen) = waiter.await.expect("joins");
    assert_eq!(seen, 2);
    assert_eq!(watch.has_changed(), Ok(false));
    // Nothing new: it waits (the positive control is the send above).
    let wait = tokio::time::timeout(Duration::from_secs(5), watch.changed()).await;
    assert!(wait.is_err(), "no version came, yet it woke");
}

#[tokio::test(start_paused = true)]
async fn a_silent_replacement_wakes_no_one_but_is_read() {
    let (sender, mut watch) = ObjectWatch::channel(version(1));
    assert!(!sender.send_if_modified(|latest| {
        *latest = version(7);
        false
    }));
    assert_eq!(rv(&watch.borrow()), 7);
    assert_eq!(watch.has_changed(), Ok(false));
    let wait = tokio::time::timeout(Duration::from_secs(5), watch.changed()).await;
    assert!(wait.is_err());
    // The control: a modification that says so wakes it.
    assert!(sender.send_if_modified(|_| true));
    assert_eq!(watch.changed().await, Ok(()));
}

#[tokio::test(start_paused = true)]
async fn a_version_sent_while_no_one_waits_is_reported_by_the_next_wait() {
    let (sender, mut watch) = ObjectWatch::channel(version(1));
    // A wait dropped before anything came (cancelled), then a send.
    let dropped = tokio::time::timeout(Duration::from_secs(1), watch.changed()).await;
    assert!(dropped.is_err());
    sender.send_replace(version(2));
    assert_eq!(watch.has_changed(), Ok(true));
    let mut clone = watch.clone();
    assert_eq!(watch.changed().await, Ok(()));
    assert_eq!(rv(&watch.borrow_and_update()), 2);
    // A clone has seen what its original had seen when cloned.
    assert_eq!(clone.changed().await, Ok(()));
    clone.mark_unchanged();
    assert_eq!(clone.has_changed(), Ok(false));
}

#[tokio::test(start_paused = true)]
async fn closing_reports_unseen_versions_first() {
    let (sender, mut watch) = ObjectWatch::channel(version(1));
    let late = sender.subscribe();
    sender.send_replace(version(2));
    drop(sender);
    assert_eq!(watch.changed().await, Ok(()));
    assert_eq!(watch.changed().await, Err(Closed));
    assert_eq!(watch.has_changed(), Err(Closed));
    assert_eq!(rv(&watch.borrow()), 2, "the last version stays readable");
    let mut late = late;
    assert_eq!(late.changed().await, Ok(()));
    assert_eq!(late.changed().await, Err(Closed));
}

/// Hunts for a lost wake-up: a sender on one thread and a watch on another, each version
/// waited for before the next is sent, many times over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_wake_up_is_lost_between_threads() {
    const ROUNDS: u64 = 2_000;
    let (sender, mut watch) = ObjectWatch::channel(version(0));
    let (ack_tx, mut ack_rx) = tokio::sync::mpsc::unbounded_channel();
    let follower = tokio::spawn(async move {
        let mut last = 0;
        while watch.changed().await.is_ok() {
            last = rv(&watch.borrow());
            if ack_tx.send(last).is_err() {
                break;
            }
        }
        last
    });
    for round in 1..=ROUNDS {
        sender.send_replace(version(round));
        let acked = tokio::time::timeout(Duration::from_secs(10), ack_rx.recv()).await;
        assert_eq!(acked.ok().flatten(), Some(round), "round {round}");
    }
    drop(sender);
    assert_eq!(follower.await.expect("joins"), ROUNDS);
}
