//! Hand-written `ErasedHandler`s built from closures.

use super::*;

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
type AsyncBody = Arc<dyn Fn(Ctx) -> BoxFuture<'static, Result<Output, HandlerError>> + Send + Sync>;
type SyncBody = Arc<dyn Fn(Ctx) -> Result<Output, HandlerError> + Send + Sync>;
type Filter = Arc<dyn Fn(&ObjectState) -> Result<bool, MatchError> + Send + Sync>;
type DelayFn = Arc<dyn Fn(&ObjectState) -> Option<Duration> + Send + Sync>;

#[derive(Clone)]
enum Body {
    Async(AsyncBody),
    /// `hold_from`: from which call on paused time is held while the body runs.
    Blocking {
        body: SyncBody,
        hold_from: Option<u32>,
    },
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

/// A change handler of `kind` (create, update, delete or resume).
pub fn change(kind: HandlerKind, id: &'static str) -> H {
    H::new(HandlerSpec::new(id, kind))
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
            hold_from: None,
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
            hold_from: Some(0),
        };
        self
    }

    /// A blocking body whose first call may wait in real time (for a gate, ignoring its flag)
    /// and whose later calls are quick (no paused time passes while they run).
    pub fn run_stuck_then_quick(
        mut self,
        f: impl Fn(Ctx) -> Result<Output, HandlerError> + Send + Sync + 'static,
    ) -> Self {
        self.spec.blocking = true;
        self.body = Body::Blocking {
            body: Arc::new(f),
            hold_from: Some(1),
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
        let (in_flight, call) = self.log.begin(&uid, handler, &inv.stopper);
        self.log.push(&uid, handler, format!("call r{}", inv.retry));
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
            Body::Blocking { body, hold_from } => {
                let body = Arc::clone(body);
                let rt = tokio::runtime::Handle::current();
                let hold = hold_from.is_some_and(|n| call >= n).then(|| {
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
