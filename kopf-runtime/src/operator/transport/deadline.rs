//! The request deadline: every request of the operator's clients that is not long-running
//! (a watch, a followed log, exec/attach/port-forward, a proxy) must be answered in full —
//! headers and body — within a deadline, or it fails with [`RequestTimedOut`]. kube sets no
//! read timeout and no TCP keepalive, so without it a request on a half-open connection waits
//! forever (and a write holds its write slot while it does).
//!
//! ```text
//!  call ──▶ a watch? ── yes ──▶ headers by the deadline, then silences bounded (`watch_deadline`)
//!              │ no
//!              ▼
//!         long-running? ── yes ──▶ forwarded as is
//!              │ no
//!              ▼
//!  until = now + deadline ──▶ headers by `until`? ── no ──▶ Err(RequestTimedOut)
//!                                   │ yes
//!                                   ▼
//!                             body frames by `until`? ── no ──▶ body Err(RequestTimedOut)
//! ```
//!
//! Dropping the request closes its connection: a request that timed out is never answered
//! later, but the bytes already in the kernel's send buffer may still reach the API server (see
//! `docs/reliability.md`).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use http::{Method, Request, Response, Uri};
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};
use tower::{BoxError, Layer, Service};

use super::watch_deadline::{WatchBound, WatchSilent, watch_bound};

/// The error of a request that got no complete answer within the operator's request deadline
/// (`OperatorBuilder::request_timeout`); the client returns it as `kube::Error::Service`, and
/// the operator's writes retry it as a transient error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RequestTimedOut {
    /// The deadline.
    pub(crate) after: Duration,
}

impl fmt::Display for RequestTimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the API server did not answer the request in full within {:?} (the operator's \
             request timeout): the connection is dropped and the request counts as failed",
            self.after
        )
    }
}

impl std::error::Error for RequestTimedOut {}

/// Whether a request to `uri` is one the API server itself keeps open (a watch, a followed
/// log, exec/attach/port-forward, a proxy): no deadline applies to those.
pub(crate) fn long_running(uri: &Uri) -> bool {
    let query = uri.query().unwrap_or_default();
    let flag = |name: &str| {
        query
            .split('&')
            .any(|p| p == format!("{name}=true") || p == format!("{name}=1"))
    };
    if flag("watch") || flag("follow") {
        return true;
    }
    let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    // `/api/v1/watch/...` and `/apis/<group>/<version>/watch/...`: the legacy watch paths.
    let legacy_watch = match segments.first() {
        Some(&"api") => segments.get(2) == Some(&"watch"),
        Some(&"apis") => segments.get(3) == Some(&"watch"),
        _ => false,
    };
    // `pods/<name>/{exec,attach,portforward}` and `{pods,services,nodes}/<name>/proxy[/...]`.
    let streaming = segments.windows(3).any(|w| {
        matches!(
            (w[0], w[2]),
            ("pods", "exec" | "attach" | "portforward") | ("pods" | "services" | "nodes", "proxy")
        )
    });
    legacy_watch || streaming
}

/// The tower layer that gives every request that is not long-running a deadline: `reads` for
/// the requests that change nothing (GET, HEAD, OPTIONS), `writes` for all others.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DeadlineLayer {
    pub(crate) reads: Duration,
    pub(crate) writes: Duration,
}

impl DeadlineLayer {
    /// The same deadline for every request.
    pub(crate) fn uniform(deadline: Duration) -> Self {
        Self {
            reads: deadline,
            writes: deadline,
        }
    }
}

impl<S> Layer<S> for DeadlineLayer {
    type Service = Deadlined<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Deadlined {
            inner,
            deadlines: *self,
        }
    }
}

/// A service whose requests (but long-running ones) fail after a deadline.
#[derive(Debug, Clone)]
pub(crate) struct Deadlined<S> {
    inner: S,
    deadlines: DeadlineLayer,
}

impl<S, B, RB> Service<Request<B>> for Deadlined<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    RB: Send + 'static,
{
    type Response = Response<DeadlineBody<RB>>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let reads = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
        let after = if reads {
            self.deadlines.reads
        } else {
            self.deadlines.writes
        };
        // A watch's headers have the deadline too, its body a bound on silences (see
        // `watch_deadline`).
        let watch = watch_bound(req.uri());
        let bounded = watch.is_some() || !long_running(req.uri());
        let until = Instant::now() + after;
        let answer = self.inner.call(req);
        Box::pin(async move {
            if !bounded {
                let response = answer.await.map_err(Into::into)?;
                return Ok(response.map(|inner| DeadlineBody {
                    inner,
                    timer: None,
                    idle: false,
                    expired: false,
                }));
            }
            let mut timer = Box::pin(tokio::time::sleep_until(until));
            let response = tokio::select! {
                biased;
                response = answer => response.map_err(Into::into)?,
                () = &mut timer => return Err(Box::new(RequestTimedOut { after }) as BoxError),
            };
            let timer = match watch {
                None => Some((timer, after)),
                Some(WatchBound { idle: None }) => None,
                Some(WatchBound { idle: Some(idle) }) => {
                    timer.as_mut().reset(Instant::now() + idle);
                    Some((timer, idle))
                }
            };
            Ok(response.map(|inner| DeadlineBody {
                inner,
                timer,
                idle: watch.is_some(),
                expired: false,
            }))
        })
    }
}

/// A response body that fails with [`RequestTimedOut`] when its request's deadline passes
/// before its end (no deadline: a long-running request's body).
#[derive(Debug)]
pub(crate) struct DeadlineBody<B> {
    inner: B,
    timer: Option<(Pin<Box<Sleep>>, Duration)>,
    /// A watch's body: the timer starts again with every frame, and fails it with a
    /// [`WatchSilent`].
    idle: bool,
    /// The deadline passed: the body ends (after its error).
    expired: bool,
}

impl<B> Body for DeadlineBody<B>
where
    B: Body + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        if this.expired {
            return Poll::Ready(None);
        }
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            if this.idle
                && let Some((timer, idle)) = this.timer.as_mut()
            {
                timer.as_mut().reset(Instant::now() + *idle);
            }
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if let Some((timer, after)) = this.timer.as_mut()
            && timer.as_mut().poll(cx).is_ready()
        {
            let after = *after;
            this.timer = None;
            this.expired = true;
            let err: BoxError = if this.idle {
                Box::new(WatchSilent { after })
            } else {
                Box::new(RequestTimedOut { after })
            };
            return Poll::Ready(Some(Err(err)));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.expired || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
#[path = "deadline_tests.rs"]
mod tests;
