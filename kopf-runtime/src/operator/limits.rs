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
            limited: true,
        }
    }
}

/// The tower layer that counts the answers of a client's requests into a [`RateLimiter`] for
/// `/metrics`, and nothing else: the Lease client's, whose renewals no limit may hold back.
#[derive(Debug, Clone)]
pub(crate) struct AnswerCountLayer(pub(crate) Arc<RateLimiter>);

impl<S> Layer<S> for AnswerCountLayer {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimited {
            inner,
            limiter: self.0.clone(),
            sleep: None,
            reserved: true, // never waits for a token
            limited: false,
        }
    }
}

/// A service that counts each request and, when a limit is set, waits for a token before it
/// (or, under an [`AnswerCountLayer`], only counts its answer).
#[derive(Debug)]
pub(crate) struct RateLimited<S> {
    inner: S,
    limiter: Arc<RateLimiter>,
    sleep: Option<Pin<Box<Sleep>>>,
    reserved: bool,
    /// Held to the limit and counted in the statistics (not for the Lease client).
    limited: bool,
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
        if self.limited {
            self.reserved = false;
            self.limiter.count(req.method());
        }
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
#[path = "limits_tests.rs"]
mod tests;
