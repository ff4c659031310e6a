//! The watch deadline on paused time: a watch body that delivers keeps going however long it
//! lasts, a silent one fails after its `timeoutSeconds` plus the grace, its headers have the
//! read deadline, and other requests keep their own deadlines.

use std::convert::Infallible;
use std::future::poll_fn;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response, Uri};
use http_body::{Body, Frame};
use tokio::time::{Instant, Sleep};
use tower::{BoxError, Layer, Service, ServiceExt};

use super::super::deadline::{DeadlineBody, DeadlineLayer, RequestTimedOut};
use super::{WATCH_GRACE, WatchBound, WatchSilent, watch_bound};

const READS: Duration = Duration::from_secs(30);
const S: fn(u64) -> Duration = Duration::from_secs;

/// A body that sends a frame every `every`, `frames` times, then nothing, never ending.
#[derive(Debug)]
struct Ticking {
    every: Duration,
    frames: usize,
    next: Pin<Box<Sleep>>,
}

impl Ticking {
    fn new(every: Duration, frames: usize) -> Self {
        Self {
            every,
            frames,
            next: Box::pin(tokio::time::sleep(every)),
        }
    }
}

impl Body for Ticking {
    type Data = &'static [u8];
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        if self.frames == 0 || self.next.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        self.frames -= 1;
        let every = self.every;
        self.next.as_mut().reset(Instant::now() + every);
        Poll::Ready(Some(Ok(Frame::data(b"{\"type\":\"BOOKMARK\"}\n"))))
    }
}

/// A server that answers at once with a [`Ticking`] body, or never (`every` is `None`).
#[derive(Debug, Clone, Copy)]
struct Server {
    every: Option<Duration>,
    frames: usize,
}

impl Service<Request<()>> for Server {
    type Response = Response<Ticking>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Ticking>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Request<()>) -> Self::Future {
        let this = *self;
        Box::pin(async move {
            let Some(every) = this.every else {
                return std::future::pending().await;
            };
            Ok(Response::new(Ticking::new(every, this.frames)))
        })
    }
}

async fn send(server: Server, uri: &str) -> Result<Response<DeadlineBody<Ticking>>, BoxError> {
    let request = Request::get(uri).body(()).expect("a valid request");
    DeadlineLayer::uniform(READS)
        .layer(server)
        .oneshot(request)
        .await
}

/// Reads `body` until it fails or `limit` passes: the frames read, and the error if any.
async fn read(body: &mut DeadlineBody<Ticking>, limit: Duration) -> (usize, Option<BoxError>) {
    let mut frames = 0;
    let reading = async {
        loop {
            match poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await {
                Some(Ok(_)) => frames += 1,
                Some(Err(err)) => return Some(err),
                None => return None,
            }
        }
    };
    let err = tokio::time::timeout(limit, reading).await.ok().flatten();
    (frames, err)
}

const WATCH: &str =
    "/apis/example.com/v1/things?allowWatchBookmarks=true&timeoutSeconds=10&watch=true";

#[tokio::test(start_paused = true)]
async fn a_watch_that_delivers_goes_on_and_a_silent_one_fails_after_its_bound() {
    let bound = S(10) + WATCH_GRACE;
    // A frame just within the bound each time, for far longer than the bound.
    let server = Server {
        every: Some(bound - Duration::from_millis(1)),
        frames: 20,
    };
    let start = Instant::now();
    let mut body = send(server, WATCH).await.expect("answered").into_body();
    let (frames, err) = read(&mut body, S(3600)).await;
    assert_eq!(frames, 20, "a delivering watch was cut");
    let err = err.expect("the silence ends the watch");
    assert_eq!(
        err.downcast_ref::<WatchSilent>(),
        Some(&WatchSilent { after: bound }),
        "{err}"
    );
    // Cut exactly one bound after its last frame.
    assert_eq!(
        start.elapsed(),
        (bound - Duration::from_millis(1)) * 20 + bound
    );
    assert!(err.to_string().contains("13s"), "{err}");
    assert!(body.is_end_stream());
}

