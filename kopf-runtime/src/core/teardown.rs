//! Freeing big structures off the thread that lets go of them, a moment later.
//!
//! Freeing what an operator keeps per object (JSON bodies, records, reports) costs microseconds
//! per object in the allocator, a good part of a second at tens of thousands of objects, all of
//! it after the last daemon stopped, when the process is about to exit and return the memory
//! anyway. [`drop_in_background`] hands such a structure to a thread of its own that waits
//! [`GRACE`] before freeing it: a process that exits meanwhile neither waits for the freeing
//! nor lends it a core (on a small machine, the exit would be slowed down by it), and a process
//! that runs on (an operator embedded in a longer-lived program) gets the memory back a moment
//! later: nothing leaks. Values with side effects in their `Drop` (user memos) are dropped
//! there too, so an exiting process may not run those; as at any process exit, nothing durable
//! should depend on them.

use std::time::Duration;

/// How long the memory is kept before it is freed (an exit usually follows within
/// milliseconds).
pub(crate) const GRACE: Duration = Duration::from_secs(1);

/// From how many objects a structure is worth a thread of its own (below, it is freed in
/// place: a thread costs tens of microseconds, and tests see their values dropped at once).
pub(crate) const IN_BACKGROUND_FROM: usize = 1024;

/// Drops `value` after [`GRACE`] on a new thread, inside the caller's tokio runtime if any (a
/// `Drop` may need one); in place if no thread can be started.
pub(crate) fn drop_in_background<T: Send + 'static>(value: T) {
    drop_after(value, GRACE);
}

fn drop_after<T: Send + 'static>(value: T, grace: Duration) {
    let runtime = tokio::runtime::Handle::try_current().ok();
    let spawned = std::thread::Builder::new()
        .name("kopf-teardown".to_owned())
        .spawn(move || {
            std::thread::sleep(grace);
            let _entered = runtime.as_ref().map(tokio::runtime::Handle::enter);
            drop(value);
        });
    // Not started: the closure, with the value, was dropped here already.
    drop(spawned);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// Reports where it was dropped.
    struct Witness(mpsc::Sender<(std::thread::ThreadId, bool)>);

    impl Drop for Witness {
        fn drop(&mut self) {
            let in_runtime = tokio::runtime::Handle::try_current().is_ok();
            let _ = self.0.send((std::thread::current().id(), in_runtime));
        }
    }

    #[tokio::test]
    async fn a_value_is_dropped_on_another_thread_inside_the_runtime() {
        let (tx, rx) = mpsc::channel();
        drop_after(Witness(tx), Duration::ZERO);
        let (thread, in_runtime) = rx.recv_timeout(Duration::from_secs(10)).expect("dropped");
        assert_ne!(thread, std::thread::current().id());
        assert!(in_runtime, "a Drop that needs the runtime finds it");
    }

    #[test]
    fn outside_a_runtime_too() {
        let (tx, rx) = mpsc::channel();
        let sent = std::time::Instant::now();
        drop_in_background(Witness(tx));
        let (_, in_runtime) = rx.recv_timeout(Duration::from_secs(10)).expect("dropped");
        assert!(!in_runtime);
        assert!(sent.elapsed() >= GRACE, "kept for the grace period");
    }
}
