//! The one way this crate takes a lock.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, also after a panic elsewhere poisoned it: every critical section in this crate
/// leaves its data consistent at each step (plain values, or updates made in one assignment), so
/// a panicking user callback never makes the supervisor or the operator unusable.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_is_taken_all_the_same() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let m2 = std::sync::Arc::clone(&m);
        let _ = std::thread::spawn(move || {
            let _guard = m2.lock();
            panic!("poisons the lock");
        })
        .join();
        assert!(m.is_poisoned());
        *lock(&m) += 1;
        assert_eq!(*lock(&m), 2);
    }
}
