//! The `http_poll` example (`kopf-examples/src/bin/http_poll.rs`) against the real API server and
//! a real HTTP server on loopback: the timer mirrors a 200 into `status.http_poll`, records a
//! 404 without retrying it, refuses a `spec.field` that is not a path, retries a 503 within its
//! cycle, gives up on a slow endpoint at its request timeout and polls again at the next
//! interval, and polls no more once its object is deleted.
//!
//! The HTTP server counts the requests per path, with their instants, so the tests see the
//! retries and the cycles from the endpoint's side.

#[allow(dead_code, unreachable_pub)]
#[path = "../../kopf-examples/src/bin/http_poll.rs"]
mod http_poll;
mod operator_common;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use kopf_examples::crd::{KopfExample, KopfExampleSpec};
use kopf_runtime::Operator;
use kopf_tests::{TestNamespace, wait_for, wait_until};
use kube::api::{Api, PostParams};
use operator_common::{PROMPTLY, create, delete, example_namespace, operator, status, wait_gone};
use serde_json::Value;
use tokio::net::TcpListener;

/// The timer's `interval`.
const INTERVAL: Duration = Duration::from_secs(10);
/// The JSON body of a healthy answer.
const HEALTHY_BODY: &str = r#"{"status": "ok"}"#;
/// How long a stalled request goes unanswered (far past the request timeout).
const STALL: Duration = Duration::from_secs(60);
/// Long enough for a whole failing cycle (3 attempts) and the next cycle.
const TWO_CYCLES: Duration = Duration::from_secs(60);

/// How the endpoint answers the requests for one path.
#[derive(Debug, Clone, Copy)]
enum Behaviour {
    /// 200 with [`HEALTHY_BODY`].
    Healthy,
    /// 404.
    Missing,
    /// 503 to the first `n` requests, then healthy.
    FailFirst(usize),
    /// No answer for [`STALL`] to the first `n` requests, then healthy.
    StallFirst(usize),
}

/// The requests an endpoint received: `(path, when)`, in order.
type Hits = Arc<Mutex<Vec<(String, Instant)>>>;

