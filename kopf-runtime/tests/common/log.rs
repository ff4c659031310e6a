//! The log of calls and notes, at paused-time instants.

use super::*;

/// One thing that happened, at a paused-time offset from the start of the test.
#[derive(Debug, Clone, PartialEq)]
pub struct Rec {
    pub at: u64,
    pub uid: String,
    pub handler: &'static str,
    pub what: String,
}

#[derive(Default)]
struct LogInner {
    recs: Vec<Rec>,
    in_flight: HashMap<(String, &'static str), usize>,
    max_in_flight: usize,
    calls: HashMap<(String, &'static str), u32>,
    stoppers: Vec<(String, &'static str, Stopper)>,
}

/// Records calls and notes; tracks invocations in flight per (object, handler).
#[derive(Clone)]
pub struct Log {
    pub t0: Instant,
    inner: Arc<Mutex<LogInner>>,
}

impl Log {
    pub fn new() -> Self {
        Self {
            t0: Instant::now(),
            inner: Arc::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, LogInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn now(&self) -> u64 {
        u64::try_from((Instant::now() - self.t0).as_millis()).unwrap()
    }

    pub fn push(&self, uid: &str, handler: &'static str, what: impl Into<String>) {
        let rec = Rec {
            at: self.now(),
            uid: uid.to_owned(),
            handler,
            what: what.into(),
        };
        self.lock().recs.push(rec);
    }

    pub fn all(&self) -> Vec<Rec> {
        self.lock().recs.clone()
    }

    /// `(ms, what)` of one handler's records, all objects.
    pub fn events(&self, handler: &str) -> Vec<(u64, String)> {
        self.lock()
            .recs
            .iter()
            .filter(|r| r.handler == handler)
            .map(|r| (r.at, r.what.clone()))
            .collect()
    }

    /// `(ms, retry)` of one handler's calls, all objects.
    pub fn calls(&self, handler: &str) -> Vec<(u64, u32)> {
        self.lock()
            .recs
            .iter()
            .filter(|r| r.handler == handler)
            .filter_map(|r| {
                r.what
                    .strip_prefix("call r")
                    .map(|n| (r.at, n.parse().unwrap()))
            })
            .collect()
    }

    /// Call instants (ms) of one handler.
    pub fn call_times(&self, handler: &str) -> Vec<u64> {
        self.calls(handler).into_iter().map(|(at, _)| at).collect()
    }

    /// The stop flag given to the `n`-th invocation of `handler` (all objects).
    pub fn stopper(&self, handler: &str, n: usize) -> Stopper {
        let inner = self.lock();
        let mut of_handler = inner.stoppers.iter().filter(|(_, h, _)| *h == handler);
        of_handler
            .nth(n)
            .map(|(_, _, s)| s.clone())
            .expect("no such invocation")
    }

    /// The most invocations of one (object, handler) ever in flight at once.
    pub fn max_in_flight(&self) -> usize {
        self.lock().max_in_flight
    }

    /// Invocations in flight now, all pairs.
    pub fn in_flight(&self) -> usize {
        self.lock().in_flight.values().sum()
    }

    pub(super) fn begin(
        &self,
        uid: &str,
        handler: &'static str,
        stopper: &Stopper,
    ) -> (InFlight, u32) {
        let mut inner = self.lock();
        inner
            .stoppers
            .push((uid.to_owned(), handler, stopper.clone()));
        let key = (uid.to_owned(), handler);
        let n = inner.in_flight.entry(key.clone()).or_default();
        *n += 1;
        let n = *n;
        inner.max_in_flight = inner.max_in_flight.max(n);
        let calls = inner.calls.entry(key.clone()).or_default();
        let call = *calls;
        *calls += 1;
        (
            InFlight {
                log: self.clone(),
                key,
            },
            call,
        )
    }
}

/// Counts an invocation as in flight until dropped (with its future or closure).
pub struct InFlight {
    log: Log,
    key: (String, &'static str),
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut inner = self.log.lock();
        if let Some(n) = inner.in_flight.get_mut(&self.key) {
            *n -= 1;
        }
    }
}
