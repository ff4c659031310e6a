//! Dedicated threads for blocking handlers, bounded by a shared cap.

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};
use tokio_util::sync::CancellationToken;

/// A cap on the dedicated threads that blocking (`fn`) handlers run on.
///
/// Every blocking invocation gets its own [`std::thread`] — never a shared pool that
/// long-lived daemons could exhaust. When `capacity` threads are busy, further blocking
/// invocations wait in a queue (with a warning and a counter in [`Stats`](crate::core::supervisor::Stats)) until one
/// ends; a queued invocation whose object goes away is dropped without running. Clones share
/// the same cap, so one pool can be given to several supervisors.
///
/// ```
/// use kopf_runtime::engine::BlockingPool;
/// let pool = BlockingPool::new(8);
/// assert_eq!(pool.capacity(), 8);
/// assert_eq!(pool.in_use(), 0);
/// assert_eq!(BlockingPool::default().capacity(), BlockingPool::DEFAULT_CAPACITY);
/// ```
#[derive(Clone)]
pub struct BlockingPool {
    semaphore: Arc<Semaphore>,
    capacity: usize,
}

impl fmt::Debug for BlockingPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockingPool")
            .field("capacity", &self.capacity)
            .field("in_use", &self.in_use())
            .finish()
    }
}

impl Default for BlockingPool {
    fn default() -> Self {
        Self::new(Self::DEFAULT_CAPACITY)
    }
}

impl BlockingPool {
    /// The default cap: 512 threads.
    pub const DEFAULT_CAPACITY: usize = 512;

    /// A pool of at most `capacity` dedicated threads (at least one).
    ///
    /// ```
    /// # use kopf_runtime::engine::BlockingPool;
    /// assert_eq!(BlockingPool::new(0).capacity(), 1);
    /// ```
    #[must_use]
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            semaphore: Arc::new(Semaphore::new(capacity)),
            capacity,
        }
    }

    /// The cap.
    ///
    /// ```
    /// # use kopf_runtime::engine::BlockingPool;
    /// assert_eq!(BlockingPool::new(3).capacity(), 3);
    /// ```
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The threads running now (also abandoned ones that have not returned yet).
    ///
    /// ```
    /// # use kopf_runtime::engine::BlockingPool;
    /// assert_eq!(BlockingPool::new(3).in_use(), 0);
    /// ```
    #[must_use]
    pub fn in_use(&self) -> usize {
        self.capacity - self.semaphore.available_permits()
    }

    /// A slot if one is free now.
    pub(crate) fn try_acquire(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.semaphore).try_acquire_owned().ok()
    }

    /// Waits for a free slot (first come, first served). `None` only if the pool is closed,
    /// which never happens.
    pub(crate) async fn acquire(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.semaphore).acquire_owned().await.ok()
    }
}

/// What a thread sends back: the job's value, or the panic payload.
pub(crate) type ThreadResult<R> = thread::Result<R>;

/// A thread started by [`spawn_thread`].
pub(crate) struct Thread<R> {
    /// The job's value, or its panic.
    pub(crate) result: oneshot::Receiver<ThreadResult<R>>,
    /// Cancelled once the job has returned (or panicked), before its result is sent: an
    /// abandoned thread's slot waits on it so that no second invocation overlaps it.
    pub(crate) ended: CancellationToken,
}

/// Holds a pool slot and a thread count for as long as the job runs; says when it ended.
struct ThreadGuard {
    threads: Arc<AtomicUsize>,
    ended: CancellationToken,
    _permit: OwnedSemaphorePermit,
}

impl Drop for ThreadGuard {
    fn drop(&mut self) {
        self.threads.fetch_sub(1, Ordering::SeqCst);
        self.ended.cancel();
    }
}

/// Runs `job` on a new thread named `name`, holding `permit` until the job returns; the result
/// (or the caught panic) arrives on the returned channel.
///
/// # Errors
/// The OS error if the thread cannot be started.
pub(crate) fn spawn_thread<R, F>(
    name: String,
    permit: OwnedSemaphorePermit,
    threads: &Arc<AtomicUsize>,
    job: F,
) -> std::io::Result<Thread<R>>
where
    R: Send + 'static,
    F: FnOnce() -> R + Send + 'static,
{
    let (tx, result) = oneshot::channel();
    let ended = CancellationToken::new();
    threads.fetch_add(1, Ordering::SeqCst);
    let guard = ThreadGuard {
        threads: Arc::clone(threads),
        ended: ended.clone(),
        _permit: permit,
    };
    thread::Builder::new().name(name).spawn(move || {
        let guard = guard;
        let result = catch_unwind(AssertUnwindSafe(job));
        // Ended before the result is seen: whoever sees the result finds the thread done.
        drop(guard);
        // The receiver is gone when the invocation was abandoned: the value is dropped.
        let _ = tx.send(result);
    })?;
    Ok(Thread { result, ended })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_thread_holds_its_slot_until_it_ends() {
        let pool = BlockingPool::new(1);
        let threads = Arc::new(AtomicUsize::new(0));
        let permit = pool.try_acquire().unwrap();
        assert!(pool.try_acquire().is_none());
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let thread = spawn_thread("t".into(), permit, &threads, move || {
            wait.recv().unwrap();
            7
        })
        .unwrap();
        assert_eq!((pool.in_use(), threads.load(Ordering::SeqCst)), (1, 1));
        assert!(!thread.ended.is_cancelled());
        go.send(()).unwrap();
        assert_eq!(thread.result.await.unwrap().unwrap(), 7);
        assert!(
            thread.ended.is_cancelled(),
            "ended before the result arrives"
        );
        let permit = pool.acquire().await.unwrap();
        assert_eq!(threads.load(Ordering::SeqCst), 0);
        drop(permit);
        assert_eq!(pool.in_use(), 0);
        assert!(format!("{pool:?}").contains("capacity: 1"));
    }

    #[test]
    fn the_pool_reports_its_capacity_and_use() {
        let pool = BlockingPool::new(3);
        let held = [pool.try_acquire().unwrap(), pool.try_acquire().unwrap()];
        assert_eq!((pool.capacity(), pool.in_use()), (3, 2));
        assert_eq!(pool.clone().in_use(), 2, "clones share the cap");
        drop(held);
        assert_eq!(pool.in_use(), 0);
        assert_eq!(BlockingPool::new(0).capacity(), 1);
    }

    #[tokio::test]
    async fn a_panic_is_caught_and_sent_back() {
        let pool = BlockingPool::new(2);
        let threads = Arc::new(AtomicUsize::new(0));
        let rx = spawn_thread("p".into(), pool.try_acquire().unwrap(), &threads, || {
            panic!("boom");
        });
        let payload = rx.unwrap().result.await.unwrap().unwrap_err();
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"boom"));
        assert!(pool.acquire().await.is_some());
    }
}
