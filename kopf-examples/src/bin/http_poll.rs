//! # A timer that polls an external HTTP endpoint
//!
//! For every `KopfExample` whose `spec.field` is set, the `http_poll` timer GETs, every 10 s, the
//! **path** named there (e.g. `/health/db`) under the operator's **base URL** (the environment
//! variable `HTTP_POLL_BASE_URL`, e.g. `http://127.0.0.1:8000`), and mirrors the answer into the
//! object's `status.http_poll`:
//!
//! ```json
//! {"ok": true, "code": 200, "bodyBytes": 17, "reported": "ok", "attempt": 1,
//!  "checkedAt": "2026-01-01T12:00:00Z", "lastOkAt": "2026-01-01T12:00:00Z"}
//! {"ok": false, "code": 404, "error": "answered 404 Not Found; asked again at the next interval",
//!  "attempt": 1, "checkedAt": "2026-01-01T12:00:10Z", "lastOkAt": "2026-01-01T12:00:00Z"}
//! ```
//!
//! `reported` is the top-level `"status"` string of a JSON body, such as `{"status": "ok"}`;
//! `attempt` counts the attempts within the cycle. Every run sends every key, `null` for those
//! that do not apply, which the merge patch turns into removals: nothing of an earlier run
//! lingers — except `lastOkAt`, which only successes write, so it survives the failures after it.
//!
//! It shows:
//! - **shared state through `Data<T>`**: one HTTP client — with its pool of kept-alive
//!   connections — and the base URL are built once in `main` as a [`Poller`] and inserted into
//!   the operator's services (`OperatorBuilder::data`); every invocation for every object gets
//!   the same one as `Data<Poller>`;
//! - **timeouts**: each request, from the connection to the last byte of the body, has
//!   [`REQUEST_TIMEOUT`] (3 s; connecting alone [`CONNECT_TIMEOUT`]). Running out of it is an
//!   ordinary, recorded failure. The handler's own `timeout = "5s"` is only a backstop: a run cut
//!   by it is dropped, with the status it was about to write;
//! - **retries within the cycle**: a connection error, a timeout, a 5xx, 408 or 429 is
//!   transient. The failure is written into the status (through `Patch`, which is applied also
//!   when the invocation fails) and returned as `HandlerError::temporary` with [`RETRY_DELAY`]
//!   (2 s; or the endpoint's `Retry-After`, kept within 1–5 s), so the timer tries again within
//!   the cycle instead of waiting for the interval — `retries = 3` attempts in all, then the
//!   cycle ends in failure and the next one starts 10 s later as usual;
//! - **a 4xx (other than 408/429) is a result, not an error**: the endpoint answered, and asking
//!   again two seconds later would get the same answer. It is stored (`"ok": false`, the code,
//!   no retry) and asked again at the next interval. It is *not* a `HandlerError::permanent`:
//!   that would stop the timer for the object for the rest of the process, so a page that
//!   appears later would never be seen. A 3xx is recorded the same way, and not followed;
//! - **bounded reads**: at most [`MAX_BODY`] bytes of a body are read (a longer one is a
//!   recorded failure), and the strings copied into the status are capped.
//!
//! It speaks plain HTTP only (no TLS), which is enough for an example: an `https://` base URL is
//! refused at start-up.
//!
//! ## Run it
//!
//! ```text
//! eval "$(tools/kube-testenv/start.sh)"   # or point KUBECONFIG at your cluster
//! mkdir -p /tmp/site/health && echo '{"status": "ok"}' > /tmp/site/health/db
//! python3 -m http.server 8000 --bind 127.0.0.1 --directory /tmp/site   # in another terminal
//! HTTP_POLL_BASE_URL=http://127.0.0.1:8000 \
//!     cargo run -p kopf-examples --bin http_poll -- --namespace default --install-crd
//! ```
//!
//! then create a `KopfExample` with `spec.field: "/health/db"` and read its `status.http_poll`;
//! set `spec.field` to `/nothing-here` and see `"code": 404` within 10 s; stop the server and
//! see `"ok": false` with a connection error (three attempts, two seconds apart, then every
//! 10 s).
//!
//! ## An example, not a pattern for untrusted specs
//!
//! The operator connects only to the base URL **it** was given; the object contributes a path,
//! which must look like one (`/` followed by letters, digits, `-._~` and single `/`; no `..`, no
//! `%`, no `?`, no `@`, no scheme or host: see [`checked_path`]). An object whose `spec.field` is
//! anything else — `http://169.254.169.254/...` say — gets `"ok": false` and an explanation,
//! and no request is made. Redirects are not followed, so the endpoint cannot send the operator
//! elsewhere either. Still, whoever may create a `KopfExample` chooses which paths of the
//! external service the operator GETs, and how often (one request per object every 10 s), and
//! reads in `status.http_poll` what came back: an operator for objects written by others must
//! also decide which paths they may name, rate-limit them, and restrict the pod's egress with a
//! NetworkPolicy. `http_poll` is not in the image that `kopf-examples/deploy/Dockerfile` builds.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use http_body_util::{BodyExt as _, Empty, LengthLimitError, Limited};
use hyper::body::Bytes;
use hyper::header::{HeaderMap, HeaderValue, RETRY_AFTER, USER_AGENT};
use hyper::{Request, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kopf_examples::crd::KopfExample;
use kopf_runtime::{Data, HandlerError, HandlerResult, Patch, Retry, timer};
use serde::Serialize;
use tracing::debug;

/// The environment variable with the base URL of the external service.
const BASE_URL_ENV: &str = "HTTP_POLL_BASE_URL";
/// The key of the results in `status` (the handler's id).
const STATUS_KEY: &str = "http_poll";
/// A whole request: connecting, sending, the answer's head and its body.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// Connecting alone (part of [`REQUEST_TIMEOUT`]).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// The pause before retrying a transient failure within the cycle.
pub(crate) const RETRY_DELAY: Duration = Duration::from_secs(2);
/// The bounds of a `Retry-After` the endpoint asks for (the interval is 10 s).
const RETRY_AFTER_BOUNDS: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(5));
/// The most bytes of a body read.
pub(crate) const MAX_BODY: usize = 64 * 1024;
/// The longest path accepted from `spec.field`, in bytes.
const MAX_PATH: usize = 256;
/// The longest string copied into the status (an error, the reported state), in characters.
const MAX_TEXT: usize = 200;
/// How long an unused connection is kept open for the next poll.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// How many unused connections are kept open.
const POOL_MAX_IDLE: usize = 16;

