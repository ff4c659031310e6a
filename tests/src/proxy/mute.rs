//! Muted responses: bodies that stop forwarding without closing, as over a half-open TCP
//! connection or through a stuck proxy or load balancer (see
//! [`ProxyHandle::mute`](super::ProxyHandle::mute)).
//!
//! Every forwarded body goes through a [`muted`] wrapper that knows its request; while a mute
//! that matches the request is in place, the wrapper passes nothing on — neither the frames
//! the API server sends (they wait, unread, so its side backs up as over a dead path) nor the
//! body's end. When the mute is lifted, what was held goes on.

use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::Stream;
use http::Method;
use http_body::{Body, Frame};
use http_body_util::BodyExt as _;
use tokio::sync::watch;

use super::rules::Match;

/// The mutes in place, each with its id.
#[derive(Debug)]
pub(crate) struct Mutes {
    active: watch::Sender<Vec<(u64, Match)>>,
    next_id: AtomicU64,
}

impl Default for Mutes {
    fn default() -> Self {
        Self {
            active: watch::Sender::new(Vec::new()),
            next_id: AtomicU64::new(1),
        }
    }
}

impl Mutes {
    /// Mutes the responses of the requests `matcher` selects; returns the mute's id.
    pub(crate) fn add(&self, matcher: Match) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.active.send_modify(|active| active.push((id, matcher)));
        id
    }

    /// Lifts a mute; `false` if there was none with that id.
    pub(crate) fn remove(&self, id: u64) -> bool {
        self.active.send_if_modified(|active| {
            let before = active.len();
            active.retain(|(mute, _)| *mute != id);
            active.len() != before
        })
    }

    fn subscribe(&self) -> watch::Receiver<Vec<(u64, Match)>> {
        self.active.subscribe()
    }
}

/// Waits until no mute selects the request `method` `path_and_query` (at once if none does).
async fn unmuted(mutes: &mut watch::Receiver<Vec<(u64, Match)>>, method: &Method, path: &str) {
    loop {
        let muted = mutes
            .borrow_and_update()
            .iter()
            .any(|(_, m)| m.matches(method, path));
        if !muted {
            return;
        }
        if mutes.changed().await.is_err() {
            // The proxy is gone: nothing will ever lift the mute.
            std::future::pending::<()>().await;
        }
    }
}

type Frames<E> = Pin<Box<dyn Stream<Item = Result<Frame<Bytes>, E>> + Send>>;

/// A response body that forwards nothing while a mute selects its request.
pub(crate) struct MutedBody<E> {
    /// In a mutex only to be `Sync` (as boxed response bodies must be); never contended.
    frames: Mutex<Frames<E>>,
}

impl<E> std::fmt::Debug for MutedBody<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MutedBody").finish_non_exhaustive()
    }
}

/// `inner`, the body of the answer to `method` `path_and_query`, held while `mutes` select it.
pub(crate) fn muted<B>(inner: B, mutes: &Mutes, method: Method, path: String) -> MutedBody<B::Error>
where
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Send + 'static,
{
    let state = (inner, mutes.subscribe(), method, path);
    let frames =
        futures::stream::unfold(state, |(mut inner, mut mutes, method, path)| async move {
            unmuted(&mut mutes, &method, &path).await;
            let frame = inner.frame().await;
            // What arrived while muted (the end too) waits until the mute is lifted.
            unmuted(&mut mutes, &method, &path).await;
            Some((frame?, (inner, mutes, method, path)))
        });
    MutedBody {
        frames: Mutex::new(Box::pin(frames)),
    }
}

impl<E> Body for MutedBody<E> {
    type Data = Bytes;
    type Error = E;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, E>>> {
        let frames = self
            .frames
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        frames.as_mut().poll_next(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::SinkExt as _;
    use futures::channel::mpsc;
    use http_body_util::StreamBody;

    use super::*;

    type Chunk = Result<Frame<Bytes>, std::convert::Infallible>;

    const WATCH: &str = "/api/v1/namespaces/a/configmaps?watch=true";

    /// A body fed through a channel, wrapped for a watch of `WATCH`.
    fn body(mutes: &Mutes) -> (mpsc::Sender<Chunk>, MutedBody<std::convert::Infallible>) {
        let (tx, rx) = mpsc::channel(8);
        let body = muted(StreamBody::new(rx), mutes, Method::GET, WATCH.to_owned());
        (tx, body)
    }

    /// The next frame's data, or `None` at the end; `Err` if nothing comes within a second.
    async fn next(body: &mut MutedBody<std::convert::Infallible>) -> Result<Option<Bytes>, ()> {
        let frame = tokio::time::timeout(Duration::from_secs(1), body.frame()).await;
        let frame = frame.map_err(|_| ())?;
        Ok(frame.map(|f| f.expect("no error").into_data().expect("data")))
    }

    fn data(text: &'static str) -> Chunk {
        Ok(Frame::data(Bytes::from_static(text.as_bytes())))
    }

    #[tokio::test(start_paused = true)]
    async fn a_muted_stream_forwards_nothing_until_unmuted_then_what_was_held() {
        let mutes = Mutes::default();
        let (mut tx, mut watch) = body(&mutes);
        let (mut other_tx, mut other) = {
            let (tx, rx) = mpsc::channel(8);
            let list = "/api/v1/namespaces/a/configmaps?limit=500";
            (
                tx,
                muted(StreamBody::new(rx), &mutes, Method::GET, list.to_owned()),
            )
        };
        tx.send(data("one\n")).await.expect("sent");
        assert_eq!(
            next(&mut watch).await,
            Ok(Some(Bytes::from_static(b"one\n")))
        );
        // Muted while it streams: the next event and the end are held; other requests pass.
        let id = mutes.add(Match::watches());
        tx.send(data("two\n")).await.expect("sent");
        other_tx.send(data("{}")).await.expect("sent");
        drop(tx);
        assert_eq!(next(&mut watch).await, Err(()), "a muted stream forwarded");
        assert_eq!(next(&mut other).await, Ok(Some(Bytes::from_static(b"{}"))));
        // A stream that starts while the mute is in place is muted too.
        let (mut late_tx, mut late) = body(&mutes);
        late_tx.send(data("x\n")).await.expect("sent");
        assert_eq!(next(&mut late).await, Err(()));
        // Lifted: what was held goes on, then the end.
        assert!(mutes.remove(id));
        assert!(!mutes.remove(id));
        assert_eq!(
            next(&mut watch).await,
            Ok(Some(Bytes::from_static(b"two\n")))
        );
        assert_eq!(next(&mut watch).await, Ok(None));
        assert_eq!(next(&mut late).await, Ok(Some(Bytes::from_static(b"x\n"))));
    }
}