#[tokio::test(start_paused = true)]
async fn a_watch_answer_must_come_within_the_read_deadline() {
    let start = Instant::now();
    let never = Server {
        every: None,
        frames: 0,
    };
    let err = tokio::time::timeout(S(3600), send(never, WATCH))
        .await
        .expect("the watch's headers were waited for without a bound")
        .expect_err("must time out");
    assert_eq!(
        err.downcast_ref::<RequestTimedOut>(),
        Some(&RequestTimedOut { after: READS }),
        "{err}"
    );
    assert_eq!(start.elapsed(), READS);
}

#[tokio::test(start_paused = true)]
async fn other_requests_keep_their_own_deadlines() {
    let server = Server {
        every: Some(S(7)),
        frames: 1000,
    };
    // A read's body has its request's deadline, whatever it delivers (frames do not extend it).
    let list = "/apis/example.com/v1/things?timeoutSeconds=10";
    let mut body = send(server, list).await.expect("answered").into_body();
    let (frames, err) = read(&mut body, S(3600)).await;
    let err = err.expect("the read is cut");
    assert_eq!(frames, 4);
    assert_eq!(
        err.downcast_ref::<RequestTimedOut>(),
        Some(&RequestTimedOut { after: READS }),
        "{err}"
    );
    // A followed log, silent after one line, is never cut.
    let silent = Server {
        every: Some(S(1)),
        frames: 1,
    };
    let log = "/api/v1/namespaces/ns/pods/p/log?follow=true&timeoutSeconds=10";
    let mut body = send(silent, log).await.expect("answered").into_body();
    let (frames, err) = read(&mut body, S(3600)).await;
    assert_eq!(frames, 1);
    assert!(err.is_none(), "a followed log was cut: {err:?}");
    // Positive control: the same silence on a watch is cut.
    let mut body = send(silent, WATCH).await.expect("answered").into_body();
    let (frames, err) = read(&mut body, S(3600)).await;
    assert_eq!(frames, 1);
    assert!(err.is_some_and(|e| e.downcast_ref::<WatchSilent>().is_some()));
}

#[tokio::test(start_paused = true)]
async fn a_watch_without_timeout_seconds_has_only_its_headers_deadline() {
    let silent = Server {
        every: Some(S(1)),
        frames: 1,
    };
    let mut body = send(silent, "/api/v1/watch/namespaces/ns/pods")
        .await
        .expect("answered")
        .into_body();
    let (frames, err) = read(&mut body, S(3600)).await;
    assert_eq!(frames, 1);
    assert!(err.is_none(), "cut: {err:?}");
}

#[test]
fn knows_watches_and_their_bounds() {
    let bound = |uri: &str| watch_bound(&uri.parse::<Uri>().expect("a valid URI"));
    let idle = |seconds| {
        Some(WatchBound {
            idle: Some(S(seconds) + WATCH_GRACE),
        })
    };
    assert_eq!(bound(WATCH), idle(10));
    assert_eq!(bound("/api/v1/pods?watch=1&timeoutSeconds=117"), idle(117));
    assert_eq!(
        bound("/apis/apps/v1/watch/deployments?timeoutSeconds=5"),
        idle(5)
    );
    let unbounded = Some(WatchBound { idle: None });
    assert_eq!(bound("/api/v1/pods?watch=true"), unbounded);
    assert_eq!(bound("/api/v1/pods?watch=true&timeoutSeconds=0"), unbounded);
    assert_eq!(bound("/api/v1/pods?watch=true&timeoutSeconds=x"), unbounded);
    for other in [
        "/api/v1/pods?timeoutSeconds=10",
        "/api/v1/pods?watch=false&timeoutSeconds=10",
        "/api/v1/namespaces/ns/pods/p/log?follow=true",
        "/api/v1/namespaces/watch/pods",
    ] {
        assert_eq!(bound(other), None, "{other}");
    }
}
