//! The webhook server: TLS (rustls) on its own port, one route per admission handler, and the
//! limits of a server the API server reaches over the network: a cap on connections, a
//! handshake and header-read timeout, a deadline per connection, and a cap on the body.
//!
//! The API server keeps its connections open and sends reviews one after another on each, so
//! connections live up to [`ServerLimits::connection_lifetime`] and are then closed
//! gracefully (after the answer in progress). Beyond [`ServerLimits::max_connections`], new
//! connections wait in the kernel's queue until one closes.

use std::net::SocketAddr;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use rustls::ServerConfig;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

/// The webhook server's limits.
#[derive(Debug, Clone, Copy)]
pub(super) struct ServerLimits {
    /// How long a client may take for the TLS handshake and each request's headers.
    pub(super) header_read_timeout: Duration,
    /// How long one connection stays open; then it is closed after its answer in progress.
    pub(super) connection_lifetime: Duration,
    /// Connections open at once.
    pub(super) max_connections: usize,
}

impl ServerLimits {
    /// The limits of the operator's webhook server.
    pub(super) const DEFAULT: Self = Self {
        header_read_timeout: Duration::from_secs(5),
        connection_lifetime: Duration::from_secs(60),
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

    fn get(&self) -> Arc<ServerConfig> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Binds `addr` and serves `app` over TLS until `stop` is cancelled. Returns the bound address.
///
/// # Cancellation safety
/// Binding is not cancel safe in the sense that a dropped future may have bound the port; the
/// server itself runs in a spawned task.
pub(super) async fn serve(
    addr: SocketAddr,
    app: Router,
    tls: CurrentTls,
    stop: CancellationToken,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(accept_loop(listener, app, tls, stop, ServerLimits::DEFAULT));
    Ok(bound)
}

async fn accept_loop(
    listener: TcpListener,
    app: Router,
    tls: CurrentTls,
    stop: CancellationToken,
    limits: ServerLimits,
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
        let (app, acceptor, stop) = (app.clone(), TlsAcceptor::from(tls.get()), stop.clone());
        tokio::spawn(async move {
            connection(stream, acceptor, app, stop, limits).await;
            drop(slot);
        });
    }
}

/// One connection: the handshake within the header-read timeout, then requests until the
/// client closes, the lifetime ends or the server stops (each ending after its answer).
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
    let conn = http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
    let mut conn = std::pin::pin!(conn);
    let lifetime = tokio::time::sleep(limits.connection_lifetime);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(err) = result {
                tracing::debug!(error = %err, "a webhook connection ended with an error");
            }
            return;
        }
        () = lifetime => {}
        () = stop.cancelled() => {}
    }
    conn.as_mut().graceful_shutdown();
    let _ended = tokio::time::timeout(limits.header_read_timeout, conn).await;
}