/// An HTTP/1 server on loopback answering per path, counting the requests. Dropping it stops
/// it and closes its connections.
struct Endpoint {
    base: String,
    hits: Hits,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Endpoint {
    async fn start(routes: &[(&str, Behaviour)]) -> anyhow::Result<Self> {
        let routes: Arc<HashMap<String, Behaviour>> = Arc::new(
            routes
                .iter()
                .map(|(path, behaviour)| ((*path).to_owned(), *behaviour))
                .collect(),
        );
        let hits = Hits::default();
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let recorded = Arc::clone(&hits);
        let task = tokio::spawn(async move {
            // Aborting this task drops the set, which aborts (and closes) every connection.
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                while connections.try_join_next().is_some() {}
                let (routes, hits) = (Arc::clone(&routes), Arc::clone(&recorded));
                connections.spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        answer(request, Arc::clone(&routes), Arc::clone(&hits))
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(Self { base, hits, task })
    }

    /// The instants of the requests for `path`.
    fn hits(&self, path: &str) -> Vec<Instant> {
        let hits = self.hits.lock().unwrap_or_else(PoisonError::into_inner);
        hits.iter()
            .filter(|(p, _)| p == path)
            .map(|(_, t)| *t)
            .collect()
    }

    /// Every path requested, once each.
    fn paths(&self) -> Vec<String> {
        let hits = self.hits.lock().unwrap_or_else(PoisonError::into_inner);
        let mut paths: Vec<String> = hits.iter().map(|(p, _)| p.clone()).collect();
        paths.sort();
        paths.dedup();
        paths
    }

    /// The example's shared state, pointed at this endpoint.
    fn poller(&self) -> anyhow::Result<http_poll::Poller> {
        http_poll::Poller::new(&self.base)
    }
}

/// Records the request and answers it as its path's [`Behaviour`] says (404 for other paths).
async fn answer(
    request: Request<Incoming>,
    routes: Arc<HashMap<String, Behaviour>>,
    hits: Hits,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = request.uri().path().to_owned();
    let earlier = {
        let mut hits = hits.lock().unwrap_or_else(PoisonError::into_inner);
        let earlier = hits.iter().filter(|(p, _)| *p == path).count();
        hits.push((path.clone(), Instant::now()));
        earlier
    };
    let (code, body) = match routes.get(&path) {
        Some(Behaviour::FailFirst(n)) if earlier < *n => {
            (StatusCode::SERVICE_UNAVAILABLE, "busy".to_owned())
        }
        Some(Behaviour::StallFirst(n)) if earlier < *n => {
            tokio::time::sleep(STALL).await;
            (StatusCode::SERVICE_UNAVAILABLE, "too late".to_owned())
        }
        Some(Behaviour::Missing) | None => (StatusCode::NOT_FOUND, "no such page".to_owned()),
        Some(_) => (StatusCode::OK, HEALTHY_BODY.to_owned()),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = code;
    Ok(response)
}

/// `status.http_poll` of the object (`null` if absent).
async fn polled(api: &Api<KopfExample>, name: &str) -> Value {
    status(api, name)
        .await
        .get("http_poll")
        .cloned()
        .unwrap_or_default()
}

/// Waits until `status.http_poll` satisfies `ok`, and returns it.
async fn wait_polled(
    api: &Api<KopfExample>,
    name: &str,
    what: &str,
    timeout: Duration,
    ok: impl Fn(&Value) -> bool,
) -> Value {
    wait_for(
        format!("{name}: status.http_poll {what}"),
        timeout,
        || async {
            let got = polled(api, name).await;
            if ok(&got) {
                Ok(got)
            } else {
                Err(format!("status.http_poll = {got}"))
            }
        },
    )
    .await
}

/// A test namespace, an endpoint with `routes`, and the operator running `http_poll` with the
/// endpoint's [`Poller`](http_poll::Poller) in its services.
async fn setup(
    routes: &[(&str, Behaviour)],
) -> anyhow::Result<(TestNamespace, Api<KopfExample>, Endpoint, Operator)> {
    let (ns, api) = example_namespace().await?;
    let endpoint = Endpoint::start(routes).await?;
    let op = operator(&ns, &["http_poll"])
        .await?
        .data(endpoint.poller()?)
        .start()
        .await?;
    Ok((ns, api, endpoint, op))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_200_is_mirrored_and_a_404_recorded() -> anyhow::Result<()> {
    let (ns, api, endpoint, op) = setup(&[
        ("/healthy", Behaviour::Healthy),
        ("/missing", Behaviour::Missing),
    ])
    .await?;
    create(&api, "healthy", "/healthy").await?;
    create(&api, "missing", "/missing").await?;
    create(&api, "outside", "http://169.254.169.254/latest/meta-data").await?;
    let bare = KopfExample::new("no-field", KopfExampleSpec::default());
    api.create(&PostParams::default(), &bare).await?;

    // 1. A 200: the answer is the result.
    let healthy = wait_polled(&api, "healthy", "ok", PROMPTLY, |s| s["ok"] == true).await;
    assert_eq!(healthy["code"], 200, "{healthy}");
    assert_eq!(healthy["bodyBytes"], HEALTHY_BODY.len(), "{healthy}");
    assert_eq!(healthy["reported"], "ok", "{healthy}");
    assert_eq!(healthy["attempt"], 1, "{healthy}");
    assert_eq!(healthy["error"], Value::Null, "{healthy}");
    assert!(healthy["checkedAt"].is_string(), "{healthy}");
    assert_eq!(healthy["lastOkAt"], healthy["checkedAt"], "{healthy}");

    // 2. A 404 is recorded, not retried: the next request comes with the next cycle.
    let missing = wait_polled(&api, "missing", "code 404", PROMPTLY, |s| s["code"] == 404).await;
    assert_eq!(missing["ok"], false, "{missing}");
    assert_eq!(missing["attempt"], 1, "{missing}");
    assert!(missing["error"].is_string(), "{missing}");
    assert_eq!(missing.get("lastOkAt"), None, "{missing}");
    wait_until("/missing asked again", PROMPTLY, || async {
        endpoint.hits("/missing").len() >= 2
    })
    .await;
    let hits = endpoint.hits("/missing");
    assert!(hits[1] - hits[0] >= INTERVAL, "not retried: {hits:?}");

    // 3. A spec.field that is not a path: refused, with no request.
    let outside = wait_polled(&api, "outside", "refused", PROMPTLY, |s| s["ok"] == false).await;
    assert_eq!(outside["code"], Value::Null, "{outside}");
    assert!(
        outside["error"]
            .as_str()
            .is_some_and(|e| e.contains("not a URL")),
        "{outside}"
    );
    assert_eq!(endpoint.paths(), ["/healthy", "/missing"]);

    // 4. The object without spec.field got no timer (the others, polled twice by now, did).
    assert_eq!(polled(&api, "no-field").await, Value::Null);

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_is_retried_within_the_cycle() -> anyhow::Result<()> {
    let (ns, api, endpoint, op) = setup(&[("/flaky", Behaviour::FailFirst(2))]).await?;
    create(&api, "flaky", "/flaky").await?;

    // Two 503s, then the third attempt of the same cycle succeeds.
    let flaky = wait_polled(&api, "flaky", "ok", PROMPTLY, |s| s["ok"] == true).await;
    assert_eq!(flaky["attempt"], 3, "{flaky}");
    assert_eq!(flaky["code"], 200, "{flaky}");
    assert_eq!(
        flaky["error"],
        Value::Null,
        "the failure is cleared: {flaky}"
    );
    let hits = endpoint.hits("/flaky");
    assert_eq!(hits.len(), 3, "{hits:?}");
    for pair in hits.windows(2) {
        assert!(pair[1] - pair[0] >= http_poll::RETRY_DELAY, "{hits:?}");
    }
    assert!(
        hits[2] - hits[0] < INTERVAL,
        "the retries came within the cycle, sooner than the interval: {hits:?}"
    );

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_endpoint_times_out_and_the_next_cycle_runs() -> anyhow::Result<()> {
    // The whole first cycle (3 attempts) stalls; the next cycle is answered.
    let (ns, api, endpoint, op) = setup(&[("/slow", Behaviour::StallFirst(3))]).await?;
    create(&api, "slow", "/slow").await?;

    // The failure of the last attempt stays in the status until the next cycle.
    let failed = wait_polled(&api, "slow", "timed out 3 times", TWO_CYCLES, |s| {
        s["ok"] == false && s["attempt"] == 3
    })
    .await;
    let timeout = format!("within {:?}", http_poll::REQUEST_TIMEOUT);
    assert!(
        failed["error"]
            .as_str()
            .is_some_and(|e| e.contains(&timeout)),
        "{failed}"
    );
    assert_eq!(failed["code"], Value::Null, "{failed}");

    let recovered = wait_polled(&api, "slow", "ok", TWO_CYCLES, |s| s["ok"] == true).await;
    assert_eq!(recovered["attempt"], 1, "a new cycle: {recovered}");
    let hits = endpoint.hits("/slow");
    assert_eq!(hits.len(), 4, "{hits:?}");
    // Each stalled request was given up at the request timeout (not after the stall), then
    // retried after the retry delay.
    let cut = http_poll::REQUEST_TIMEOUT + http_poll::RETRY_DELAY;
    // The endpoint sees a request when it arrives, the client's timeout starts when it is
    // sent: the gap between two arrivals differs from the client's by the difference of the
    // two requests' transit times (a CI run saw 4.9988 s against 5 s), so the lower bound
    // allows that much, and no more.
    let transit = Duration::from_millis(50);
    for pair in hits[..3].windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            gap + transit >= cut && gap < cut + Duration::from_secs(5),
            "{hits:?}"
        );
    }
    // The next cycle: one interval after the end of the last (timed-out) attempt.
    assert!(
        hits[3] - hits[2] >= http_poll::REQUEST_TIMEOUT + INTERVAL,
        "{hits:?}"
    );

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_object_stops_its_timer() -> anyhow::Result<()> {
    let (ns, api, endpoint, op) = setup(&[
        ("/doomed", Behaviour::Healthy),
        ("/control", Behaviour::Healthy),
    ])
    .await?;
    create(&api, "doomed", "/doomed").await?;
    create(&api, "control", "/control").await?;
    wait_polled(&api, "doomed", "ok", PROMPTLY, |s| s["ok"] == true).await;
    wait_polled(&api, "control", "ok", PROMPTLY, |s| s["ok"] == true).await;

    // The object is gone once the timer has stopped (the finalizer is released then).
    delete(&api, "doomed").await?;
    wait_gone(&api, "doomed").await;
    let gone = Instant::now();
    let doomed = endpoint.hits("/doomed").len();

    // Positive control: the other object's timer, with the same interval, polls twice more —
    // so the window below spans more than an interval and the timers were running in it.
    let control = endpoint.hits("/control").len();
    wait_until("/control polled twice more", PROMPTLY, || async {
        endpoint.hits("/control").len() >= control + 2
    })
    .await;
    assert!(gone.elapsed() > INTERVAL);
    assert_eq!(
        endpoint.hits("/doomed").len(),
        doomed,
        "no request for the deleted object after it was gone"
    );

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}
