//! The probe server: `/healthz` (the process and its watches are alive), `/readyz` (every
//! resource kind has completed its initial list, or is reported as unavailable), and
//! `/metrics`, the operator's metrics registry in the OpenMetrics text format.
//!
//! The probe server is exposed on the pod's network, so it defends itself: one request per
//! connection, a header-read timeout, a deadline per connection, a cap on the request size and
//! a limit on the connections served at once (see [`ProbeLimits`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::routing::get;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::Health;

fn answer(result: Result<(), String>) -> (StatusCode, String) {
    match result {
        Ok(()) => (StatusCode::OK, "ok\n".to_owned()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
    }
}

async fn healthz(State(health): State<Arc<Health>>) -> (StatusCode, String) {
    answer(health.alive())
}

/// The media type of the OpenMetrics text format.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

async fn metrics(
    State(health): State<Arc<Health>>,
) -> (StatusCode, [(header::HeaderName, &'static str); 1], String) {
    let plain = [(header::CONTENT_TYPE, "text/plain; charset=utf-8")];
    let Some(registry) = &health.metrics else {
        return (StatusCode::NOT_FOUND, plain, "metrics are off\n".to_owned());
    };
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, registry) {
        Ok(()) => (StatusCode::OK, [(header::CONTENT_TYPE, OPENMETRICS)], body),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            plain,
            "cannot encode the metrics\n".to_owned(),
        ),
    }
}

async fn readyz(State(health): State<Arc<Health>>) -> (StatusCode, String) {
    let (code, mut body) = answer(health.ready());
    if let Some(detail) = &health.detail {
        body.push_str(&detail());
        body.push('\n');
    }
    (code, body)
}

/// The probe server's limits against slow and large requests. The kubelet sends one small
/// request per connection and reads the answer at once; anything else is cut off.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProbeLimits {
    /// How long a client may take to send a request's headers.
    pub(crate) header_read_timeout: Duration,
    /// How long one connection may stay open, whatever it does.
    pub(crate) connection_timeout: Duration,
    /// Connections served at once; further ones wait in the listen backlog.
    pub(crate) max_connections: usize,
    /// The largest request head (start line and headers) in bytes; larger ones get `431`.
    pub(crate) max_request_bytes: usize,
}

impl ProbeLimits {
    /// The limits of the operator's probe server.
    pub(crate) const DEFAULT: Self = Self {
        header_read_timeout: Duration::from_secs(5),
        connection_timeout: Duration::from_secs(10),
        max_connections: 16,
        max_request_bytes: 8 * 1024,
    };
}

/// Binds `addr` and serves the probes until `stop` is cancelled, within
/// [`ProbeLimits::DEFAULT`]. Returns the bound address.
///
/// # Cancellation safety
/// Binding is not cancel safe in the sense that a dropped future may have bound the port; the
/// server itself runs in a spawned task.
pub(crate) async fn serve(
    addr: SocketAddr,
    health: Arc<Health>,
    stop: CancellationToken,
) -> std::io::Result<SocketAddr> {
    serve_within(addr, health, stop, ProbeLimits::DEFAULT).await
}

/// [`serve`] with these limits.
async fn serve_within(
    addr: SocketAddr,
    health: Arc<Health>,
    stop: CancellationToken,
    limits: ProbeLimits,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(health);
    tokio::spawn(accept_loop(listener, app, stop, limits));
    Ok(bound)
}

