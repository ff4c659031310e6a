//! Test helpers for the supervisor: hand-written `ErasedHandler`s built from closures, a log of
//! calls at paused-time instants, object builders, and a harness that timestamps effects.
//!
//! Blocking handlers and paused time: tokio auto-advances a paused clock whenever the runtime
//! is idle, and it cannot see `std::thread`s. So a blocking body either
//! - is *quick* ([`H::run_quick`]): it never waits for a later paused-time event; the test
//!   handler holds tokio's auto-advance (through a `spawn_blocking` guard released when the
//!   dedicated thread exits, after it delivered its result), so no paused time passes while
//!   it runs; or
//! - *waits for the stop flag* ([`H::run_blocking`]): the test must be awake at the instant
//!   the flag is set and [`Harness::settle`] until the thread has reacted.
#![allow(dead_code, unreachable_pub, missing_docs, clippy::unwrap_used)]

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use kopf_runtime::{
    Call, Effect, ErasedHandler, HandlerError, HandlerKind, HandlerSpec, Invocation, MatchError,
    ObjectState, Output, Services, Stats, Stopper, Supervisor, SupervisorConfig,
};
use serde_json::{Value, json};
use tokio::time::Instant;

pub const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

pub fn ok() -> Result<Output, HandlerError> {
    Ok(Output::default())
}

pub fn ok_result(value: Value) -> Result<Output, HandlerError> {
    Ok(Output {
        result: Some(value),
        patch: None,
    })
}

// ===== the log =====

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

    fn begin(&self, uid: &str, handler: &'static str) -> (InFlight, u32) {
        let mut inner = self.lock();
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

// ===== test handlers =====

/// What a test body gets.
pub struct Ctx {
    pub inv: Invocation,
    pub log: Log,
    pub uid: String,
    pub handler: &'static str,
    /// How many calls of this (object, handler) came before this one.
    pub call: u32,
}

impl Ctx {
    pub fn note(&self, what: impl Into<String>) {
        self.log.push(&self.uid, self.handler, what);
    }

    pub fn stopper(&self) -> &Stopper {
        &self.inv.stopper
    }

    /// Milliseconds from the start of the test to `inv.started`.
    pub fn started_ms(&self) -> u64 {
        u64::try_from((self.inv.started - self.log.t0).as_millis()).unwrap()
    }

    /// A guard that notes `what` (with the flag's reasons) when dropped: shows when a future
    /// was cancelled.
    pub fn on_drop(&self, what: &'static str) -> DropNote {
        DropNote {
            log: self.log.clone(),
            uid: self.uid.clone(),
            handler: self.handler,
            what,
            stopper: self.inv.stopper.clone(),
        }
    }

    /// Blocking: waits (in real time, for the flag set by the runtime) and notes its reasons.
    pub fn block_until_stopped(&self) {
        while !self.inv.stopper.wait(Duration::from_secs(3600)) {}
        self.note(format!("stopped: {}", self.inv.stopper.reason()));
    }

    /// Async: waits for the flag and notes its reasons.
    pub async fn until_stopped(&self) {
        self.inv.stopper.stopped().await;
        self.note(format!("stopped: {}", self.inv.stopper.reason()));
    }
}

/// Notes something when dropped.
pub struct DropNote {
    log: Log,
    uid: String,
    handler: &'static str,
    what: &'static str,
    stopper: Stopper,
}

impl Drop for DropNote {
    fn drop(&mut self) {
        self.log.push(
            &self.uid,
            self.handler,
            format!("{}: {}", self.what, self.stopper.reason()),
        );
    }
}

/// A gate a blocking body can wait at (ignoring its stop flag) until the test opens it.
#[derive(Clone, Default)]
pub struct Gate(Arc<(Mutex<bool>, std::sync::Condvar)>);

impl Gate {
    pub fn wait(&self) {
        let (open, cond) = &*self.0;
        let guard = open.lock().unwrap();
        drop(cond.wait_while(guard, |open| !*open).unwrap());
    }

    pub fn open(&self) {
        let (open, cond) = &*self.0;
        *open.lock().unwrap() = true;
        cond.notify_all();
    }
}

/// Captures `tracing` output of the current thread (the paused test runtime's thread).
///
/// Tests run in parallel threads, and tracing caches per call site whether anyone listens; so
/// one global subscriber (installed once) listens to everything and writes each event into the
/// buffer of the thread it happened on, if that thread captures.
pub struct Logs {
    buf: Arc<Mutex<Vec<u8>>>,
}

thread_local! {
    static CAPTURE: RefCell<Option<Arc<Mutex<Vec<u8>>>>> = const { RefCell::new(None) };
}

struct LogWriter;

impl std::io::Write for LogWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        CAPTURE.with(|c| {
            if let Some(buf) = &*c.borrow() {
                buf.lock().unwrap().extend_from_slice(data);
            }
        });
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    pub fn capture() -> Self {
        static INSTALL: std::sync::Once = std::sync::Once::new();
        INSTALL.call_once(|| {
            let subscriber = tracing_subscriber::fmt()
                .with_writer(|| LogWriter)
                .with_ansi(false)
                .with_max_level(tracing::Level::DEBUG)
                .finish();
            tracing::subscriber::set_global_default(subscriber).unwrap();
        });
        let buf: Arc<Mutex<Vec<u8>>> = Arc::default();
        CAPTURE.with(|c| *c.borrow_mut() = Some(Arc::clone(&buf)));
        Self { buf }
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.buf.lock().unwrap()).into_owned()
    }

    /// Lines containing every one of `needles`.
    pub fn lines_with(&self, needles: &[&str]) -> Vec<String> {
        self.text()
            .lines()
            .filter(|l| needles.iter().all(|n| l.contains(n)))
            .map(str::to_owned)
            .collect()
    }
}