/// The shared state of the handlers: the HTTP client and where it may connect.
#[derive(Debug, Clone)]
pub(crate) struct Poller {
    client: Client<HttpConnector, Empty<Bytes>>,
    /// `http://host[:port][/prefix]`, without a trailing `/`.
    base: String,
}

impl Poller {
    /// A client for the service at `base` (`http://host[:port][/prefix]`).
    ///
    /// Must be called within a tokio runtime (the pool's timer).
    pub(crate) fn new(base: &str) -> anyhow::Result<Self> {
        let base = base.trim_end_matches('/');
        let uri: Uri = base
            .parse()
            .with_context(|| format!("`{base}` is not a URL"))?;
        if uri.scheme_str() != Some("http") {
            bail!("`{base}` is not an http:// URL (this example speaks plain HTTP, no TLS)");
        }
        if uri.host().is_none_or(str::is_empty) {
            bail!("`{base}` names no host");
        }
        if uri.query().is_some() || base.contains('#') || base.contains('@') {
            bail!("`{base}` must be a scheme, a host, a port and a path, nothing else");
        }
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .pool_max_idle_per_host(POOL_MAX_IDLE)
            .build(connector);
        Ok(Self {
            client,
            base: base.to_owned(),
        })
    }

    /// The URL of `path`, a path checked by [`checked_path`].
    fn url(&self, path: &str) -> Result<Uri, String> {
        let url = format!("{}{path}", self.base);
        url.parse().map_err(|err| format!("`{url}`: {err}"))
    }

    /// GETs `url`, reading at most [`MAX_BODY`] bytes of the body, within [`REQUEST_TIMEOUT`].
    async fn get(&self, url: Uri) -> Result<Answer, Failure> {
        let mut request = Request::new(Empty::new());
        *request.uri_mut() = url;
        request.headers_mut().insert(
            USER_AGENT,
            HeaderValue::from_static("kopf-examples-http-poll"),
        );
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|err| Failure::Transport(error_chain(&err)))?;
            let (head, body) = response.into_parts();
            let body = Limited::new(body, MAX_BODY)
                .collect()
                .await
                .map_err(|err| {
                    if err.is::<LengthLimitError>() {
                        Failure::TooLarge
                    } else {
                        Failure::Transport(error_chain(&*err))
                    }
                })?
                .to_bytes();
            Ok(Answer {
                code: head.status,
                retry_after: retry_after(&head.headers),
                body,
            })
        };
        tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .unwrap_or(Err(Failure::Timeout))
    }
}

