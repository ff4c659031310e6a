//! Response bodies the proxy makes up (API `Status` objects, a watch `ERROR` event) and the
//! wrapper that cuts a forwarded watch stream in the middle of an event.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body::{Body, Frame};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full};

/// Why a request or a response stream failed (the client sees its connection closed).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Failure(pub(crate) String);

impl Failure {
    pub(crate) fn from_error(err: impl std::fmt::Display) -> Self {
        Self(err.to_string())
    }
}

/// The body of every response the proxy sends.
pub(crate) type ResponseBody = BoxBody<Bytes, Failure>;

/// The message of every made-up `Status`, so logs show where it came from.
const MESSAGE_PREFIX: &str = "injected by the kopf-tests fault proxy";

fn status_json(code: u16, reason: &str, retry_after: Option<u32>) -> serde_json::Value {
    let mut status = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!("{MESSAGE_PREFIX}: {code} {reason}"),
        "reason": reason,
        "code": code,
    });
    if let Some(seconds) = retry_after {
        status["details"] = serde_json::json!({ "retryAfterSeconds": seconds });
    }
    status
}

pub(crate) fn full(bytes: impl Into<Bytes>) -> ResponseBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// A `Status` answer with `code` (and `Retry-After` if given).
pub(crate) fn status_response(
    code: u16,
    reason: &str,
    retry_after: Option<u32>,
) -> Response<ResponseBody> {
    let body = status_json(code, reason, retry_after).to_string();
    let mut response = Response::new(full(body));
    *response.status_mut() =
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(seconds) = retry_after {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// A watch answer consisting of one `ERROR` event with a 410 `Expired` status.
pub(crate) fn watch_gone_response() -> Response<ResponseBody> {
    let mut status = status_json(410, "Expired", None);
    status["message"] = format!("{MESSAGE_PREFIX}: too old resource version").into();
    let event = serde_json::json!({ "type": "ERROR", "object": status });
    let mut response = Response::new(full(format!("{event}\n")));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// Passes `events` newline-delimited events through, then part of the next one, then fails.
#[derive(Debug)]
pub(crate) struct CutBody<B> {
    inner: B,
    /// Whole events still to let through.
    events: usize,
    cut: bool,
}

impl<B> CutBody<B> {
    pub(crate) fn new(inner: B, events: usize) -> Self {
        Self {
            inner,
            events,
            cut: false,
        }
    }

    /// How much of `chunk` to let through, and whether the stream is cut after it.
    fn split(&mut self, chunk: &[u8]) -> (usize, bool) {
        let mut start = 0;
        while self.events > 0 {
            match chunk[start..].iter().position(|b| *b == b'\n') {
                Some(offset) => {
                    start += offset + 1;
                    self.events -= 1;
                }
                None => return (chunk.len(), false),
            }
        }
        let rest = &chunk[start..];
        if rest.is_empty() {
            return (chunk.len(), false);
        }
        let line = rest.iter().position(|b| *b == b'\n').unwrap_or(rest.len());
        (start + (line / 2).max(1).min(line), true)
    }
}

impl<B> Body for CutBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    type Data = Bytes;
    type Error = Failure;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Failure>>> {
        if self.cut {
            let cut = "watch stream cut by the kopf-tests fault proxy";
            return Poll::Ready(Some(Err(Failure(cut.to_owned()))));
        }
        let frame = match ready!(Pin::new(&mut self.inner).poll_frame(cx)) {
            None => return Poll::Ready(None),
            Some(Err(err)) => return Poll::Ready(Some(Err(Failure::from_error(err)))),
            Some(Ok(frame)) => frame,
        };
        let Some(data) = frame.data_ref() else {
            return Poll::Ready(Some(Ok(frame)));
        };
        let (keep, cut) = self.split(data);
        self.cut = cut;
        Poll::Ready(Some(Ok(Frame::data(data.slice(..keep)))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_inside_the_event_after_the_allowed_ones() {
        let mut body = CutBody::new((), 2);
        assert_eq!(body.split(b"{\"a\":1}\n{\"b\""), (12, false));
        assert_eq!(body.split(b":2}\n"), (4, false));
        assert_eq!(body.split(b"{\"type\":\"ADDED\"}\n"), (8, true));
    }

    #[test]
    fn cuts_in_the_same_chunk_and_never_passes_a_whole_event() {
        let mut body = CutBody::new((), 1);
        let chunk = b"{\"x\":1}\n{\"y\":2}\n";
        let (keep, cut) = body.split(chunk);
        assert!(cut);
        assert!(keep > 8 && keep < chunk.len() - 1, "kept {keep}");
        assert!(!chunk[8..keep].contains(&b'\n'));
    }

    #[test]
    fn status_bodies_are_kubernetes_statuses() {
        let status = status_json(429, "TooManyRequests", Some(3));
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["code"], 429);
        assert_eq!(status["details"]["retryAfterSeconds"], 3);
    }
}
