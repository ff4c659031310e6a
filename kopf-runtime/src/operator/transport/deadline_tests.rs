//! The request deadline on paused time: a request (or a body) that never ends fails at its
//! deadline; a followed log is never cut.

use std::convert::Infallible;
use std::future::poll_fn;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Method, Request, Response, Uri};
use http_body::{Body, Frame};
use tokio::time::Instant;
use tower::{BoxError, Layer, Service, ServiceExt};

use super::{DeadlineBody, DeadlineLayer, RequestTimedOut, long_running};

const DEADLINE: Duration = Duration::from_secs(30);

/// A body that sends `first` (if any) at once, then never ends.
#[derive(Debug)]
struct Endless {
    first: Option<&'static [u8]>,
}

impl Body for Endless {
    type Data = &'static [u8];
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        match self.first.take() {
            Some(data) => Poll::Ready(Some(Ok(Frame::data(data)))),
            None => Poll::Pending,
        }
    }
}

/// A server that never answers (`answer: false`), or answers at once with an endless body.
#[derive(Debug, Clone, Copy)]
struct Server {
    answer: bool,
}

impl Service<Request<()>> for Server {
    type Response = Response<Endless>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Endless>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Request<()>) -> Self::Future {
        let answer = self.answer;
        Box::pin(async move {
            if !answer {
                std::future::pending::<()>().await;
            }
            Ok(Response::new(Endless {
                first: Some(b"{\"kind\":"),
            }))
        })
    }
}

fn get(uri: &str) -> Request<()> {
    Request::get(uri).body(()).expect("a valid request")
}

async fn send(server: Server, uri: &str) -> Result<Response<DeadlineBody<Endless>>, BoxError> {
    DeadlineLayer::uniform(DEADLINE)
        .layer(server)
        .oneshot(get(uri))
        .await
}

/// `send`, failing the test if the answer takes longer than twice the deadline.
async fn send_bounded(
    server: Server,
    uri: &str,
) -> Result<Response<DeadlineBody<Endless>>, BoxError> {
    tokio::time::timeout(DEADLINE * 2, send(server, uri))
        .await
        .expect("the request deadline did not cut it")
}

/// The next frame of `body`: `Some(Ok(len))` for data, `Some(Err)` for an error.
async fn next_frame(body: &mut DeadlineBody<Endless>) -> Option<Result<usize, BoxError>> {
    let frame = poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await?;
    Some(frame.map(|f| f.into_data().map_or(0, <[u8]>::len)))
}

fn timed_out(err: &BoxError) -> bool {
    err.downcast_ref::<RequestTimedOut>() == Some(&RequestTimedOut { after: DEADLINE })
}

const CONFIGMAP: &str = "/api/v1/namespaces/ns/configmaps/cm";

#[tokio::test(start_paused = true)]
async fn a_request_never_answered_fails_at_its_deadline() {
    let start = Instant::now();
    let err = send_bounded(Server { answer: false }, CONFIGMAP)
        .await
        .expect_err("must time out");
    assert!(timed_out(&err), "{err}");
    assert_eq!(start.elapsed(), DEADLINE);
    assert!(err.to_string().contains("30s"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn a_body_that_never_ends_fails_at_the_requests_deadline() {
    let start = Instant::now();
    let mut body = send(Server { answer: true }, CONFIGMAP)
        .await
        .expect("answered at once")
        .into_body();
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert!(matches!(next_frame(&mut body).await, Some(Ok(8))));
    let err = tokio::time::timeout(DEADLINE * 2, next_frame(&mut body))
        .await
        .expect("the request deadline did not cut the body")
        .expect("an error")
        .unwrap_err();
    assert!(timed_out(&err), "{err}");
    assert_eq!(start.elapsed(), DEADLINE);
    // The body ends after its error: no further wait.
    assert!(next_frame(&mut body).await.is_none());
    assert!(body.is_end_stream());
}

#[tokio::test(start_paused = true)]
async fn a_followed_log_is_never_cut() {
    // (Watches have bounds of their own: see `watch_deadline_tests`.)
    let long = DEADLINE * 20;
    let log = "/api/v1/namespaces/ns/pods/p/log?follow=true&timeoutSeconds=290";
    // Its answer may take as long as it takes…
    let waiting = tokio::time::timeout(long, send(Server { answer: false }, log)).await;
    assert!(waiting.is_err(), "a followed log was cut");
    // …and so may its lines.
    let mut body = send(Server { answer: true }, log)
        .await
        .expect("answered")
        .into_body();
    assert!(matches!(next_frame(&mut body).await, Some(Ok(8))));
    let start = Instant::now();
    let reading = tokio::time::timeout(long, next_frame(&mut body)).await;
    assert!(reading.is_err(), "a followed log's stream was cut");
    assert_eq!(start.elapsed(), long);
    // Positive control: the same request without `follow` is cut.
    let list = "/api/v1/namespaces/ns/pods/p/log?timeoutSeconds=290";
    let err = send_bounded(Server { answer: false }, list)
        .await
        .unwrap_err();
    assert!(timed_out(&err), "{err}");
}

#[test]
fn knows_the_requests_the_api_server_keeps_open() {
    let long = |uri: &str| long_running(&uri.parse::<Uri>().expect("a valid URI"));
    for uri in [
        "/api/v1/configmaps?watch=true",
        "/apis/example.com/v1/namespaces/ns/things?labelSelector=a&watch=1",
        "/api/v1/watch/namespaces/ns/pods",
        "/apis/apps/v1/watch/deployments",
        "/api/v1/namespaces/ns/pods/p/log?follow=true",
        "/api/v1/namespaces/ns/pods/p/exec?command=ls",
        "/api/v1/namespaces/ns/pods/p/attach",
        "/api/v1/namespaces/ns/pods/p/portforward?ports=80",
        "/api/v1/namespaces/ns/services/s/proxy/metrics",
        "/api/v1/nodes/n/proxy/stats",
    ] {
        assert!(long(uri), "{uri}");
    }
    for uri in [
        CONFIGMAP,
        "/api/v1/configmaps?watch=false",
        "/api/v1/configmaps?resourceVersion=1&allowWatchBookmarks=true",
        "/api/v1/namespaces/ns/pods/p/log",
        "/api/v1/namespaces/proxy/configmaps/watch",
        "/apis/example.com/v1/namespaces/ns/things/t/status",
        "/apis/coordination.k8s.io/v1/namespaces/ns/leases/exec",
        "/api/v1/namespaces/ns/configmaps/proxy",
    ] {
        assert!(!long(uri), "{uri}");
    }
}

#[tokio::test(start_paused = true)]
async fn writes_and_reads_have_their_own_deadlines() {
    let layer = DeadlineLayer {
        reads: DEADLINE,
        writes: Duration::from_secs(3),
    };
    let server = Server { answer: false };
    for (method, deadline) in [
        (Method::PATCH, layer.writes),
        (Method::POST, layer.writes),
        (Method::DELETE, layer.writes),
        (Method::GET, layer.reads),
    ] {
        let start = Instant::now();
        let request = Request::builder()
            .method(method.clone())
            .uri(CONFIGMAP)
            .body(());
        let sent = layer
            .layer(server)
            .oneshot(request.expect("a valid request"));
        let err = tokio::time::timeout(DEADLINE * 2, sent)
            .await
            .expect("the request deadline did not cut it")
            .unwrap_err();
        let timed_out = err.downcast_ref::<RequestTimedOut>();
        assert_eq!(
            timed_out,
            Some(&RequestTimedOut { after: deadline }),
            "{method}"
        );
        assert_eq!(start.elapsed(), deadline, "{method}");
    }
}
