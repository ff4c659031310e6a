//! One instance of a handler for one object: its task, its context, and how it reports.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use super::attempt::Instance;
use super::meter::{HandlerMeter, InvocationResult};
use super::state::{InstanceShared, ObjectEntry, ObjectShared, SupervisorCore};
use super::work::panic_message;
use crate::core::call::Output;
use crate::core::effects::Effect;
use crate::core::erased::{Call, ErasedHandler, Invocation};
use crate::core::latest::ObjectWatch;
use crate::core::object::ObjectRef;
use crate::core::outcome::HandlerError;
use crate::core::spec::{HandlerKind, HandlerSpec};
use crate::core::supervisor::rules::ladder::StopStep;
use crate::core::supervisor::rules::policy::judge;
use crate::core::supervisor::rules::verdict::Verdict;

/// The context of one instance's task.
pub(crate) struct Runner {
    pub(crate) inner: Arc<SupervisorCore>,
    /// The object's identity, idle clock and memo.
    pub(crate) object: Arc<ObjectShared>,
    /// The handler's index in the supervisor's list (a `u32`, so that it packs with `cleanup`:
    /// every byte of the runner is kept by every instance's task).
    index: u32,
    /// Whether attempts call the handler's `cleanup` instead of its body (a reconcile handler
    /// of an object being deleted).
    cleanup: bool,
    pub(crate) shared: Arc<InstanceShared>,
    pub(crate) live: ObjectWatch,
    /// The instance's span, given to every invocation (one per instance: creating a span with
    /// its fields costs microseconds under a formatting subscriber). Boxed, and `None` when no
    /// subscriber wants it: a `Span` takes 40 bytes in every instance's task even when disabled.
    span: Option<Box<tracing::Span>>,
    /// The change a change handler is called for (`None` for daemons and timers).
    pub(crate) change: Option<Arc<crate::core::diff::ChangeContext>>,
}

/// The span of one instance: what every log line of its handler carries.
fn instance_span(reference: &ObjectRef, spec: &HandlerSpec) -> tracing::Span {
    tracing::info_span!(
        "handler",
        kind = spec.kind.as_str(),
        handler = spec.id,
        namespace = reference.namespace.as_deref().unwrap_or(""),
        name = &*reference.name,
        uid = &*reference.uid,
    )
}

impl Runner {
    pub(crate) fn new(
        inner: &Arc<SupervisorCore>,
        entry: &ObjectEntry,
        index: usize,
        shared: Arc<InstanceShared>,
    ) -> Self {
        let span = Some(instance_span(
            entry.reference(),
            inner.handlers[index].spec(),
        ))
        .filter(|span| !span.is_disabled())
        .map(Box::new);
        let index = u32::try_from(index).expect("fewer than 2^32 handlers");
        Self {
            inner: Arc::clone(inner),
            object: Arc::clone(&entry.object),
            index,
            cleanup: false,
            shared,
            live: entry.live.subscribe(),
            span,
            change: None,
        }
    }

    /// Judges a failed attempt of the cycle that started at `started` (arbitrary errors wait
    /// the handler's own `backoff`, or the operator's default for handlers that set none),
    /// reports it, and returns the verdict.
    pub(crate) fn judge_failure(
        &self,
        err: &HandlerError,
        retry: u32,
        started: Instant,
    ) -> Verdict {
        let backoff = match self.inner.config.default_backoff {
            Some(default) if !self.spec().backoff_set => default,
            _ => self.spec().backoff,
        };
        let verdict = judge(
            err.kind(),
            self.spec(),
            backoff,
            retry,
            started,
            Instant::now(),
        );
        self.report_failure(err, verdict);
        verdict
    }

    /// The instance's span (a disabled one when no subscriber wants it).
    pub(crate) fn span(&self) -> tracing::Span {
        self.span
            .as_deref()
            .cloned()
            .unwrap_or_else(tracing::Span::none)
    }

    /// The object's identity.
    pub(crate) fn reference(&self) -> &ObjectRef {
        &self.object.reference
    }

    /// The handler's index in the supervisor's list.
    pub(crate) fn index(&self) -> usize {
        self.index as usize
    }

    /// The handler.
    pub(crate) fn handler(&self) -> &Arc<dyn ErasedHandler> {
        &self.inner.handlers[self.index()]
    }

    /// Calls the handler's body, or its cleanup once [`Instance::call_cleanup`] was called.
    pub(crate) fn invoke(&self, invocation: Invocation) -> Result<Call, HandlerError> {
        if self.cleanup {
            self.handler().cleanup(invocation)
        } else {
            self.handler().invoke(invocation)
        }
    }

    /// From now on, attempts call the handler's `cleanup`.
    pub(crate) fn set_cleanup(&mut self) {
        self.cleanup = true;
    }

    /// The handler's counters, when the supervisor counts.
    pub(crate) fn meter(&self) -> Option<&HandlerMeter> {
        self.inner.meter(self.index())
    }

    /// Counts an invocation that began at `began` (`None`: not counted) and ended so.
    pub(crate) fn count_invocation(&self, result: InvocationResult, began: Option<Instant>) {
        if let (Some(meter), Some(began)) = (self.meter(), began) {
            meter.invoked(result, began.elapsed());
        }
    }

