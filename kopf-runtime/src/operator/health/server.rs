//! The probe server: `/healthz` (the process and its watches are alive), `/readyz` (every
//! resource kind has completed its initial list, or is reported as unavailable), and
//! `/metrics`, the operator's metrics registry in the OpenMetrics text format.
//!
//! The probe server is exposed on the pod's network, so it defends itself: one request per
//! connection, a header-read timeout, a deadline per connection, a cap on the request size and
//! a limit on the connections open at once (see [`ProbeLimits`]). Every connection is accepted
//! at once, and a new one beyond the limit closes the oldest: connections left idle (a
//! slowloris, a port scanner) cannot keep the kubelet's probes waiting, since a probe sends its
//! request as soon as it connects and is answered within a millisecond, long before enough
//! newer connections could come to make it the oldest.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::routing::get;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::Health;
use crate::core::sync::lock;

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
    /// Connections open at once; a new one beyond it closes the oldest.
    pub(crate) max_connections: usize,
    /// The largest request head (start line and headers) in bytes; larger ones get `431`.
    pub(crate) max_request_bytes: usize,
}

impl ProbeLimits {
    /// The limits of the operator's probe server.
    pub(crate) const DEFAULT: Self = Self {
        header_read_timeout: Duration::from_secs(5),
        connection_timeout: Duration::from_secs(10),
        max_connections: 64,
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

/// The connections open now, oldest first, each with what closes it.
#[derive(Default)]
struct Open {
    next: u64,
    order: VecDeque<(u64, CancellationToken)>,
}

impl Open {
    /// Admits a new connection: its id and what closes it. Closes the oldest ones beyond `max`.
    fn admit(&mut self, max: usize) -> (u64, CancellationToken) {
        while self.order.len() >= max.max(1) {
            let Some((_, oldest)) = self.order.pop_front() else {
                break;
            };
            oldest.cancel();
        }
        let (id, close) = (self.next, CancellationToken::new());
        self.next += 1;
        self.order.push_back((id, close.clone()));
        (id, close)
    }

    /// The connection `id` ended (a no-op if it was closed as the oldest).
    fn leave(&mut self, id: u64) {
        if let Some(at) = self.order.iter().position(|(open, _)| *open == id) {
            self.order.remove(at);
        }
    }
}

/// Takes a connection off the open ones when its task ends, however it ends.
struct Admitted {
    open: Arc<Mutex<Open>>,
    id: u64,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        lock(&self.open).leave(self.id);
    }
}

/// Accepts every connection (one beyond the limit closes the oldest open one) and serves each
/// with one request, a header-read timeout and an overall deadline.
async fn accept_loop(
    listener: TcpListener,
    app: Router,
    stop: CancellationToken,
    limits: ProbeLimits,
) {
    let open = Arc::new(Mutex::new(Open::default()));
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_request_bytes)
        .keep_alive(false);
    loop {
        let Some(accepted) = stop.run_until_cancelled(listener.accept()).await else {
            return;
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(err) => {
                // E.g. out of file descriptors: pause instead of spinning.
                tracing::debug!(error = %err, "the health probe server cannot accept");
                let pause = tokio::time::sleep(Duration::from_millis(100));
                if stop.run_until_cancelled(pause).await.is_none() {
                    return;
                }
                continue;
            }
        };
        let (id, close) = lock(&open).admit(limits.max_connections);
        let admitted = Admitted {
            open: Arc::clone(&open),
            id,
        };
        let connection =
            http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone()));
        let (deadline, stop) = (limits.connection_timeout, stop.clone());
        tokio::spawn(async move {
            let _admitted = admitted;
            let served = tokio::select! {
                served = tokio::time::timeout(deadline, connection) => served,
                () = close.cancelled() => {
                    tracing::debug!("a health probe connection closed to make room for a newer one");
                    return;
                }
                () = stop.cancelled() => return,
            };
            match served {
                Ok(Err(err)) => tracing::debug!(error = %err, "a health probe connection failed"),
                Err(_) => tracing::debug!("a health probe connection ran past its deadline"),
                Ok(Ok(())) => {}
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
    async fn a_connection_past_the_limit_closes_the_oldest() {
        let limits = ProbeLimits {
            max_connections: 2,
            ..ProbeLimits::DEFAULT
        };
        let (addr, stop) = start(limits).await;
        let mut oldest = TcpStream::connect(addr).await.expect("connects");
        let mut younger = TcpStream::connect(addr).await.expect("connects");
        // Accepted in the order they connected (the listen backlog is a queue).
        let mut third = TcpStream::connect(addr).await.expect("connects");
        third.write_all(REQUEST).await.expect("sends");
        let text = answer(&mut third).await;
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        assert_eq!(answer(&mut oldest).await, "", "the oldest is closed");
        let mut byte = [0_u8; 1];
        let open = tokio::time::timeout(Duration::from_millis(300), younger.read(&mut byte));
        assert!(open.await.is_err(), "only the oldest is closed");
        stop.cancel();
    }

    /// Idle connections opened continuously, many more than the limit, and kept open: the probes
    /// are answered at once all the same (before, each idle connection held one of the slots
    /// taken before `accept` until its header timeout, and the probes waited behind them).
    #[tokio::test]
    async fn idle_connections_cannot_starve_the_probes() {
        /// Far above the milliseconds an answer takes, far below the header timeout (5 s) that
        /// an idle connection holding a slot would make a probe wait.
        const BOUND: Duration = Duration::from_secs(2);
        let limits = ProbeLimits::DEFAULT;
        let (addr, stop) = start(limits).await;
        let mut idle = Vec::new();
        for _ in 0..2 * limits.max_connections {
            idle.push(TcpStream::connect(addr).await.expect("connects"));
        }
        // The slowloris goes on while the probes come.
        let loris = tokio::spawn(async move {
            let mut more = Vec::new();
            loop {
                if let Ok(stream) = TcpStream::connect(addr).await {
                    more.push(stream);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        for path in ["/healthz", "/readyz", "/healthz", "/readyz"] {
            let began = tokio::time::Instant::now();
            let mut probe = TcpStream::connect(addr).await.expect("connects");
            let request = format!("GET {path} HTTP/1.1\r\nHost: probe\r\n\r\n");
            probe.write_all(request.as_bytes()).await.expect("sends");
            let mut out = Vec::new();
            let read = tokio::time::timeout(BOUND, probe.read_to_end(&mut out)).await;
            let text = String::from_utf8_lossy(&out);
            assert!(
                read.is_ok(),
                "{path} not answered within {BOUND:?}: {text:?}"
            );
            assert!(text.starts_with("HTTP/1.1 200"), "{path}: {text}");
            assert!(began.elapsed() < BOUND, "{path}: {:?}", began.elapsed());
        }
        // The oldest idle connections were closed to make room: the open ones stay bounded.
        let first = idle.first_mut().expect("opened");
        assert_eq!(
            answer(first).await,
            "",
            "the oldest idle connection is closed"
        );
        loris.abort();
        stop.cancel();
    }
}
