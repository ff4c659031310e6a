//! The optional cap on concurrently running handlers: each handler is wrapped so that its
//! invocations wait for a permit (and give up waiting when asked to stop). The per-object span
//! comes from the typed handler layer.

use std::sync::Arc;
use std::time::Duration;

use futures::future::{Either, select};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::core::erased::{Call, ErasedHandler, Invocation, MatchError, Output};
use crate::core::object::ObjectState;
use crate::core::outcome::HandlerError;
use crate::core::spec::HandlerSpec;
use crate::core::stop::Stopper;

/// A handler whose invocations each hold a permit of a shared semaphore while they run.
pub(crate) struct Capped {
    inner: Arc<dyn ErasedHandler>,
    cap: Arc<Semaphore>,
}

impl Capped {
    pub(crate) fn wrap(
        inner: Arc<dyn ErasedHandler>,
        cap: Arc<Semaphore>,
    ) -> Arc<dyn ErasedHandler> {
        Arc::new(Self { inner, cap })
    }
}

/// Waits for a permit, or returns `None` if the instance is asked to stop first.
async fn permit(cap: Arc<Semaphore>, stopper: Stopper) -> Option<OwnedSemaphorePermit> {
    let acquire = std::pin::pin!(cap.acquire_owned());
    let stopped = std::pin::pin!(stopper.stopped());
    match select(acquire, stopped).await {
        Either::Left((Ok(permit), _)) => Some(permit),
        Either::Left((Err(_), _)) | Either::Right(_) => None,
    }
}

impl ErasedHandler for Capped {
    fn spec(&self) -> &'static HandlerSpec {
        self.inner.spec()
    }

    fn matches(&self, object: &ObjectState) -> Result<bool, MatchError> {
        self.inner.matches(object)
    }

    fn initial_delay(&self, object: &ObjectState) -> Option<Duration> {
        self.inner.initial_delay(object)
    }

    fn invoke(&self, invocation: Invocation) -> Result<Call, HandlerError> {
        let stopper = invocation.stopper.clone();
        let cap = self.cap.clone();
        Ok(match self.inner.invoke(invocation)? {
            Call::Async(fut) => Call::Async(Box::pin(async move {
                let Some(_permit) = permit(cap, stopper).await else {
                    return Ok(Output::default());
                };
                fut.await
            })),
            Call::Blocking(body) => Call::Blocking(Box::new(move || {
                let Some(_permit) = futures::executor::block_on(permit(cap, stopper)) else {
                    return Ok(Output::default());
                };
                body()
            })),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::erased::Services;
    use crate::core::spec::HandlerKind;
    use crate::core::stop::StopReason;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static SPEC: HandlerSpec = HandlerSpec::new("probe", HandlerKind::Daemon);

    struct Probe(Arc<AtomicUsize>);

    impl ErasedHandler for Probe {
        fn spec(&self) -> &'static HandlerSpec {
            &SPEC
        }
        fn matches(&self, _: &ObjectState) -> Result<bool, MatchError> {
            Ok(true)
        }
        fn invoke(&self, inv: Invocation) -> Result<Call, HandlerError> {
            let running = self.0.clone();
            Ok(Call::Async(Box::pin(async move {
                running.fetch_add(1, Ordering::SeqCst);
                inv.stopper.stopped().await;
                running.fetch_sub(1, Ordering::SeqCst);
                Ok(Output::default())
            })))
        }
    }

    fn invocation(stopper: &Stopper) -> Invocation {
        let object = Arc::new(
            ObjectState::from_json(serde_json::json!({"metadata": {"name": "a", "uid": "u"}}))
                .unwrap(),
        );
        let (_tx, live) = crate::core::latest::ObjectWatch::channel(object.clone());
        Invocation {
            object,
            live,
            stopper: stopper.clone(),
            retry: 0,
            started: tokio::time::Instant::now(),
            services: Services::default(),
            span: tracing::Span::none(),
            memo: Arc::default(),
            occurrence: None,
            change: None,
        }
    }

    fn future(call: Call) -> futures::future::BoxFuture<'static, Result<Output, HandlerError>> {
        match call {
            Call::Async(f) => f,
            Call::Blocking(_) => unreachable!("the probe is async"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_cap_holds_back_extra_invocations_until_a_permit_frees() {
        let running = Arc::new(AtomicUsize::new(0));
        let handler = Capped::wrap(
            Arc::new(Probe(running.clone())),
            Arc::new(Semaphore::new(1)),
        );
        let (s1, s2) = (Stopper::new(), Stopper::new());
        let first = tokio::spawn(future(handler.invoke(invocation(&s1)).unwrap()));
        let second = tokio::spawn(future(handler.invoke(invocation(&s2)).unwrap()));
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(running.load(Ordering::SeqCst), 1);
        s1.stop(StopReason::OPERATOR_EXITING);
        first.await.unwrap().unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(running.load(Ordering::SeqCst), 1, "the second one runs now");
        s2.stop(StopReason::OPERATOR_EXITING);
        second.await.unwrap().unwrap();
        assert_eq!(running.load(Ordering::SeqCst), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_invocation_returns_when_stopped() {
        let running = Arc::new(AtomicUsize::new(0));
        let cap = Arc::new(Semaphore::new(0));
        let handler = Capped::wrap(Arc::new(Probe(running.clone())), cap);
        let stopper = Stopper::new();
        let waiting = tokio::spawn(future(handler.invoke(invocation(&stopper)).unwrap()));
        tokio::time::sleep(Duration::from_millis(10)).await;
        stopper.stop(StopReason::RESOURCE_DELETED);
        waiting.await.unwrap().unwrap();
        assert_eq!(running.load(Ordering::SeqCst), 0, "it never started");
    }
}