type AsyncBody = Arc<dyn Fn(Ctx) -> BoxFuture<'static, Result<Output, HandlerError>> + Send + Sync>;
type SyncBody = Arc<dyn Fn(Ctx) -> Result<Output, HandlerError> + Send + Sync>;
type Filter = Arc<dyn Fn(&ObjectState) -> Result<bool, MatchError> + Send + Sync>;
type DelayFn = Arc<dyn Fn(&ObjectState) -> Option<Duration> + Send + Sync>;

#[derive(Clone)]
enum Body {
    Async(AsyncBody),
    Blocking { body: SyncBody, hold_time: bool },
}

/// A test handler under construction.
#[derive(Clone)]
pub struct H {
    pub spec: HandlerSpec,
    filter: Filter,
    delay_fn: Option<DelayFn>,
    body: Body,
    fault: Option<Fault>,
}

/// `invoke()` itself fails for the first `calls` calls of each object (as an injection error
/// would), or panics.
#[derive(Clone, Copy)]
struct Fault {
    calls: u32,
    panic: bool,
}

pub fn daemon(id: &'static str) -> H {
    H::new(HandlerSpec::new(id, HandlerKind::Daemon))
}

pub fn timer(id: &'static str) -> H {
    H::new(HandlerSpec::new(id, HandlerKind::Timer))
}

impl H {
    fn new(spec: HandlerSpec) -> Self {
        Self {
            spec,
            filter: Arc::new(|_| Ok(true)),
            delay_fn: None,
            body: Body::Async(Arc::new(|_| Box::pin(async { ok() }))),
            fault: None,
        }
    }

    pub fn with(mut self, f: impl FnOnce(&mut HandlerSpec)) -> Self {
        f(&mut self.spec);
        self
    }

    pub fn when(mut self, f: impl Fn(&ObjectState) -> bool + Send + Sync + 'static) -> Self {
        self.filter = Arc::new(move |o| Ok(f(o)));
        self
    }

    /// Matches objects with the label `run=yes`.
    pub fn when_run_label(self) -> Self {
        self.when(|o| o.label("run") == Some("yes"))
    }

    pub fn filter(
        mut self,
        f: impl Fn(&ObjectState) -> Result<bool, MatchError> + Send + Sync + 'static,
    ) -> Self {
        self.filter = Arc::new(f);
        self
    }

    pub fn delay_fn(
        mut self,
        f: impl Fn(&ObjectState) -> Option<Duration> + Send + Sync + 'static,
    ) -> Self {
        self.delay_fn = Some(Arc::new(f));
        self
    }

    /// `invoke()` returns an error for the first `calls` calls of each object.
    pub fn invoke_errors(mut self, calls: u32) -> Self {
        self.fault = Some(Fault {
            calls,
            panic: false,
        });
        self
    }

    /// `invoke()` panics for the first `calls` calls of each object.
    pub fn invoke_panics(mut self, calls: u32) -> Self {
        self.fault = Some(Fault { calls, panic: true });
        self
    }

