//! The request limits' tests: the token bucket on paused time, the counts by verb and code.

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

#[tokio::test(start_paused = true)]
async fn the_lease_clients_answers_are_counted_but_never_held_back() {
    let limiter = Arc::new(RateLimiter::new(1.0, 1.0));
    let mut svc = AnswerCountLayer(limiter.clone()).layer(Echo);
    let start = Instant::now();
    for _ in 0..5 {
        std::future::poll_fn(|cx| svc.poll_ready(cx)).await.unwrap();
        let req = Request::builder()
            .method(Method::PUT)
            .uri("/apis/coordination.k8s.io/v1/namespaces/n/leases/l");
        svc.call(req.body(()).unwrap()).await.unwrap();
    }
    assert_eq!(start.elapsed(), Duration::ZERO, "no token was waited for");
    assert_eq!(limiter.answers(), vec![(Verb::Update, 200, 5)]);
    assert_eq!(
        limiter.stats(),
        RequestStats::default(),
        "not the handlers' requests"
    );
    // Positive control: the same requests through the limiting layer wait for tokens.
    let mut limited = RateLimitLayer(limiter.clone()).layer(Echo);
    for _ in 0..3 {
        std::future::poll_fn(|cx| limited.poll_ready(cx))
            .await
            .unwrap();
        let req = Request::builder().method(Method::PUT).uri("/x");
        limited.call(req.body(()).unwrap()).await.unwrap();
    }
    assert!(
        start.elapsed() >= Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
}
