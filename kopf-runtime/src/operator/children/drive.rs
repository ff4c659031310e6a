//! The one loop over a child, related or index watch stream ([`Events`]): it stops on `stop` or
//! at the stream's end, logs and reports failures and recoveries, and reports every event to
//! the stream's health before the watch handles it.
//!
//! ```text
//!  while let Some(event) = events.next().await { …the watch's own handling… }
//! ```
//!
//! A type with an `async fn next` rather than a function taking an async callback: the watches
//! run in spawned tasks, and the futures of async closures that borrow the watch's state are
//! not proven `Send` by the compiler (higher-ranked lifetimes), while a plain loop's are.

use futures::{Stream, StreamExt};
use kube::runtime::watcher::{self, Event};
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use super::cause::report_error;
use super::progress::Progress;

/// The events of one watch stream (`what` names it in the logs), each reported to its
/// [`Progress`] before it is handed out.
pub(super) struct Events<'a, S> {
    stream: S,
    progress: Progress,
    what: &'a str,
    stop: &'a CancellationToken,
    /// The last failure logged as an error (its repeats are logged at debug level); `Some`
    /// until the stream recovers.
    last_error: Option<String>,
}

impl<'a, K, S> Events<'a, S>
where
    S: Stream<Item = Result<Event<K>, watcher::Error>> + Unpin,
{
    /// The events of `stream` (pinned, e.g. by `std::pin::pin!`), until `stop`.
    pub(super) fn new(
        stream: S,
        progress: Progress,
        what: &'a str,
        stop: &'a CancellationToken,
    ) -> Self {
        Self {
            stream,
            progress,
            what,
            stop,
            last_error: None,
        }
    }

    /// The stream's next event, reported to the progress; `None` once `stop` is cancelled or the
    /// stream ended (then no more is to be asked). A failure is logged (repeats of the same one
    /// at debug level, see `report_error`) and reported, and the stream goes on: it retries with
    /// its own backoff. The first event after a failure, other than a relist's start, is logged
    /// as the recovery. The stream's end is reported (the stream is dead) and logged as an error.
    ///
    /// # Cancellation safety
    /// Cancel-safe: it awaits only `stop` and the stream's next item, and loses no event when
    /// dropped. `stop` is checked only here, so an event handed out is handled to its end.
    pub(super) async fn next(&mut self) -> Option<Event<K>> {
        let what = self.what;
        loop {
            let next = tokio::select! {
                () = self.stop.cancelled() => return None,
                next = self.stream.next() => next,
            };
            let event = match next {
                Some(Ok(event)) => event,
                Some(Err(err)) => {
                    let cause = report_error(what, &err, &mut self.last_error);
                    self.progress.failed(cause);
                    continue;
                }
                None => {
                    self.progress.ended();
                    error!(watch = %what, "the watch stream ended");
                    return None;
                }
            };
            if !matches!(event, Event::Init) && self.last_error.take().is_some() {
                info!(watch = %what, "the watch has recovered");
            }
            self.progress.event(&event);
            return Some(event);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::task::{Context, Poll};

    use futures::future::BoxFuture;
    use http::{Request, Response};
    use kube::client::Body;
    use tower::BoxError;

    use super::*;
    use crate::operator::health::{Health, KindHealth, WatchPhase};

    /// An API server the tests never reach: their streams are made up.
    #[derive(Clone)]
    struct Unreached;

    impl tower::Service<Request<Body>> for Unreached {
        type Response = Response<Body>;
        type Error = BoxError;
        type Future = BoxFuture<'static, Result<Response<Body>, BoxError>>;

        fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _request: Request<Body>) -> Self::Future {
            Box::pin(async { Err("the tests reach no API server".into()) })
        }
    }

    fn progress(health: &Arc<KindHealth>) -> Progress {
        Progress::start(health, &kube::Client::new(Unreached, "default")).0
    }

    fn alive(health: &Arc<KindHealth>) -> Result<(), String> {
        let kinds = Health {
            kinds: vec![health.clone()],
            ..Health::default()
        };
        kinds.alive()
    }

    #[tokio::test]
    async fn hands_out_the_events_and_reports_the_failures_and_the_end() {
        let health = Arc::new(KindHealth::new("ConfigMap (children)".into(), 1));
        let stop = CancellationToken::new();
        let items = vec![
            Ok(Event::Init),
            Ok(Event::InitApply(1)),
            Ok(Event::InitDone),
            Err(watcher::Error::NoResourceVersion),
            Err(watcher::Error::NoResourceVersion),
            Ok(Event::Init),
            Ok(Event::InitApply(2)),
            Ok(Event::InitDone),
            Ok(Event::Apply(3)),
        ];
        let stream = futures::stream::iter(items);
        let mut events = Events::new(stream, progress(&health), "the children ConfigMap", &stop);
        let mut seen = Vec::new();
        while let Some(event) = events.next().await {
            // A relist's start is not the recovery; what follows it is.
            let failing = events.last_error.is_some();
            seen.push(format!("{event:?} failing={failing}"));
        }
        assert_eq!(
            seen,
            [
                "Init failing=false",
                "InitApply(1) failing=false",
                "InitDone failing=false",
                "Init failing=true",
                "InitApply(2) failing=false",
                "InitDone failing=false",
                "Apply(3) failing=false",
            ]
        );
        assert_eq!(health.watch_counts(), (2, 1), "two failures, one relist");
        assert_eq!(health.phase(), WatchPhase::Watching);
        assert!(
            alive(&health).is_err(),
            "the stream ended: the watch is dead"
        );
    }

    #[tokio::test]
    async fn stops_when_told_without_ending_the_watch() {
        let health = Arc::new(KindHealth::new("ConfigMap (related)".into(), 1));
        let stop = CancellationToken::new();
        let stream = futures::stream::pending::<Result<Event<u32>, watcher::Error>>();
        let mut events = Events::new(stream, progress(&health), "the related ConfigMap", &stop);
        stop.cancel();
        assert!(events.next().await.is_none());
        assert_eq!(health.watch_counts(), (0, 0));
        assert_eq!(alive(&health), Ok(()));
    }
}
