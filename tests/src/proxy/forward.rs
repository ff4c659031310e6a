//! One downstream connection: terminate TLS, apply the rules to each request, and forward the
//! rest over a dedicated upstream connection to the real API server, streaming both ways.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, Request, Response, Uri, header};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_rustls::{TlsAcceptor, TlsConnector};
use tokio_util::sync::CancellationToken;

use super::body::{CutBody, Failure, ResponseBody, full, status_response, watch_gone_response};
use super::mute::muted;
use super::rules::{Fault, is_watch};
use super::traffic::CountingBody;
use super::{ProxyError, Shared, tls};

/// How long connecting (TCP + TLS) to either side may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Headers that belong to one hop and are not forwarded.
const HOP_BY_HOP: [header::HeaderName; 5] = [
    header::CONNECTION,
    header::TE,
    header::TRAILER,
    header::UPGRADE,
    header::PROXY_AUTHORIZATION,
];

/// Where and how to reach the real API server.
pub(crate) struct Upstream {
    address: String,
    server_name: ServerName<'static>,
    connector: TlsConnector,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("address", &self.address)
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl Upstream {
    pub(crate) fn from_config(config: &kube::Config) -> Result<Self, ProxyError> {
        let uri = &config.cluster_url;
        if uri.scheme_str() != Some("https") {
            return Err(ProxyError::Upstream(format!("{uri} is not an https URL")));
        }
        let host = uri
            .host()
            .ok_or_else(|| ProxyError::Upstream(format!("{uri} has no host")))?;
        let port = uri.port_u16().unwrap_or(443);
        let name = config.tls_server_name.as_deref().unwrap_or(host);
        let name = name.trim_start_matches('[').trim_end_matches(']');
        let server_name = ServerName::try_from(name.to_owned())
            .map_err(|err| ProxyError::Upstream(format!("bad server name {name}: {err}")))?;
        let roots = config.root_cert.clone().unwrap_or_default();
        Ok(Self {
            address: format!("{host}:{port}"),
            server_name,
            connector: TlsConnector::from(tls::upstream(&roots)?),
        })
    }

    async fn connect<B>(&self) -> Result<(SendRequest<B>, AbortOnDrop), Failure>
    where
        B: hyper::body::Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let upstream = &self.address;
        let handshake = async {
            let tcp = TcpStream::connect(upstream).await?;
            tcp.set_nodelay(true)?;
            let stream = self
                .connector
                .connect(self.server_name.clone(), tcp)
                .await?;
            hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .map_err(std::io::Error::other)
        };
        let (sender, connection) = tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake)
            .await
            .map_err(|_| Failure(format!("connecting to {upstream} timed out")))?
            .map_err(|err| Failure(format!("cannot connect to {upstream}: {err}")))?;
        let driver = tokio::spawn(async move {
            // Errors surface to the request or response body that was using the connection.
            let _ = connection.await;
        });
        Ok((sender, AbortOnDrop(driver)))
    }
}

