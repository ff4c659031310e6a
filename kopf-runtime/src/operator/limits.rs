//! Client-side request limits: a token bucket on every request the operator's client sends (a
//! tower layer under the kube client) and counters for the statistics.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Method, Request};
use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

/// Counts of the requests the operator's client has sent.
///
/// ```
/// let stats = kopf_runtime::RequestStats::default();
/// assert_eq!(stats.total, 0);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestStats {
    /// All requests (watches, lists, reads and writes).
    pub total: u64,
    /// Requests other than GET/HEAD/OPTIONS.
    pub writes: u64,
    /// Requests that had to wait for the rate limit.
    pub delayed: u64,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

/// A token bucket: `rate` tokens per second, holding at most `burst`.
#[derive(Debug)]
pub(crate) struct RateLimiter {
    rate: f64,
    burst: f64,
    bucket: Mutex<Bucket>,
    total: AtomicU64,
    writes: AtomicU64,
    delayed: AtomicU64,
}

impl RateLimiter {
    /// A limiter of `rate` requests per second with bursts of up to `burst`.
    pub(crate) fn new(rate: f64, burst: f64) -> Self {
        Self {
            rate,
            burst,
            bucket: Mutex::new(Bucket {
                tokens: burst,
                last: Instant::now(),
            }),
            total: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            delayed: AtomicU64::new(0),
        }
    }

    /// Takes a token, or says how long to wait for the next one.
    pub(crate) fn try_take(&self, now: Instant) -> Result<(), Duration> {
        let mut b = self.bucket.lock().unwrap_or_else(PoisonError::into_inner);
        let elapsed = now.saturating_duration_since(b.last).as_secs_f64();
        b.tokens = (b.tokens + elapsed * self.rate).min(self.burst);
        b.last = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - b.tokens) / self.rate))
        }
    }

    fn count(&self, method: &Method) {
        self.total.fetch_add(1, Ordering::Relaxed);
        if !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
            self.writes.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The counters so far.
    pub(crate) fn stats(&self) -> RequestStats {
        RequestStats {
            total: self.total.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            delayed: self.delayed.load(Ordering::Relaxed),
        }
    }
}

/// The tower layer that applies a [`RateLimiter`] to a client's service.
#[derive(Debug, Clone)]
pub(crate) struct RateLimitLayer(pub(crate) Arc<RateLimiter>);

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimited {
            inner,
            limiter: self.0.clone(),
            sleep: None,
            reserved: false,
        }
    }
}

/// A service that waits for a token before each request.
#[derive(Debug)]
pub(crate) struct RateLimited<S> {
    inner: S,
    limiter: Arc<RateLimiter>,
    sleep: Option<Pin<Box<Sleep>>>,
    reserved: bool,
}

impl<S, B> Service<Request<B>> for RateLimited<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        while !self.reserved {
            if let Some(sleep) = self.sleep.as_mut() {
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.sleep = None;
            }
            match self.limiter.try_take(Instant::now()) {
                Ok(()) => self.reserved = true,
                Err(wait) => {
                    self.limiter.delayed.fetch_add(1, Ordering::Relaxed);
                    self.sleep = Some(Box::pin(tokio::time::sleep(wait)));
                }
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        self.reserved = false;
        self.limiter.count(req.method());
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    #[tokio::test(start_paused = true)]
    async fn bucket_refills_at_the_rate() {
        let limiter = RateLimiter::new(10.0, 2.0);
        let now = Instant::now();
        assert!(limiter.try_take(now).is_ok());
        assert!(limiter.try_take(now).is_ok());
        assert_eq!(limiter.try_take(now), Err(Duration::from_millis(100)));
        assert!(limiter.try_take(now + Duration::from_millis(100)).is_ok());
    }

    struct Echo;

    impl Service<Request<()>> for Echo {
        type Response = ();
        type Error = Infallible;
        type Future = std::future::Ready<Result<(), Infallible>>;

        fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _req: Request<()>) -> Self::Future {
            std::future::ready(Ok(()))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn service_spaces_requests_and_counts_them() {
        let limiter = Arc::new(RateLimiter::new(5.0, 1.0));
        let mut svc = RateLimitLayer(limiter.clone()).layer(Echo);
        let start = Instant::now();
        for method in [Method::GET, Method::PATCH, Method::POST] {
            std::future::poll_fn(|cx| svc.poll_ready(cx)).await.unwrap();
            let req = Request::builder().method(method).body(()).unwrap();
            svc.call(req).await.unwrap();
        }
        // One token at once, then one every 200 ms.
        assert_eq!(start.elapsed(), Duration::from_millis(400));
        assert_eq!(
            limiter.stats(),
            RequestStats {
                total: 3,
                writes: 2,
                delayed: 2
            }
        );
    }
}
