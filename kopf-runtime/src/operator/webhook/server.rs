//! The webhook server: TLS (rustls) on its own port, one route per admission handler, and the
//! limits of a server the API server reaches over the network: a cap on connections, a
//! handshake and header-read timeout, a deadline per connection, and a cap on the body.
//!
//! The API server keeps its connections open and sends reviews one after another on each. A
//! connection is never closed under a request the client may be sending: once it has lived
//! [`ServerLimits::connection_lifetime`], or the server stops, its next answer says
//! `Connection: close` (the client opens a new one, to any replica); only a connection that
//! stays quiet for [`ServerLimits::quiet`] after that is closed without one. A stopping server
//! accepts no new connection and finishes the open ones within that time ([`Drain`]). Beyond
//! [`ServerLimits::max_connections`], new connections wait in the kernel's queue until one
//! closes.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderValue, header};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use rustls::ServerConfig;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The webhook server's limits.
#[derive(Debug, Clone, Copy)]
pub(super) struct ServerLimits {
    /// How long a client may take for the TLS handshake and each request's headers.
    pub(super) header_read_timeout: Duration,
    /// How long one connection is used before its next answer closes it.
    pub(super) connection_lifetime: Duration,
    /// How long a connection due to close may stay without a request before it is closed.
    pub(super) quiet: Duration,
    /// Connections open at once.
    pub(super) max_connections: usize,
}

impl ServerLimits {
    /// The limits of the operator's webhook server.
    pub(super) const DEFAULT: Self = Self {
        header_read_timeout: Duration::from_secs(5),
        connection_lifetime: Duration::from_secs(60),
        quiet: Duration::from_secs(2),
        max_connections: 256,
    };
}

/// The TLS configuration in use: replaced when a certificate is renewed or its files change;
/// each new connection takes the current one.
#[derive(Debug, Clone)]
pub(super) struct CurrentTls(Arc<RwLock<Arc<ServerConfig>>>);

impl CurrentTls {
    pub(super) fn new(config: Arc<ServerConfig>) -> Self {
        Self(Arc::new(RwLock::new(config)))
    }

    pub(super) fn replace(&self, config: Arc<ServerConfig>) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = config;
    }

    /// The configuration new connections get.
    pub(super) fn current(&self) -> Arc<ServerConfig> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The server's tasks: once `stop` is cancelled they end within [`ServerLimits::quiet`] and
/// the header-read timeout; [`Drain::wait`] waits for that.
#[derive(Debug, Clone)]
pub(crate) struct Drain(TaskTracker);

impl Drain {
    /// Waits until every connection has closed, at most `limit`.
    ///
    /// # Cancellation safety
    /// Cancel safe: it only waits.
    pub(crate) async fn wait(&self, limit: Duration) {
        self.0.close();
        let _drained = tokio::time::timeout(limit, self.0.wait()).await;
    }
}

/// Binds `addr` and serves `app` over TLS until `stop` is cancelled. Returns the bound address
/// and the server's tasks.
///
/// # Cancellation safety
/// Binding is not cancel safe in the sense that a dropped future may have bound the port; the
/// server itself runs in spawned tasks.
pub(super) async fn serve(
    addr: SocketAddr,
    app: Router,
    tls: CurrentTls,
    stop: CancellationToken,
) -> std::io::Result<(SocketAddr, Drain)> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let tasks = TaskTracker::new();
    let limits = ServerLimits::DEFAULT;
    tasks.spawn(accept_loop(
        listener,
        app,
        tls,
        stop,
        (tasks.clone(), limits),
    ));
    Ok((bound, Drain(tasks)))
}

async fn accept_loop(
    listener: TcpListener,
    app: Router,
    tls: CurrentTls,
    stop: CancellationToken,
    (tasks, limits): (TaskTracker, ServerLimits),
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        let Some(Ok(slot)) = stop
            .run_until_cancelled(slots.clone().acquire_owned())
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
                tracing::debug!(error = %err, "the webhook server cannot accept");
                let pause = tokio::time::sleep(Duration::from_millis(100));
                if stop.run_until_cancelled(pause).await.is_none() {
                    return;
                }
                continue;
            }
        };
        let (app, acceptor, stop) = (app.clone(), TlsAcceptor::from(tls.current()), stop.clone());
        tasks.spawn(async move {
            connection(stream, acceptor, app, stop, limits).await;
            drop(slot);
        });
    }
}

/// One connection: the handshake within the header-read timeout, then requests until the
/// client closes it; once its lifetime ends or the server stops, its next answer closes it, or
/// a quiet time without a request.
async fn connection(
    stream: TcpStream,
    acceptor: TlsAcceptor,
    app: Router,
    stop: CancellationToken,
    limits: ServerLimits,
) {
    let handshake = tokio::time::timeout(limits.header_read_timeout, acceptor.accept(stream));
    let stream = match handshake.await {
        Ok(Ok(stream)) => stream,
        Ok(Err(err)) => {
            tracing::debug!(error = %err, "a webhook client failed its TLS handshake");
            return;
        }
        Err(_) => {
            tracing::debug!("a webhook client took too long for its TLS handshake");
            return;
        }
    };
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    let closing = Arc::new(AtomicBool::new(false));
    let service = closing_service(app, closing.clone());
    let conn = http.serve_connection(TokioIo::new(stream), service);
    let mut conn = std::pin::pin!(conn);
    let lifetime = tokio::time::sleep(limits.connection_lifetime);
    tokio::select! {
        result = conn.as_mut() => return ended(result),
        () = lifetime => {}
        () = stop.cancelled() => {}
    }
    closing.store(true, Ordering::Relaxed);
    if let Ok(result) = tokio::time::timeout(limits.quiet, conn.as_mut()).await {
        return ended(result);
    }
    conn.as_mut().graceful_shutdown();
    let _ended = tokio::time::timeout(limits.header_read_timeout, conn).await;
}

fn ended(result: Result<(), hyper::Error>) {
    if let Err(err) = result {
        tracing::debug!(error = %err, "a webhook connection ended with an error");
    }
}

/// `app`, whose answers say `Connection: close` once `closing` is set.
fn closing_service(
    app: Router,
    closing: Arc<AtomicBool>,
) -> impl hyper::service::Service<
    hyper::Request<hyper::body::Incoming>,
    Response = axum::response::Response,
    Error = Infallible,
    Future = impl Future<Output = Result<axum::response::Response, Infallible>> + Send,
> + Clone {
    hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
        let (mut app, closing) = (app.clone(), closing.clone());
        async move {
            let mut response = tower::Service::call(&mut app, request).await?;
            if closing.load(Ordering::Relaxed) {
                let close = HeaderValue::from_static("close");
                response.headers_mut().insert(header::CONNECTION, close);
            }
            Ok(response)
        }
    })
}
