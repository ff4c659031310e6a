//! The queues' workers: at most `slots` tasks, objects served first come first served, and no
//! object left waiting when the workers retire.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;

use super::queue::{Job, Queues, RunJob};
use crate::core::resource::ResourceInfo;

fn kind() -> ResourceInfo {
    ResourceInfo::new("example.com", "v1", "Thing", "things", true)
}

/// Records the objects whose jobs start, and holds every job until the gate lets it go.
struct Gated {
    gate: Semaphore,
    started: Mutex<Vec<Arc<str>>>,
    running: AtomicUsize,
    most_at_once: AtomicUsize,
}

impl RunJob for Gated {
    async fn run(&self, uid: &Arc<str>, _job: Job) {
        self.started.lock().expect("not poisoned").push(uid.clone());
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_at_once.fetch_max(now, Ordering::SeqCst);
        let _pass = self.gate.acquire().await.expect("never closed");
        self.running.fetch_sub(1, Ordering::SeqCst);
    }
}

fn uid(i: usize) -> Arc<str> {
    Arc::from(format!("uid-{i}"))
}

#[tokio::test]
async fn objects_beyond_the_slots_wait_in_a_list_and_run_in_arrival_order() {
    let slots = 8;
    let queues = Arc::new(Queues::with_slots(kind(), slots));
    let runner = Arc::new(Gated {
        gate: Semaphore::new(0),
        started: Mutex::default(),
        running: AtomicUsize::new(0),
        most_at_once: AtomicUsize::new(0),
    });
    for i in 0..100 {
        queues.push(&runner, uid(i), Job::Sync);
    }
    // A second job of a waiting object joins its queue: no second place in the list.
    queues.push(&runner, uid(50), Job::Sync);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while runner.running.load(Ordering::SeqCst) < slots {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the first {slots} objects did not all start: (workers, waiting) = {:?}",
            queues.workers_and_waiting()
        );
        tokio::task::yield_now().await;
    }
    assert_eq!(queues.workers_and_waiting(), (slots, 100 - slots));

    runner.gate.add_permits(1000);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    assert!(queues.drain(deadline).await, "every job ran");
    let started = runner.started.lock().expect("not poisoned").clone();
    let expected: Vec<Arc<str>> = (0..100).map(uid).collect();
    assert_eq!(
        started, expected,
        "one job each (the two Syncs are one), in order"
    );
    assert_eq!(runner.most_at_once.load(Ordering::SeqCst), slots);
    assert_eq!(queues.workers_and_waiting(), (0, 0));
}

/// Runs every job at once.
#[derive(Default)]
struct Counting {
    ran: AtomicUsize,
}

impl RunJob for Counting {
    async fn run(&self, _uid: &Arc<str>, _job: Job) {
        self.ran.fetch_add(1, Ordering::SeqCst);
    }
}

/// A worker that finds nobody waiting retires under the same lock: an object pushed in that
/// moment gets a new worker instead of waiting for one that is gone. The window is short, so
/// the test hunts for it: one slot, each object pushed while the last one's worker retires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_pushed_while_the_last_worker_retires_still_runs() {
    let queues = Arc::new(Queues::with_slots(kind(), 1));
    let runner = Arc::new(Counting::default());
    for i in 0..5_000 {
        queues.push(&runner, uid(i), Job::Sync);
        if i % 2 == 0 {
            continue; // every other object is pushed while the previous one runs
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while runner.ran.load(Ordering::SeqCst) < i + 1 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "object {i} was left waiting: {} ran, (workers, waiting) = {:?}",
                runner.ran.load(Ordering::SeqCst),
                queues.workers_and_waiting()
            );
            tokio::task::yield_now().await;
        }
    }
}
