//! Client-side request limits: a tower layer under the operator's kube client that counts every
//! request for the statistics and, when a limit is set, holds the requests to a token bucket.

use crate::core::sync::lock;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
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
    /// Requests that had to wait for the rate limit (always 0 without a client-side limit).
    pub delayed: u64,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

/// A token bucket: `rate` tokens per second, holding at most `burst`.
#[derive(Debug)]
struct TokenBucket {
    rate: f64,
    burst: f64,
    state: Mutex<Bucket>,
}

impl TokenBucket {
    fn try_take(&self, now: Instant) -> Result<(), Duration> {
        let mut b = lock(&self.state);
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
}

/// Counts the operator's requests and, when a client-side limit is set, holds them to it with a
/// token bucket. Without a limit, requests pass at once and are only counted (the API server's
/// Priority and Fairness protects it).
#[derive(Debug)]
pub(crate) struct RateLimiter {
    bucket: Option<TokenBucket>,
    total: AtomicU64,
    writes: AtomicU64,
    delayed: AtomicU64,
}

impl RateLimiter {
    /// A limiter of `rate` requests per second with bursts of up to `burst`.
    pub(crate) fn new(rate: f64, burst: f64) -> Self {
        Self::with_bucket(Some(TokenBucket {
            rate,
            burst,
            state: Mutex::new(Bucket {
                tokens: burst,
                last: Instant::now(),
            }),
        }))
    }

    /// No limit: every request passes at once and is counted.
    pub(crate) fn unlimited() -> Self {
        Self::with_bucket(None)
    }

    /// The limiter for the builder's `max_requests_per_second` option: none set means no limit;
    /// `n` per second means bursts of up to `2 n`.
    pub(crate) fn per_second(requests_per_second: Option<u32>) -> Self {
        match requests_per_second {
            None => Self::unlimited(),
            Some(n) => {
                let rate = f64::from(n);
                Self::new(rate, (rate * 2.0).max(1.0))
            }
        }
    }

    fn with_bucket(bucket: Option<TokenBucket>) -> Self {
        Self {
            bucket,
            total: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            delayed: AtomicU64::new(0),
        }
    }

    /// Takes a token, or says how long to wait for the next one. Without a limit, always `Ok`.
    pub(crate) fn try_take(&self, now: Instant) -> Result<(), Duration> {
        match &self.bucket {
            None => Ok(()),
            Some(bucket) => bucket.try_take(now),
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

/// The tower layer that applies a [`RateLimiter`] (with or without a limit) to a client's service.
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

/// A service that counts each request and, when a limit is set, waits for a token before it.
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

    /// Sends `count` requests one after another through the layer (a write every other one).
    async fn send(limiter: &Arc<RateLimiter>, count: usize) {
        let mut svc = RateLimitLayer(limiter.clone()).layer(Echo);
        for i in 0..count {
            std::future::poll_fn(|cx| svc.poll_ready(cx)).await.unwrap();
            let method = if i % 2 == 0 {
                Method::GET
            } else {
                Method::PATCH
            };
            let req = Request::builder().method(method).body(()).unwrap();
            svc.call(req).await.unwrap();
        }
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_limit_requests_pass_at_once_and_are_counted() {
        let limiter = Arc::new(RateLimiter::unlimited());
        let start = Instant::now();
        send(&limiter, 1000).await;
        // Paused time only advances when something sleeps: nothing did.
        assert_eq!(start.elapsed(), Duration::ZERO);
        assert_eq!(
            limiter.stats(),
            RequestStats {
                total: 1000,
                writes: 500,
                delayed: 0
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_builder_default_sets_no_client_side_limit() {
        let default = crate::operator::options::Options::default().requests_per_second;
        assert_eq!(default, None);
        let limiter = Arc::new(RateLimiter::per_second(default));
        let start = Instant::now();
        // Far more than any bucket's burst: the old default (50/s, burst 100) would take 18 s.
        send(&limiter, 1000).await;
        assert_eq!(start.elapsed(), Duration::ZERO);
        assert_eq!(limiter.stats().delayed, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_limit_still_throttles_after_its_burst_of_twice_the_rate() {
        let limiter = Arc::new(RateLimiter::per_second(Some(5)));
        let start = Instant::now();
        send(&limiter, 10).await;
        // The burst (2 × 5) goes through at once ...
        assert_eq!(start.elapsed(), Duration::ZERO);
        send(&limiter, 10).await;
        // ... then one request every 200 ms.
        assert_eq!(start.elapsed(), Duration::from_secs(2));
        assert_eq!(limiter.stats().total, 20);
        assert_eq!(limiter.stats().delayed, 10);
    }

    #[tokio::test(start_paused = true)]
    async fn a_limit_of_one_per_second_still_allows_a_request_at_once() {
        let limiter = RateLimiter::per_second(Some(1));
        let now = Instant::now();
        assert!(limiter.try_take(now).is_ok());
        assert!(limiter.try_take(now).is_ok());
        assert_eq!(limiter.try_take(now), Err(Duration::from_secs(1)));
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
