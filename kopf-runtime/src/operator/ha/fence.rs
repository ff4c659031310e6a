//! Fencing: with leader election on, the operator's client refuses every mutating request
//! unless this replica's leadership is valid on its own monotonic clock. So a deposed leader —
//! paused by SIGSTOP, cut off from the API server, or just slow to notice — never writes after
//! its validity lapsed, whatever its handlers or queued writes try.
//!
//! ```text
//!  renew sent at t0 ──▶ 200 OK ──▶ valid until t0 + renew_deadline (local monotonic clock)
//!  write at t < valid-until ──▶ passes        write at t ≥ valid-until ──▶ refused (Fenced)
//! ```
//!
//! Another replica takes the Lease over no earlier than `lease_duration` after it saw the last
//! renewal, which was sent after `t0`; with `renew_deadline < lease_duration` the old leader's
//! writes end before the new leader's begin, by `lease_duration − renew_deadline` on equal
//! clock rates (the same assumption client-go makes).

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use http::{Method, Request};
use tokio::sync::watch;
use tokio::time::Instant;
use tower::{BoxError, Layer, Service};

use crate::core::clearance::Clearance;

/// Until when this replica may write, and start handler invocations (its supervisors'
/// [`Clearance`] follows it).
#[derive(Debug)]
pub(crate) struct Fence(watch::Sender<Option<Instant>>);

impl Default for Fence {
    fn default() -> Self {
        Self(watch::Sender::new(None))
    }
}

impl Fence {
    /// Writes are allowed until `until` (an earlier deadline never replaces a later one).
    pub(crate) fn extend(&self, until: Instant) {
        self.0.send_if_modified(|valid| {
            let later = valid.is_none_or(|v| v < until);
            if later {
                *valid = Some(until);
            }
            later
        });
    }

    /// Writes are refused from now on.
    pub(crate) fn close(&self) {
        self.0.send_replace(None);
    }

    /// Until when writes are allowed (`None`: not at all).
    pub(crate) fn valid_until(&self) -> Option<Instant> {
        *self.0.borrow()
    }

    /// A clearance for a supervisor: invocations start only while writes are allowed.
    pub(crate) fn clearance(&self) -> Clearance {
        Clearance::new(self.0.subscribe())
    }

    /// Whether a write may be sent at `now`.
    pub(crate) fn allows(&self, now: Instant) -> bool {
        self.valid_until().is_some_and(|until| now < until)
    }
}

/// The error of a write refused because this replica does not lead (see
/// [`OperatorBuilder::leader_election`](crate::OperatorBuilder::leader_election)): the
/// operator's client returns it as `kube::Error::Service`.
///
/// ```
/// fn refused_as_standby(err: &kube::Error) -> bool {
///     matches!(err, kube::Error::Service(e) if e.downcast_ref::<kopf_runtime::ha::Fenced>().is_some())
/// }
/// assert!(refused_as_standby(&kube::Error::Service(Box::new(kopf_runtime::ha::Fenced))));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fenced;

impl fmt::Display for Fenced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "refused a write: this replica is not the leader (it has not held the lease, or its \
             lease was not renewed in time); the leader does the writes",
        )
    }
}

impl std::error::Error for Fenced {}

/// The tower layer that puts a [`Fence`] in front of a client's service.
#[derive(Debug, Clone)]
pub(crate) struct FenceLayer(pub(crate) Arc<Fence>);

impl<S> Layer<S> for FenceLayer {
    type Service = FencedService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        FencedService {
            inner,
            fence: self.0.clone(),
        }
    }
}

/// A service that refuses mutating requests the fence does not allow.
#[derive(Debug, Clone)]
pub(crate) struct FencedService<S> {
    inner: S,
    fence: Arc<Fence>,
}

impl<S, B> Service<Request<B>> for FencedService<S>
where
    S: Service<Request<B>>,
    S::Response: Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<S::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let reads = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
        if !reads && !self.fence.allows(Instant::now()) {
            return Box::pin(std::future::ready(Err(Box::new(Fenced) as BoxError)));
        }
        let fut = self.inner.call(req);
        Box::pin(async move { fut.await.map_err(Into::into) })
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::time::Duration;

    use super::*;

    #[derive(Clone)]
    struct Echo;

    impl Service<Request<()>> for Echo {
        type Response = &'static str;
        type Error = Infallible;
        type Future = std::future::Ready<Result<&'static str, Infallible>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Request<()>) -> Self::Future {
            std::future::ready(Ok("sent"))
        }
    }

    fn request(method: Method) -> Request<()> {
        Request::builder().method(method).body(()).unwrap()
    }

    async fn send(
        service: &mut FencedService<Echo>,
        method: Method,
    ) -> Result<&'static str, String> {
        service
            .call(request(method))
            .await
            .map_err(|e| e.to_string())
    }

    #[tokio::test(start_paused = true)]
    async fn writes_pass_only_while_the_lease_is_valid() {
        let fence = Arc::new(Fence::default());
        let mut service = FenceLayer(fence.clone()).layer(Echo);
        // Never led: reads pass, writes are refused.
        assert_eq!(send(&mut service, Method::GET).await, Ok("sent"));
        let refused = send(&mut service, Method::PATCH).await.unwrap_err();
        assert!(refused.contains("not the leader"), "{refused}");
        // Leading for 10 s.
        fence.extend(Instant::now() + Duration::from_secs(10));
        assert_eq!(send(&mut service, Method::PATCH).await, Ok("sent"));
        assert_eq!(send(&mut service, Method::POST).await, Ok("sent"));
        // An older deadline does not shorten it.
        fence.extend(Instant::now() + Duration::from_secs(1));
        tokio::time::advance(Duration::from_secs(9)).await;
        assert_eq!(send(&mut service, Method::DELETE).await, Ok("sent"));
        // Lapsed on the local clock: refused without any renewal failing first.
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(send(&mut service, Method::PUT).await.is_err());
        assert_eq!(send(&mut service, Method::GET).await, Ok("sent"));
        // Closed at once.
        fence.extend(Instant::now() + Duration::from_secs(10));
        fence.close();
        assert!(send(&mut service, Method::PATCH).await.is_err());
    }
}
