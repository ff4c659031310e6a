//! Client-side request limits: a tower layer under the operator's kube client that counts every
//! request for the statistics (and its answer, by verb and status code, for `/metrics`) and,
//! when a limit is set, holds the requests to a token bucket.

use crate::core::sync::lock;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use http::{Method, Request, Response, StatusCode, Uri};
use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

/// Counts of the requests the operator's client has sent.
///
/// ```
/// let stats = kopf_runtime::stats::RequestStats::default();
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
    /// Answers by verb and status code (0: no answer, a transport error).
    answers: Mutex<BTreeMap<(Verb, u16), u64>>,
    /// Answers `429 Too Many Requests`: the API server throttled the operator.
    throttled: AtomicU64,
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
            answers: Mutex::default(),
            throttled: AtomicU64::new(0),
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

    /// A request got an answer with `code` (0: none, it failed on the way).
    fn answered(&self, verb: Verb, code: u16) {
        if code == StatusCode::TOO_MANY_REQUESTS.as_u16() {
            self.throttled.fetch_add(1, Ordering::Relaxed);
        }
        *lock(&self.answers).entry((verb, code)).or_default() += 1;
    }

    /// The answers so far: `(verb, status code or 0 for none, count)`, sorted.
    pub(crate) fn answers(&self) -> Vec<(Verb, u16, u64)> {
        let answers = lock(&self.answers);
        answers
            .iter()
            .map(|(&(verb, code), &n)| (verb, code, n))
            .collect()
    }

    /// Requests held back by the client-side limit, and answered `429` by the API server.
    pub(crate) fn throttled(&self) -> (u64, u64) {
        let delayed = self.delayed.load(Ordering::Relaxed);
        (delayed, self.throttled.load(Ordering::Relaxed))
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

impl<S, B, RB> Service<Request<B>> for RateLimited<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

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
        let verb = Verb::of(req.method(), req.uri());
        let limiter = self.limiter.clone();
        let answer = self.inner.call(req);
        Box::pin(async move {
            let answer = answer.await;
            let code = answer.as_ref().map_or(0, |a| a.status().as_u16());
            limiter.answered(verb, code);
            answer
        })
    }
}

/// What a request does, in the API server's terms (its audit log's `verb`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
    Other,
}

impl Verb {
    /// The verb of a request with this method to this URI.
    fn of(method: &Method, uri: &Uri) -> Self {
        let watch = uri
            .query()
            .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
        let collection = is_collection(uri.path());
        match *method {
            Method::GET if watch => Self::Watch,
            Method::GET if collection => Self::List,
            Method::GET => Self::Get,
            Method::POST => Self::Create,
            Method::PUT => Self::Update,
            Method::PATCH => Self::Patch,
            Method::DELETE if collection => Self::DeleteCollection,
            Method::DELETE => Self::Delete,
            _ => Self::Other,
        }
    }

    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Get => "get",
            Self::List => "list",
            Self::Watch => "watch",
            Self::Create => "create",
            Self::Update => "update",
            Self::Patch => "patch",
            Self::Delete => "delete",
            Self::DeleteCollection => "deletecollection",
            Self::Other => "other",
        }
    }
}

/// Whether an API path names a collection (`/api/v1/pods`, `/apis/g/v/namespaces/ns/things`)
/// rather than one object, a subresource or a discovery document.
fn is_collection(path: &str) -> bool {
    let mut parts = [""; 7];
    let mut n = 0;
    for part in path.trim_matches('/').split('/') {
        let Some(slot) = parts.get_mut(n) else {
            return false;
        };
        *slot = part;
        n += 1;
    }
    let (["api", _, rest @ ..] | ["apis", _, _, rest @ ..]) = &parts[..n] else {
        return false;
    };
    match rest {
        [plural] => !plural.is_empty(),
        // Not a namespace's own subresources.
        ["namespaces", _, plural] => !matches!(*plural, "status" | "finalize"),
        _ => false,
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

    /// Answers `200`, or `429` to a request with the header `x-throttle`.
    struct Echo;

    impl Service<Request<()>> for Echo {
        type Response = Response<()>;
        type Error = Infallible;
        type Future = std::future::Ready<Result<Response<()>, Infallible>>;

        fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, req: Request<()>) -> Self::Future {
            let mut answer = Response::new(());
            if req.headers().contains_key("x-throttle") {
                *answer.status_mut() = StatusCode::TOO_MANY_REQUESTS;
            }
            std::future::ready(Ok(answer))
        }
    }

    #[test]
    fn verbs_are_the_api_servers() {
        let verb = |method: Method, uri: &str| Verb::of(&method, &uri.parse().unwrap());
        let ns = "/apis/kopf.dev/v1/namespaces/ns/kopfexamples";
        assert_eq!(verb(Method::GET, ns), Verb::List);
        assert_eq!(
            verb(Method::GET, &format!("{ns}?watch=true&rv=5")),
            Verb::Watch
        );
        assert_eq!(verb(Method::GET, &format!("{ns}/a")), Verb::Get);
        assert_eq!(verb(Method::PATCH, &format!("{ns}/a/status")), Verb::Patch);
        assert_eq!(
            verb(Method::GET, "/apis/kopf.dev/v1/kopfexamples"),
            Verb::List
        );
        assert_eq!(verb(Method::GET, "/api/v1/namespaces"), Verb::List);
        assert_eq!(verb(Method::GET, "/api/v1/namespaces/ns"), Verb::Get);
        assert_eq!(verb(Method::GET, "/api/v1/namespaces/ns/status"), Verb::Get);
        assert_eq!(verb(Method::GET, "/apis/kopf.dev/v1"), Verb::Get);
        assert_eq!(verb(Method::GET, "/version"), Verb::Get);
        let events = "/apis/events.k8s.io/v1/namespaces/ns/events";
        assert_eq!(verb(Method::POST, events), Verb::Create);
        assert_eq!(verb(Method::DELETE, events), Verb::DeleteCollection);
        assert_eq!(verb(Method::DELETE, &format!("{events}/e")), Verb::Delete);
        assert_eq!(verb(Method::PUT, &format!("{events}/e")), Verb::Update);
    }

    #[tokio::test]
    async fn answers_are_counted_by_verb_and_code() {
        let limiter = Arc::new(RateLimiter::unlimited());
        let mut svc = RateLimitLayer(limiter.clone()).layer(Echo);
        for throttle in [false, true, true] {
            std::future::poll_fn(|cx| svc.poll_ready(cx)).await.unwrap();
            let mut req = Request::builder()
                .method(Method::PATCH)
                .uri("/api/v1/namespaces/n/pods/p");
            if throttle {
                req = req.header("x-throttle", "1");
            }
            svc.call(req.body(()).unwrap()).await.unwrap();
        }
        assert_eq!(
            limiter.answers(),
            vec![(Verb::Patch, 200, 1), (Verb::Patch, 429, 2)]
        );
        assert_eq!(limiter.throttled(), (0, 2));
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
