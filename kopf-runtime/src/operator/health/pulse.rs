//! Whether each watch stream is alive: a [`Pulse`] per stream, fed by the answers to the
//! stream's own requests (its lists and watches go through a client made for it by
//! [`observed`]), and the [`WatchLimits`] that judge it.
//!
//! A stream *delivers* when a successful answer's body brings data (an event, a bookmark, a
//! list page) or ends cleanly (the API server ends every watch after its `timeoutSeconds`). A
//! request that fails (no answer, an error status, a body cut by an error) makes it *down*
//! until it delivers again; so does a silence longer than `idle` (a healthy watch delivers at
//! least its end within that: the operator's watches ask for `timeoutSeconds` = `idle` −
//! the grace). Headers alone do not count: a stuck proxy that answers but forwards nothing
//! must not look alive.
//!
//! ```text
//!  delivered ─────────────────────────────┐ (up)
//!     │ failed, or silent for `idle`      │
//!     ▼                                   │
//!   down ── `/readyz` fails ── delivered ─┘
//!     │ still down after `recovery`
//!     ▼
//!   `/healthz` fails (Kubernetes restarts the zombie)
//! ```

use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use http::{Request, Response};
use http_body::{Body as HttpBody, Frame, SizeHint};
use kube::Client;
use kube::client::Body;
use tokio::time::Instant;
use tower::{BoxError, Service};

use crate::operator::transport::WATCH_GRACE;

/// The bounds a kind's watch streams are judged by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WatchLimits {
    /// The longest silence of a stream that is up (see `OperatorBuilder::watch_idle_timeout`).
    pub(crate) idle: Duration,
    /// How long a stream may stay down before liveness fails (see
    /// `OperatorBuilder::watch_recovery_timeout`).
    pub(crate) recovery: Duration,
}

impl Default for WatchLimits {
    fn default() -> Self {
        Self {
            idle: Self::IDLE,
            recovery: Self::RECOVERY,
        }
    }
}

impl WatchLimits {
    /// The default longest silence.
    pub(crate) const IDLE: Duration = Duration::from_secs(120);
    /// The default time a stream may stay down before liveness fails.
    pub(crate) const RECOVERY: Duration = Duration::from_secs(180);
    /// The shortest `idle` that leaves a watch at least a second.
    pub(crate) const MIN_IDLE: Duration = Duration::from_secs(WATCH_GRACE.as_secs() + 1);

    /// The `timeoutSeconds` the streams' watches ask for: the API server ends them by then, so
    /// a healthy one is never silent for longer than `idle` (with the transport's grace).
    pub(crate) fn server_timeout(&self) -> u32 {
        let seconds = self.idle.as_secs().saturating_sub(WATCH_GRACE.as_secs());
        u32::try_from(seconds).unwrap_or(u32::MAX).max(1)
    }
}

/// The pulse of one watch stream.
#[derive(Debug)]
pub(crate) struct Pulse {
    state: Mutex<State>,
}

#[derive(Debug, Clone, Copy)]
struct State {
    /// When the stream last delivered (or started).
    delivered: Instant,
    /// The first failure since then.
    failed: Option<Instant>,
}

impl Pulse {
    /// A stream that starts now (it counts as delivering).
    pub(crate) fn new() -> Self {
        Self {
            state: Mutex::new(State {
                delivered: Instant::now(),
                failed: None,
            }),
        }
    }

    fn update(&self, change: impl FnOnce(&mut State)) {
        change(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner));
    }

    /// A successful answer brought data, or ended cleanly.
    pub(crate) fn delivered(&self) {
        self.update(|s| {
            s.delivered = Instant::now();
            s.failed = None;
        });
    }

    /// A request of the stream failed.
    pub(crate) fn failed(&self) {
        self.update(|s| {
            s.failed.get_or_insert_with(Instant::now);
        });
    }

    /// Since when the stream is down at `now` (it failed, or has been silent for longer than
    /// `idle`, since it last delivered), if it is.
    pub(crate) fn down_since(&self, idle: Duration, now: Instant) -> Option<Instant> {
        let state = *self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let silent = state.delivered + idle;
        match state.failed {
            Some(failed) => Some(failed.min(silent)),
            None => (now > silent).then_some(silent),
        }
    }
}

/// `client` with the answers to its requests reported to `pulse`.
pub(crate) fn observed(client: &Client, pulse: Arc<Pulse>) -> Client {
    let service = Observed {
        client: client.clone(),
        pulse,
    };
    Client::new(service, client.default_namespace().to_owned())
}

/// A service sending every request through `client` and reporting its fate to `pulse`.
#[derive(Clone)]
struct Observed {
    client: Client,
    pulse: Arc<Pulse>,
}

impl Service<Request<Body>> for Observed {
    type Response = Response<Observing>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let (client, pulse) = (self.client.clone(), self.pulse.clone());
        Box::pin(async move {
            match client.send(req).await {
                Ok(response) => {
                    let ok = response.status().is_success();
                    if !ok {
                        pulse.failed();
                    }
                    Ok(response.map(|inner| Observing { inner, pulse, ok }))
                }
                Err(err) => {
                    pulse.failed();
                    Err(err.into())
                }
            }
        })
    }
}

/// A response body whose frames, end and error are reported to a [`Pulse`] (its data and end
/// only for a successful answer).
struct Observing {
    inner: Body,
    pulse: Arc<Pulse>,
    ok: bool,
}

impl HttpBody for Observing {
    type Data = <Body as HttpBody>::Data;
    type Error = kube::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let frame = std::task::ready!(std::pin::Pin::new(&mut self.inner).poll_frame(cx));
        match &frame {
            Some(Err(_)) => self.pulse.failed(),
            Some(Ok(_)) | None if self.ok => self.pulse.delivered(),
            _ => {}
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDLE: Duration = Duration::from_secs(10);

    #[tokio::test(start_paused = true)]
    async fn a_stream_is_down_after_a_failure_or_a_silence_until_it_delivers() {
        let pulse = Pulse::new();
        let start = Instant::now();
        assert_eq!(pulse.down_since(IDLE, Instant::now()), None);
        // Silent for exactly `idle`: still up; a moment longer: down since then.
        tokio::time::advance(IDLE).await;
        assert_eq!(pulse.down_since(IDLE, Instant::now()), None);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(pulse.down_since(IDLE, Instant::now()), Some(start + IDLE));
        // A failure after the silence began does not move the start of the outage.
        pulse.failed();
        assert_eq!(pulse.down_since(IDLE, Instant::now()), Some(start + IDLE));
        pulse.delivered();
        assert_eq!(pulse.down_since(IDLE, Instant::now()), None);
        // A failure makes it down at once, from the first failure on.
        tokio::time::advance(Duration::from_secs(2)).await;
        let first = Instant::now();
        pulse.failed();
        tokio::time::advance(Duration::from_secs(1)).await;
        pulse.failed();
        assert_eq!(pulse.down_since(IDLE, Instant::now()), Some(first));
        pulse.delivered();
        assert_eq!(pulse.down_since(IDLE, Instant::now()), None);
    }

    #[test]
    fn watches_ask_the_server_to_end_them_within_the_idle_bound() {
        let limits = |idle| WatchLimits {
            idle: Duration::from_secs(idle),
            recovery: WatchLimits::RECOVERY,
        };
        assert_eq!(WatchLimits::default().server_timeout(), 117);
        assert_eq!(limits(4).server_timeout(), 1);
        assert_eq!(limits(5).server_timeout(), 2);
        assert_eq!(WatchLimits::MIN_IDLE, Duration::from_secs(4));
    }
}