/// What the endpoint answered.
#[derive(Debug, Clone, PartialEq)]
struct Answer {
    code: StatusCode,
    /// Its `Retry-After`, in seconds, within [`RETRY_AFTER_BOUNDS`].
    retry_after: Option<Duration>,
    body: Bytes,
}

/// Why there is no (complete) answer.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Failure {
    /// No connection, or it broke (with the error's chain of causes).
    Transport(String),
    /// Nothing complete within [`REQUEST_TIMEOUT`].
    Timeout,
    /// A body longer than [`MAX_BODY`].
    TooLarge,
}

/// What `status.http_poll` says after a run: always the same keys (`null` for what does not
/// apply, which the merge patch removes, clearing what an earlier run wrote), except `lastOkAt`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Record {
    ok: bool,
    code: Option<u16>,
    body_bytes: Option<usize>,
    reported: Option<String>,
    error: Option<String>,
    /// The attempt within the cycle, from 1.
    attempt: u32,
    checked_at: String,
    /// Only written by a success: left as it was by a failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    last_ok_at: Option<String>,
}

impl Record {
    fn failed(error: &str, code: Option<StatusCode>, attempt: u32, now: &str) -> Self {
        Self {
            ok: false,
            code: code.map(|c| c.as_u16()),
            body_bytes: None,
            reported: None,
            error: Some(capped(error)),
            attempt,
            checked_at: now.to_owned(),
            last_ok_at: None,
        }
    }
}

/// What to do with a run's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    /// The result of this cycle: stored under `status.http_poll`.
    Done(Record),
    /// Transient: written into the status, then retried within the cycle after `delay`.
    Retry { record: Record, delay: Duration },
}

/// Judges the outcome of the `attempt`-th request of a cycle, made at `now`.
fn judge(outcome: Result<Answer, Failure>, attempt: u32, now: &str) -> Verdict {
    let retry = |error: String, code, delay: Option<Duration>| Verdict::Retry {
        record: Record::failed(&error, code, attempt, now),
        delay: delay.unwrap_or(RETRY_DELAY),
    };
    let answer = match outcome {
        Ok(answer) => answer,
        Err(Failure::Transport(error)) => return retry(error, None, None),
        Err(Failure::Timeout) => {
            let error = format!("no complete answer within {REQUEST_TIMEOUT:?}");
            return retry(error, None, None);
        }
        Err(Failure::TooLarge) => {
            let error = format!("the body is longer than {MAX_BODY} bytes");
            return Verdict::Done(Record::failed(&error, None, attempt, now));
        }
    };
    let code = answer.code;
    if code.is_server_error()
        || code == StatusCode::REQUEST_TIMEOUT
        || code == StatusCode::TOO_MANY_REQUESTS
    {
        return retry(format!("answered {code}"), Some(code), answer.retry_after);
    }
    if !code.is_success() {
        let error = if code.is_redirection() {
            format!("answered {code}; redirects are not followed")
        } else {
            format!("answered {code}; asked again at the next interval")
        };
        return Verdict::Done(Record::failed(&error, Some(code), attempt, now));
    }
    Verdict::Done(Record {
        ok: true,
        code: Some(code.as_u16()),
        body_bytes: Some(answer.body.len()),
        reported: reported_state(&answer.body),
        error: None,
        attempt,
        checked_at: now.to_owned(),
        last_ok_at: Some(now.to_owned()),
    })
}

/// `spec.field` if it is a path the operator may append to its base URL: `/`, then segments of
/// ASCII letters, digits and `-._~` separated by single slashes (the last may be empty), none
/// of them `.` or `..`; at most [`MAX_PATH`] bytes. Anything else — a URL, a host, a query,
/// percent-escapes, `..` — is refused with the reason.
pub(crate) fn checked_path(field: &str) -> Result<&str, String> {
    let Some(rest) = field.strip_prefix('/') else {
        return Err("spec.field must be a path starting with `/`, not a URL".to_owned());
    };
    if field.len() > MAX_PATH {
        return Err(format!("spec.field is longer than {MAX_PATH} bytes"));
    }
    if let Some(bad) = rest
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "-._~/".contains(*c)))
    {
        return Err(format!(
            "spec.field may only have letters, digits, `-._~` and `/`, not {bad:?}"
        ));
    }
    let segments: Vec<&str> = rest.split('/').collect();
    let last = segments.len() - 1;
    for (i, segment) in segments.iter().enumerate() {
        if matches!(*segment, "." | "..") {
            return Err("spec.field may not have `.` or `..` segments".to_owned());
        }
        if segment.is_empty() && i != last {
            return Err("spec.field may not have empty segments (`//`)".to_owned());
        }
    }
    Ok(field)
}