/// Accepts connections while a slot is free (the others wait in the listen backlog) and serves
/// each with one request, a header-read timeout and an overall deadline.
async fn accept_loop(
    listener: TcpListener,
    app: Router,
    stop: CancellationToken,
    limits: ProbeLimits,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_request_bytes)
        .keep_alive(false);
    loop {
        let Some(Ok(slot)) = stop
            .run_until_cancelled(Arc::clone(&slots).acquire_owned())
            .await
        else {
            return;
        };
        let Some(accepted) = stop.run_until_cancelled(listener.accept()).await else {
            return;
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(err) => {
                // E.g. out of file descriptors: pause instead of spinning.
                tracing::debug!(error = %err, "the health probe server cannot accept");
                drop(slot);
                let pause = tokio::time::sleep(Duration::from_millis(100));
                if stop.run_until_cancelled(pause).await.is_none() {
                    return;
                }
                continue;
            }
        };
        let connection =
            http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone()));
        let (deadline, stop) = (limits.connection_timeout, stop.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let served = stop
                .run_until_cancelled(tokio::time::timeout(deadline, connection))
                .await;
            match served {
                Some(Ok(Err(err))) => {
                    tracing::debug!(error = %err, "a health probe connection failed")
                }
                Some(Err(_)) => tracing::debug!("a health probe connection ran past its deadline"),
                Some(Ok(Ok(()))) | None => {}
            }
        });
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::TcpStream;

    const REQUEST: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: probe\r\n\r\n";
    /// Far longer than any wait below that is expected to end.
    const PATIENCE: Duration = Duration::from_secs(5);

    async fn start(limits: ProbeLimits) -> (SocketAddr, CancellationToken) {
        let stop = CancellationToken::new();
        let addr = serve_within(
            ([127, 0, 0, 1], 0).into(),
            Arc::new(Health::default()),
            stop.clone(),
            limits,
        )
        .await
        .expect("a free port on the loopback");
        (addr, stop)
    }

    /// Everything the server sends until it closes the connection.
    async fn answer(stream: &mut TcpStream) -> String {
        let mut out = Vec::new();
        tokio::time::timeout(PATIENCE, stream.read_to_end(&mut out))
            .await
            .expect("the server closes the connection")
            .expect("a clean read");
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test]
    async fn answers_one_request_and_closes() {
        let (addr, stop) = start(ProbeLimits::DEFAULT).await;
        let mut client = TcpStream::connect(addr).await.expect("connects");
        client.write_all(REQUEST).await.expect("sends");
        let text = answer(&mut client).await;
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        assert!(text.ends_with("ok\n"), "{text}");
        stop.cancel();
    }

    #[tokio::test]
    async fn metrics_are_served_as_openmetrics_or_refused_when_off() {
        let request = b"GET /metrics HTTP/1.1\r\nHost: probe\r\n\r\n";
        let (addr, stop) = start(ProbeLimits::DEFAULT).await;
        let mut client = TcpStream::connect(addr).await.expect("connects");
        client.write_all(request).await.expect("sends");
        let text = answer(&mut client).await;
        assert!(text.starts_with("HTTP/1.1 404"), "{text}");
        stop.cancel();

        let mut registry = prometheus_client::registry::Registry::default();
        let counter: prometheus_client::metrics::counter::Counter = Default::default();
        registry.register("things", "Things", counter.clone());
        counter.inc();
        let health = Health {
            metrics: Some(Arc::new(registry)),
            ..Health::default()
        };
        let stop = CancellationToken::new();
        let local = ([127, 0, 0, 1], 0).into();
        let addr = serve_within(local, Arc::new(health), stop.clone(), ProbeLimits::DEFAULT)
            .await
            .expect("a free port on the loopback");
        let mut client = TcpStream::connect(addr).await.expect("connects");
        client.write_all(request).await.expect("sends");
        let text = answer(&mut client).await;
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        assert!(
            text.contains(&format!("content-type: {OPENMETRICS}\r\n")),
            "{text}"
        );
        assert!(
            text.contains("\nthings_total 1\n") && text.ends_with("# EOF\n"),
            "{text}"
        );
        stop.cancel();
    }

    #[tokio::test]
    async fn a_client_sending_its_headers_slowly_is_cut_off() {
        let limits = ProbeLimits {
            header_read_timeout: Duration::from_millis(200),
            ..ProbeLimits::DEFAULT
        };
        let (addr, stop) = start(limits).await;
        let mut client = TcpStream::connect(addr).await.expect("connects");
        client
            .write_all(b"GET /healthz HTTP/1.1\r\n")
            .await
            .expect("sends");
        let started = tokio::time::Instant::now();
        // The rest of the headers never comes: the server closes without an answer.
        let text = answer(&mut client).await;
        assert!(text.is_empty(), "{text}");
        assert!(started.elapsed() < limits.connection_timeout);
        stop.cancel();
    }

    #[tokio::test]
    async fn a_silent_connection_ends_at_the_header_timeout() {
        let limits = ProbeLimits {
            header_read_timeout: Duration::from_millis(200),
            ..ProbeLimits::DEFAULT
        };
        let (addr, stop) = start(limits).await;
        let mut client = TcpStream::connect(addr).await.expect("connects");
        assert_eq!(answer(&mut client).await, "");
        stop.cancel();
    }

    #[tokio::test]
    async fn a_huge_request_head_is_refused() {
        let (addr, stop) = start(ProbeLimits::DEFAULT).await;
        let mut client = TcpStream::connect(addr).await.expect("connects");
        let mut request = b"GET /healthz HTTP/1.1\r\nX-Padding: ".to_vec();
        request.resize(request.len() + 64 * 1024, b'a');
        // The server may close before it has read everything: a failed write is expected.
        let _sent = client.write_all(&request).await;
        let mut out = Vec::new();
        let _read = tokio::time::timeout(PATIENCE, client.read_to_end(&mut out)).await;
        let text = String::from_utf8_lossy(&out);
        assert!(!text.contains(" 200 "), "{text}");
        stop.cancel();
    }

    #[tokio::test]
    async fn connections_past_the_limit_wait_for_a_free_slot() {
        let limits = ProbeLimits {
            max_connections: 2,
            ..ProbeLimits::DEFAULT
        };
        let (addr, stop) = start(limits).await;
        let mut idle = Vec::new();
        for _ in 0..2 {
            idle.push(TcpStream::connect(addr).await.expect("connects"));
        }
        let mut third = TcpStream::connect(addr)
            .await
            .expect("the backlog takes it");
        third.write_all(REQUEST).await.expect("sends");
        let mut byte = [0_u8; 1];
        let early = tokio::time::timeout(Duration::from_millis(300), third.read(&mut byte));
        assert!(early.await.is_err(), "served past the connection limit");
        drop(idle.pop()); // one slot frees up
        let text = answer(&mut third).await;
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        stop.cancel();
    }
}