    pub fn run<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Ctx) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Output, HandlerError>> + Send + 'static,
    {
        self.body = Body::Async(Arc::new(move |ctx| Box::pin(f(ctx))));
        self
    }

    /// A blocking body that may wait for the stop flag (see the module docs).
    pub fn run_blocking(
        mut self,
        f: impl Fn(Ctx) -> Result<Output, HandlerError> + Send + Sync + 'static,
    ) -> Self {
        self.spec.blocking = true;
        self.body = Body::Blocking {
            body: Arc::new(f),
            hold_time: false,
        };
        self
    }

    /// A quick blocking body: no paused time passes while it runs (see the module docs).
    pub fn run_quick(
        mut self,
        f: impl Fn(Ctx) -> Result<Output, HandlerError> + Send + Sync + 'static,
    ) -> Self {
        self.spec.blocking = true;
        self.body = Body::Blocking {
            body: Arc::new(f),
            hold_time: true,
        };
        self
    }

    pub fn build(self, log: &Log) -> Arc<dyn ErasedHandler> {
        Arc::new(TestHandler {
            spec: Box::leak(Box::new(self.spec)),
            filter: self.filter,
            delay_fn: self.delay_fn,
            body: self.body,
            fault: self.fault,
            log: log.clone(),
        })
    }
}

struct TestHandler {
    spec: &'static HandlerSpec,
    filter: Filter,
    delay_fn: Option<DelayFn>,
    body: Body,
    fault: Option<Fault>,
    log: Log,
}

thread_local! {
    /// Dropped when a dedicated thread exits: releases the paused-clock hold.
    static HOLD: RefCell<Option<std::sync::mpsc::Sender<()>>> = const { RefCell::new(None) };
}

impl ErasedHandler for TestHandler {
    fn spec(&self) -> &'static HandlerSpec {
        self.spec
    }

    fn matches(&self, object: &ObjectState) -> Result<bool, MatchError> {
        (self.filter)(object)
    }

    fn initial_delay(&self, object: &ObjectState) -> Option<Duration> {
        match &self.delay_fn {
            Some(f) => f(object),
            None => self.spec.initial_delay,
        }
    }

    fn invoke(&self, inv: Invocation) -> Result<Call, HandlerError> {
        let uid = inv.object.reference().uid.to_string();
        let handler = self.spec.id;
        let (in_flight, call) = self.log.begin(&uid, handler);
        self.log.push(&uid, handler, format!("call r{}", inv.retry));
        self.log
            .lock()
            .stoppers
            .push((uid.clone(), handler, inv.stopper.clone()));
        if let Some(fault) = self.fault.filter(|f| call < f.calls) {
            assert!(!fault.panic, "a bug in invoke");
            return Err(HandlerError::msg(
                "cannot inject a parameter: no such service",
            ));
        }
        let ctx = Ctx {
            inv,
            log: self.log.clone(),
            uid,
            handler,
            call,
        };
        Ok(match &self.body {
            Body::Async(body) => {
                let fut = body(ctx);
                Call::Async(Box::pin(async move {
                    let _in_flight = in_flight;
                    fut.await
                }))
            }
            Body::Blocking { body, hold_time } => {
                let body = Arc::clone(body);
                let rt = tokio::runtime::Handle::current();
                let hold = hold_time.then(|| {
                    let (tx, rx) = std::sync::mpsc::channel::<()>();
                    drop(tokio::task::spawn_blocking(move || rx.recv()));
                    tx
                });
                Call::Blocking(Box::new(move || {
                    let _in_flight = in_flight;
                    HOLD.with(|h| *h.borrow_mut() = hold);
                    let _rt = rt.enter();
                    body(ctx)
                }))
            }
        })
    }
}

// ===== objects =====

/// An object builder: `Obj::new("u1").label("run", "yes").spec(json!({..})).build()`.
#[derive(Clone)]
pub struct Obj {
    body: Value,
}

impl Obj {
    pub fn new(uid: &str) -> Self {
        Self::named(uid, &format!("obj-{uid}"))
    }