/// The top-level `"status"` string of a JSON object body (capped), if there is one.
fn reported_state(body: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    value.get("status")?.as_str().map(capped)
}

/// A `Retry-After` given in seconds, within [`RETRY_AFTER_BOUNDS`] (an HTTP date is ignored).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let seconds: u64 = headers
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let (low, high) = RETRY_AFTER_BOUNDS;
    Some(Duration::from_secs(seconds).clamp(low, high))
}

/// An error with its causes, `: `-separated (hyper's own message is only "client error
/// (Connect)").
fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// `text`, cut to [`MAX_TEXT`] characters.
fn capped(text: &str) -> String {
    match text.char_indices().nth(MAX_TEXT) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// Now, in RFC 3339 to the second (as Kubernetes writes times).
fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Every 10 s, GETs the path in `spec.field` under the base URL and stores what came back under
/// `status.http_poll`; transient failures are retried twice within the cycle, 2 s apart.
#[timer(
    field = "spec.field",
    interval = "10s",
    timeout = "5s",
    retries = 3,
    backoff = "2s"
)]
async fn http_poll(
    obj: Arc<KopfExample>,
    poller: Data<Poller>,
    retry: Retry,
    patch: Patch,
) -> HandlerResult<Record> {
    let attempt = retry.0 + 1;
    let field = obj.spec.field.as_deref().unwrap_or_default();
    let url = checked_path(field).and_then(|path| poller.url(path));
    let verdict = match url {
        // Nothing to retry: the spec must change. Recorded, and checked again every interval.
        Err(refusal) => Verdict::Done(Record::failed(&refusal, None, attempt, &now())),
        Ok(url) => {
            let outcome = poller.get(url).await;
            judge(outcome, attempt, &now())
        }
    };
    match verdict {
        Verdict::Done(record) => {
            debug!(ok = record.ok, code = ?record.code, "polled");
            Ok(record)
        }
        Verdict::Retry { record, delay } => {
            let message = record.error.clone().unwrap_or_default();
            // Sent after the invocation, although it fails: the status shows the failure.
            patch.status(STATUS_KEY, serde_json::to_value(&record)?);
            Err(HandlerError::temporary(message, delay))
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = kopf_examples::cli::ExampleArgs::from_env();
    let base = std::env::var(BASE_URL_ENV).with_context(|| {
        format!("set {BASE_URL_ENV} to the external service's base URL, e.g. http://127.0.0.1:8000")
    })?;
    let poller = Poller::new(&base).with_context(|| format!("bad {BASE_URL_ENV}"))?;
    if args.install_crd {
        kopf_examples::cli::install_crds().await?;
    }
    args.builder().data(poller).run().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: &str = "2026-01-01T12:00:00Z";

    fn answer(code: u16, body: &str) -> Result<Answer, Failure> {
        Ok(Answer {
            code: StatusCode::from_u16(code).expect("a valid code"),
            retry_after: None,
            body: Bytes::from(body.to_owned()),
        })
    }

    fn record(verdict: &Verdict) -> serde_json::Value {
        let (Verdict::Done(record) | Verdict::Retry { record, .. }) = verdict;
        serde_json::to_value(record).expect("a record serializes")
    }

    #[test]
    fn paths_are_checked() {
        for good in ["/", "/health", "/health/db", "/a-b_c.d~e/", "/v1/x.json"] {
            assert_eq!(checked_path(good), Ok(good));
        }
        for bad in [
            "",
            "health",
            "http://169.254.169.254/latest/meta-data",
            "//evil.example/x",
            "/a//b",
            "/../admin",
            "/a/./b",
            "/a/..",
            "/a?b=c",
            "/a#b",
            "/a%2e%2e",
            "/@evil",
            "/a b",
            "/ünïcode",
        ] {
            assert!(checked_path(bad).is_err(), "{bad:?} is refused");
        }
        assert!(checked_path(&format!("/{}", "a".repeat(MAX_PATH))).is_err());
    }

    #[tokio::test]
    async fn the_base_url_is_plain_http_without_extras() {
        let poller = Poller::new("http://127.0.0.1:8000/api/").expect("a good base");
        assert_eq!(
            poller.url("/x").map(|u| u.to_string()),
            Ok("http://127.0.0.1:8000/api/x".to_owned())
        );
        for bad in [
            "https://example.com",
            "127.0.0.1:8000",
            "http://",
            "http://h/?q=1",
            "http://u@h/",
            "file:///etc/passwd",
        ] {
            assert!(Poller::new(bad).is_err(), "{bad:?} is refused");
        }
    }

    #[test]
    fn a_success_is_the_result() {
        let verdict = judge(answer(200, r#"{"status": "ok"}"#), 1, NOW);
        assert_eq!(
            record(&verdict),
            serde_json::json!({
                "ok": true, "code": 200, "bodyBytes": 16, "reported": "ok", "error": null,
                "attempt": 1, "checkedAt": NOW, "lastOkAt": NOW,
            })
        );
        assert!(matches!(verdict, Verdict::Done(_)));
        let plain = judge(answer(204, ""), 2, NOW);
        assert_eq!(record(&plain)["reported"], serde_json::Value::Null);
    }

    #[test]
    fn transient_failures_are_retried_within_the_cycle() {
        for outcome in [
            answer(503, "busy"),
            answer(500, ""),
            answer(429, ""),
            answer(408, ""),
            Err(Failure::Timeout),
            Err(Failure::Transport("connection refused".to_owned())),
        ] {
            let verdict = judge(outcome.clone(), 2, NOW);
            let Verdict::Retry { delay, .. } = verdict else {
                panic!("{outcome:?} is retried, not {verdict:?}");
            };
            assert_eq!(delay, RETRY_DELAY);
            let json = record(&verdict);
            assert_eq!(json["ok"], false);
            assert_eq!(json["attempt"], 2);
            assert!(json["error"].is_string());
            assert!(json.get("lastOkAt").is_none(), "a failure keeps lastOkAt");
        }
        let mut busy = answer(503, "");
        if let Ok(answer) = &mut busy {
            answer.retry_after = Some(Duration::from_secs(4));
        }
        assert!(matches!(
            judge(busy, 1, NOW),
            Verdict::Retry { delay, .. } if delay == Duration::from_secs(4)
        ));
    }

    #[test]
    fn client_errors_redirects_and_huge_bodies_are_recorded() {
        for (outcome, code) in [
            (answer(404, "no"), serde_json::json!(404)),
            (answer(403, ""), serde_json::json!(403)),
            (answer(302, ""), serde_json::json!(302)),
            (Err(Failure::TooLarge), serde_json::Value::Null),
        ] {
            let verdict = judge(outcome, 1, NOW);
            assert!(matches!(verdict, Verdict::Done(_)), "{verdict:?}");
            let json = record(&verdict);
            assert_eq!(json["ok"], false);
            assert_eq!(json["code"], code);
            assert!(json["error"].is_string());
        }
    }

    #[test]
    fn retry_after_is_bounded() {
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        for (given, want) in [("3", 3), ("0", 1), ("3600", 5)] {
            headers.insert(RETRY_AFTER, HeaderValue::from_static(given));
            assert_eq!(retry_after(&headers), Some(Duration::from_secs(want)));
        }
        headers.insert(
            RETRY_AFTER,
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&headers), None);
    }

    #[test]
    fn copied_text_is_capped() {
        let long = "x".repeat(10 * MAX_TEXT);
        assert_eq!(capped(&long).chars().count(), MAX_TEXT + 1);
        assert_eq!(capped("short"), "short");
        let body = format!(r#"{{"status": "{long}"}}"#);
        assert_eq!(
            reported_state(body.as_bytes()).map(|s| s.chars().count()),
            Some(MAX_TEXT + 1)
        );
        assert_eq!(reported_state(b"not json"), None);
        assert_eq!(reported_state(br#"{"status": 3}"#), None);
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_transport_failure() {
        // A port nothing listens on: bound, then released.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        let port = listener.local_addr().expect("an address").port();
        drop(listener);
        let poller = Poller::new(&format!("http://127.0.0.1:{port}")).expect("a good base");
        let url = poller.url("/x").expect("a URL");
        match poller.get(url).await {
            Err(Failure::Transport(error)) => assert!(error.contains("Connect"), "{error}"),
            other => panic!("expected a transport failure, got {other:?}"),
        }
    }
}