/// Aborts a task when dropped.
#[derive(Debug)]
pub(crate) struct AbortOnDrop(pub(crate) JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The state of one downstream connection.
struct Conn {
    shared: Arc<Shared>,
    upstream: Arc<Upstream>,
    /// The upstream connection (lazily opened, reopened when closed) and its driver.
    sender: tokio::sync::Mutex<Option<(SendRequest<Incoming>, AbortOnDrop)>>,
}

/// Serves one accepted TCP connection until it closes, the proxy stops, or
/// [`drop_connections`](super::ProxyHandle::drop_connections) cancels `dropped`.
pub(crate) async fn serve(
    tcp: TcpStream,
    acceptor: TlsAcceptor,
    upstream: Arc<Upstream>,
    shared: Arc<Shared>,
    dropped: CancellationToken,
) {
    let work = async {
        let _ = tcp.set_nodelay(true);
        let Ok(Ok(stream)) = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await
        else {
            return;
        };
        let conn = Arc::new(Conn {
            shared,
            upstream,
            sender: tokio::sync::Mutex::new(None),
        });
        let service = hyper::service::service_fn(move |request| {
            let conn = Arc::clone(&conn);
            async move { conn.handle(request).await }
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(stream), service)
            .await;
    };
    tokio::select! {
        () = work => {}
        () = dropped.cancelled() => {}
    }
}

impl Conn {
    async fn handle(&self, request: Request<Incoming>) -> Result<Response<ResponseBody>, Failure> {
        let method = request.method().clone();
        let path = request
            .uri()
            .path_and_query()
            .map_or_else(|| request.uri().path().to_owned(), ToString::to_string);
        let fault = self.shared.decide(&method, &path);
        match fault {
            None => self.forward(request).await,
            Some(Fault::Status {
                code,
                reason,
                retry_after,
            }) => Ok(status_response(code, reason, retry_after)),
            Some(Fault::WatchGone) if is_watch(&method, &path) => Ok(watch_gone_response()),
            Some(Fault::WatchGone) => Ok(status_response(410, "Expired", None)),
            Some(Fault::Reset) => Err(Failure(
                "connection reset by the kopf-tests fault proxy".to_owned(),
            )),
            Some(Fault::Delay(delay)) => {
                tokio::time::sleep(delay).await;
                self.forward(request).await
            }
            Some(Fault::Stall) => {
                self.shared.stalled().await;
                self.forward(request).await
            }
            Some(Fault::Hold) => self.hold(request).await,
            Some(Fault::CutWatch { after_events }) => {
                let response = self.forward(request).await?;
                Ok(response.map(|body| CutBody::new(body, after_events).boxed()))
            }
        }
    }

    /// Sends `request` upstream and streams the answer back. An unreachable upstream closes
    /// the downstream connection, as an unreachable API server would.
    async fn forward(&self, request: Request<Incoming>) -> Result<Response<ResponseBody>, Failure> {
        let (mut parts, body) = request.into_parts();
        let path = parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
        let key = super::lock(&self.shared.traffic).key(&parts.method, path);
        let request = (parts.method.clone(), path.to_owned());
        strip_hop_by_hop(&mut parts.headers);
        parts.uri = origin_form(&parts.uri)?;
        let upstream_request = Request::from_parts(parts, body);

        let mut guard = self.sender.lock().await;
        let reusable = match guard.as_mut() {
            Some((sender, _)) => sender.ready().await.is_ok(),
            None => false,
        };
        if !reusable {
            match self.upstream.connect().await {
                Ok(connected) => *guard = Some(connected),
                Err(err) => {
                    *guard = None;
                    self.shared.upstream_failed();
                    return Err(err);
                }
            }
        }
        let Some((sender, _)) = guard.as_mut() else {
            return Err(Failure("no upstream connection".to_owned()));
        };
        let response = match sender.send_request(upstream_request).await {
            Ok(response) => response,
            Err(err) => {
                *guard = None;
                self.shared.upstream_failed();
                return Err(Failure::from_error(err));
            }
        };
        drop(guard);
        let (mut parts, body) = response.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        let (method, path) = request;
        let body = muted(body, &self.shared.mutes, method, path);
        let counted = CountingBody::new(body, Arc::clone(&self.shared.traffic), key);
        Ok(Response::from_parts(
            parts,
            counted.map_err(Failure::from_error).boxed(),
        ))
    }
}

impl Conn {
    /// [`Fault::Hold`]: reads `request` in full, then keeps it in a task of its own until
    /// released, and sends it upstream on a connection of its own whether or not its client
    /// still waits; the answer is read in full there (and counted) too.
    async fn hold(&self, request: Request<Incoming>) -> Result<Response<ResponseBody>, Failure> {
        let (mut parts, body) = request.into_parts();
        let body = body
            .collect()
            .await
            .map_err(Failure::from_error)?
            .to_bytes();
        let path = parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
        let key = super::lock(&self.shared.traffic).key(&parts.method, path);
        strip_hop_by_hop(&mut parts.headers);
        parts.uri = origin_form(&parts.uri)?;
        let (shared, upstream) = (Arc::clone(&self.shared), Arc::clone(&self.upstream));
        let (answer, answered) = tokio::sync::oneshot::channel();
        let mut release = shared.release.subscribe();
        release.mark_unchanged();
        tokio::spawn(async move {
            tokio::select! {
                changed = release.changed() => if changed.is_err() { return },
                () = shared.shutdown.cancelled() => return,
            }
            let late = async {
                let (mut sender, _driver) = upstream.connect().await?;
                let request = Request::from_parts(parts, http_body_util::Full::new(body));
                let response = sender
                    .send_request(request)
                    .await
                    .map_err(Failure::from_error)?;
                let (mut parts, body) = response.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                let counted = CountingBody::new(body, Arc::clone(&shared.traffic), key);
                let bytes = counted.collect().await.map_err(Failure::from_error)?;
                Ok(Response::from_parts(parts, full(bytes.to_bytes())))
            };
            let _client_may_be_gone = answer.send(late.await);
        });
        answered
            .await
            .unwrap_or_else(|_| Err(Failure("a held request was dropped".to_owned())))
    }
}

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    for name in &HOP_BY_HOP {
        headers.remove(name);
    }
    headers.remove("keep-alive");
    headers.remove("proxy-connection");
}

fn origin_form(uri: &Uri) -> Result<Uri, Failure> {
    let path = uri.path_and_query().map_or("/", |pq| pq.as_str());
    path.parse().map_err(Failure::from_error)
}