    pub fn named(uid: &str, name: &str) -> Self {
        Self {
            body: json!({
                "apiVersion": "kopf.dev/v1", "kind": "KopfExample",
                "metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": "1"},
                "spec": {},
            }),
        }
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.body["metadata"]["labels"][key] = json!(value);
        self
    }

    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.body["metadata"]["annotations"][key] = json!(value);
        self
    }

    pub fn spec(mut self, spec: Value) -> Self {
        self.body["spec"] = spec;
        self
    }

    pub fn status(mut self, status: Value) -> Self {
        self.body["status"] = status;
        self
    }

    pub fn version(mut self, rv: u64) -> Self {
        self.body["metadata"]["resourceVersion"] = json!(rv.to_string());
        self
    }

    pub fn finalizer(mut self, name: &str) -> Self {
        self.body["metadata"]["finalizers"] = json!([name]);
        self
    }

    pub fn deleting(mut self) -> Self {
        self.body["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        self
    }

    pub fn build(&self) -> ObjectState {
        ObjectState::from_json(self.body.clone()).unwrap()
    }
}

// ===== the harness =====

/// A supervisor with its log, and every effect timestamped as it arrives.
pub struct Harness {
    pub sup: Supervisor,
    pub log: Log,
    fx: Arc<Mutex<Vec<(u64, Effect)>>>,
}

pub fn config() -> SupervisorConfig {
    SupervisorConfig {
        seed: Some(1),
        ..SupervisorConfig::default()
    }
}

impl Harness {
    pub fn new(handlers: Vec<H>) -> Self {
        Self::with_config(handlers, config())
    }

    pub fn with_config(handlers: Vec<H>, config: SupervisorConfig) -> Self {
        let log = Log::new();
        let handlers = handlers.into_iter().map(|h| h.build(&log)).collect();
        let (sup, mut rx) = Supervisor::new(handlers, Services::default(), config);
        let fx: Arc<Mutex<Vec<(u64, Effect)>>> = Arc::default();
        let (sink, clock) = (Arc::clone(&fx), log.clone());
        tokio::spawn(async move {
            while let Some(effect) = rx.recv().await {
                sink.lock().unwrap().push((clock.now(), effect));
            }
        });
        Self { sup, log, fx }
    }

    pub fn observe(&self, obj: &Obj) {
        self.sup.observe(obj.build());
    }

    pub fn gone(&self, uid: &str) {
        self.sup.gone(uid);
    }

    /// Sleeps until `ms` after the start of the test.
    pub async fn at(&self, ms: u64) {
        tokio::time::sleep_until(self.log.t0 + Duration::from_millis(ms)).await;
    }

    pub fn now(&self) -> u64 {
        self.log.now()
    }

    pub fn stats(&self) -> Stats {
        self.sup.stats()
    }

    /// Lets ready tasks run without letting paused time pass, until `cond` holds (a real-time
    /// bound of 10 s turns a hang into a failure).
    pub async fn settle(&self, cond: impl Fn(&Self) -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !cond(self) {
            assert!(
                std::time::Instant::now() < deadline,
                "settle: condition never held"
            );
            tokio::task::yield_now().await;
        }
    }

    /// Lets ready tasks run (a few rounds) without letting paused time pass.
    pub async fn spin(&self) {
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
    }

    pub fn effects(&self) -> Vec<(u64, Effect)> {
        self.fx.lock().unwrap().clone()
    }

    /// `(ms, hold)` of the finalizer effects of one object.
    pub fn finalizer(&self, uid: &str) -> Vec<(u64, bool)> {
        self.effects()
            .into_iter()
            .filter_map(|(at, e)| match e {
                Effect::Finalizer { object, hold } if &*object.uid == uid => Some((at, hold)),
                _ => None,
            })
            .collect()
    }

    /// `(ms, result)` of one handler's outputs.
    pub fn results(&self, handler: &str) -> Vec<(u64, Option<Value>)> {
        self.effects()
            .into_iter()
            .filter_map(|(at, e)| match e {
                Effect::Output {
                    handler: h, result, ..
                } if h == handler => Some((at, result)),
                _ => None,
            })
            .collect()
    }

    /// `(ms, fatal)` of one handler's failures.
    pub fn failures(&self, handler: &str) -> Vec<(u64, bool)> {
        self.effects()
            .into_iter()
            .filter_map(|(at, e)| match e {
                Effect::Failure {
                    handler: h, fatal, ..
                } if h == handler => Some((at, fatal)),
                _ => None,
            })
            .collect()
    }

    /// Failure messages of one handler.
    pub fn failure_messages(&self, handler: &str) -> Vec<String> {
        self.effects()
            .into_iter()
            .filter_map(|(_, e)| match e {
                Effect::Failure {
                    handler: h,
                    message,
                    ..
                } if h == handler => Some(message),
                _ => None,
            })
            .collect()
    }
}
