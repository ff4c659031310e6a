//! Response accounting: the bytes and the newline-delimited lines (a watch's events) of every
//! forwarded response body, per request key, so a test can compare what clients received.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::Method;
use http_body::{Body, Frame};

use super::lock;
use super::rules::{Match, is_watch};
use super::stats::{MAX_KEYS, OTHER_KEY};

/// What the proxy passed back to its client for the requests a [`Match`] selects; see
/// [`ProxyHandle::received`](super::ProxyHandle::received).
///
/// # Examples
///
/// ```no_run
/// # async fn doc(proxy: &kopf_tests::proxy::FaultProxy) {
/// use kopf_tests::proxy::Match;
/// let watched = proxy.handle().received(&Match::watches().path("/kopfexamples"));
/// println!("{} events, {} bytes in {} watch responses", watched.lines, watched.bytes,
///     watched.responses);
/// # }
/// # let _ = doc;
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Received {
    /// Forwarded responses (their headers arrived from the API server).
    pub responses: u64,
    /// Bytes of their bodies.
    pub bytes: u64,
    /// Newlines in their bodies: for a watch, the events.
    pub lines: u64,
}

/// Per `(method, path without query, is watch)`, what was received.
#[derive(Debug, Default)]
pub(crate) struct Traffic {
    received: BTreeMap<(Method, String, bool), Received>,
}

impl Traffic {
    /// The key of a request, as [`Stats`](super::stats::Stats) counts it.
    pub(crate) fn key(&self, method: &Method, path_and_query: &str) -> (Method, String, bool) {
        let path = path_and_query
            .split_once('?')
            .map_or(path_and_query, |(path, _)| path);
        let watch = is_watch(method, path_and_query);
        let key = (method.clone(), path.to_owned(), watch);
        if self.received.contains_key(&key) || self.received.len() < MAX_KEYS {
            key
        } else {
            (method.clone(), OTHER_KEY.to_owned(), watch)
        }
    }

    fn add(&mut self, key: &(Method, String, bool), responses: u64, chunk: &[u8]) {
        let entry = self.received.entry(key.clone()).or_default();
        entry.responses += responses;
        entry.bytes += chunk.len() as u64;
        entry.lines += chunk.iter().filter(|b| **b == b'\n').count() as u64;
    }

    /// The sum over the keys `matcher` selects (a watch is presented as `path?watch=true`).
    pub(crate) fn received(&self, matcher: &Match) -> Received {
        let mut sum = Received::default();
        for ((method, path, watch), received) in &self.received {
            let shown = if *watch {
                format!("{path}?watch=true")
            } else {
                path.clone()
            };
            if matcher.matches(method, &shown) {
                sum.responses += received.responses;
                sum.bytes += received.bytes;
                sum.lines += received.lines;
            }
        }
        sum
    }
}

/// A forwarded response body that adds what passes through it to the traffic counters.
#[derive(Debug)]
pub(crate) struct CountingBody<B> {
    inner: B,
    traffic: Arc<Mutex<Traffic>>,
    key: (Method, String, bool),
}

impl<B> CountingBody<B> {
    /// Counts one response for `key` now, and its body as it streams.
    pub(crate) fn new(inner: B, traffic: Arc<Mutex<Traffic>>, key: (Method, String, bool)) -> Self {
        lock(&traffic).add(&key, 1, &[]);
        Self {
            inner,
            traffic,
            key,
        }
    }
}

impl<B> Body for CountingBody<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let frame = ready!(Pin::new(&mut self.inner).poll_frame(cx));
        if let Some(Ok(frame)) = &frame
            && let Some(data) = frame.data_ref()
        {
            lock(&self.traffic).add(&self.key, 0, data);
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_bytes_and_lines_per_key() {
        let mut traffic = Traffic::default();
        let watch = traffic.key(&Method::GET, "/apis/x/v1/things?watch=true&rv=1");
        let list = traffic.key(&Method::GET, "/apis/x/v1/things?limit=500");
        traffic.add(&watch, 1, b"{\"type\":\"ADDED\"}\n{\"type\":");
        traffic.add(&watch, 0, b"\"MODIFIED\"}\n");
        traffic.add(&list, 1, b"{\"items\":[]}");
        let watched = traffic.received(&Match::watches().path("/things"));
        assert_eq!(
            (watched.responses, watched.lines, watched.bytes),
            (1, 2, 37)
        );
        let listed = traffic.received(&Match::method(Method::GET).watch(false));
        assert_eq!((listed.responses, listed.lines, listed.bytes), (1, 0, 12));
        assert_eq!(traffic.received(&Match::any()).bytes, 49);
    }
}