    /// The stop ladder took `step`: remembered if the instance was asked to stop (a ladder run
    /// for a handler timeout alone is not a stop of the instance).
    pub(crate) fn ladder_reached(&self, step: StopStep) {
        if self.stopping() {
            self.shared.ladder.reached(step);
        }
    }

    /// The delay before the first invocation (a panicking delay function falls back to the
    /// fixed `initial_delay`).
    pub(crate) fn initial_delay(&self) -> Option<Duration> {
        let object = Arc::clone(&self.live.borrow());
        catch_unwind(AssertUnwindSafe(|| self.handler().initial_delay(&object))).unwrap_or_else(
            |panic| {
                tracing::error!(
                    object = %self.reference(), handler = self.spec().id,
                    "the initial_delay function panicked: {}", panic_message(&panic)
                );
                self.spec().initial_delay
            },
        )
    }

    /// Sends a successful invocation's result and patch, if any.
    pub(crate) fn emit_output(&self, output: Output) {
        tracing::debug!(object = %self.reference(), handler = self.spec().id, "{} succeeded", self.kind());
        if output.result.is_none() && output.patch.is_none() {
            return;
        }
        let effect = Effect::Output {
            object: self.reference().clone(),
            handler: self.spec().id,
            result: output.result,
            patch: output.patch,
        };
        self.inner.emit(&self.reference().uid, effect);
    }

    /// Counts, logs and reports a failed invocation, and sends the patch it left pending.
    pub(crate) fn report_failure(&self, err: &HandlerError, verdict: Verdict) {
        self.inner.failures.fetch_add(1, Ordering::Relaxed);
        if let Some(patch) = err.patch() {
            let effect = Effect::Output {
                object: self.reference().clone(),
                handler: self.spec().id,
                result: None,
                patch: Some(patch.clone()),
            };
            self.inner.emit(&self.reference().uid, effect);
        }
        let (object, handler, message) = (self.reference(), self.spec().id, err.report());
        let retry = match verdict {
            Verdict::Ignored => {
                tracing::warn!(%object, handler, "{} failed (errors ignored): {message}", self.kind());
                return;
            }
            Verdict::Retry { delay } if !self.stopping() => {
                tracing::error!(%object, handler, "{} failed, retrying in {delay:?}: {message}", self.kind());
                if let Some(meter) = self.meter() {
                    meter.retried();
                }
                true
            }
            Verdict::Exhausted if self.spec().kind == HandlerKind::Timer => {
                tracing::error!(%object, handler,
                    "timer failed, retries exhausted: this cycle is over, the next runs on schedule: {message}");
                false
            }
            Verdict::Retry { .. } | Verdict::Exhausted | Verdict::Permanent => {
                tracing::error!(%object, handler, "{} failed for good ({verdict:?}): {message}", self.kind());
                false
            }
        };
        let effect = Effect::Failure {
            object: object.clone(),
            handler,
            message,
            summary: err.to_string(),
            fatal: !retry,
        };
        self.inner.emit(&self.reference().uid, effect);
    }

    /// Waits until the thread of an abandoned invocation of this instance (one that ran past
    /// its `timeout`) has returned, so that two invocations never overlap. `false` if the
    /// instance was asked to stop meanwhile (the slot then stays held until the thread returns).
    async fn previous_thread_returned(&self) -> bool {
        let Some(ended) = self.shared.lingering_thread() else {
            return true;
        };
        self.inner.thread_waits.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            object = %self.reference(), uid = %self.reference().uid, handler = self.spec().id,
            "the {}'s abandoned invocation is still running on its thread: the next one waits for it",
            self.kind()
        );
        tokio::select! {
            biased;
            () = ended.cancelled() => true,
            () = self.shared.stopper.stopped() => false,
        }
    }

    /// A blocking handler's way to its next invocation: its previous thread returned (see
    /// [`Runner::previous_thread_returned`]), and a dedicated-thread slot. `None` if the
    /// instance was asked to stop meanwhile.
    pub(crate) async fn blocking_slot(&self) -> Option<OwnedSemaphorePermit> {
        if !self.previous_thread_returned().await {
            return None;
        }
        self.acquire_thread().await
    }

    /// A dedicated-thread slot, waiting in the queue (interruptibly) when all are busy.
    pub(crate) async fn acquire_thread(&self) -> Option<OwnedSemaphorePermit> {
        let pool = &self.inner.config.blocking;
        if let Some(permit) = pool.try_acquire() {
            return Some(permit);
        }
        tracing::warn!(
            object = %self.reference(), handler = self.spec().id,
            "all {} dedicated threads are busy: the {} is queued", pool.capacity(), self.kind()
        );
        self.shared.queued.store(true, Ordering::SeqCst);
        let permit = tokio::select! {
            biased;
            () = self.shared.stopper.stopped() => None,
            permit = pool.acquire() => permit,
        };
        self.shared.queued.store(false, Ordering::SeqCst);
        permit
    }

    /// The error for a panic in the handler, logged with the object and handler.
    pub(crate) fn panicked(&self, message: &str) -> HandlerError {
        tracing::error!(
            object = %self.reference(), handler = self.spec().id,
            "{} panicked: {message}", self.kind()
        );
        HandlerError::msg(format!("the handler panicked: {message}"))
    }
}
