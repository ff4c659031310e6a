//! A fault-injecting HTTPS proxy between a Kubernetes client and the test API server.
//!
//! [`FaultProxy::start`] listens on a free loopback port, terminates TLS with a certificate of a
//! CA made for it, and forwards every request over TLS to the API server of the given
//! [`kube::Config`] (trusting that config's CA, passing the `Authorization` header through).
//! [`FaultProxy::config`] is the same config pointed at the proxy, for the client under test.
//! Responses, including chunked watch streams, are streamed, never buffered whole.
//!
//! The test commands faults through a [`ProxyHandle`]: [`Rule`]s answer chosen requests with
//! 429 + `Retry-After`, 409, 422, 500, 503 or 410 (also as a watch `ERROR` event), delay or stall
//! them, reset their connection, or cut a watch stream in the middle of an event; and
//! [`ProxyHandle::drop_connections`] closes every open connection at once; [`ProxyHandle::mute`]
//! makes chosen responses, streaming ones included, go silent without closing (a half-open
//! connection, a stuck load balancer). The proxy counts the
//! requests per method and path so a test can assert that a client did not retry in a storm,
//! and what the forwarded responses carried ([`ProxyHandle::received`]: bytes, and the lines of
//! a watch, its events).
//!
//! Bounded: at most [`MAX_CONNECTIONS`] connections, each with one upstream connection; the
//! request log keeps the last [`LOG_CAPACITY`] requests. Dropping the [`FaultProxy`] stops it and
//! closes all its connections.
//!
//! ```no_run
//! # async fn doc() -> anyhow::Result<()> {
//! use kopf_tests::proxy::{Fault, FaultProxy, Match, Rule};
//!
//! let proxy = FaultProxy::start(&kopf_tests::test_config().await?).await?;
//! let client = kube::Client::try_from(proxy.config())?;
//! // The next status patch is answered 409 Conflict; everything else is forwarded.
//! proxy.handle().inject(Rule::new(Match::method(http::Method::PATCH).path("/status"),
//!     Fault::conflict()).times(1));
//! proxy.handle().drop_connections();
//! # drop(client);
//! # Ok(()) }
//! # let _ = doc;
//! ```

mod body;
mod forward;
mod mute;
mod rules;
mod stats;
mod tls;
mod traffic;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use http::Method;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

pub use rules::{Fault, Match, Rule};
pub use stats::{LOG_CAPACITY, RequestRecord};
pub use traffic::Received;

use forward::{AbortOnDrop, Upstream};
use stats::Stats;
use traffic::Traffic;

/// At most this many downstream connections are served at once; more wait to be accepted.
pub const MAX_CONNECTIONS: usize = 512;

/// Why the proxy could not start.
///
/// # Examples
///
/// ```
/// let err = kopf_tests::proxy::ProxyError::NoUpstreamCa;
/// assert!(err.to_string().contains("certificate-authority"));
/// ```
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// A certificate could not be generated.
    #[error("cannot generate the proxy's {0}: {1}")]
    Certificate(&'static str, #[source] rcgen::Error),
    /// A TLS configuration was refused.
    #[error("TLS setup failed: {0}")]
    Tls(#[source] rustls::Error),
    /// The upstream config has no CA to verify the API server with (verification is never off).
    #[error(
        "the upstream kubeconfig has no certificate-authority data; the proxy never connects \
         without verifying the API server"
    )]
    NoUpstreamCa,
    /// The upstream config cannot be used (URL, server name, client certificates).
    #[error("unusable upstream: {0}")]
    Upstream(String),
    /// The loopback listener could not be opened.
    #[error("cannot listen on 127.0.0.1: {0}")]
    Listen(#[source] std::io::Error),
}

/// State shared by the accept loop, the connections and the handles.
#[derive(Debug)]
pub(crate) struct Shared {
    rules: Mutex<rules::RuleTable>,
    stats: Mutex<Stats>,
    /// What the forwarded responses carried.
    traffic: Arc<Mutex<Traffic>>,
    /// Cancelled by `drop_connections`; replaced by a fresh child of `shutdown` each time.
    connections: Mutex<CancellationToken>,
    /// Bumped by `release_stalled`.
    release: watch::Sender<u64>,
    /// The mutes in place (`ProxyHandle::mute`).
    mutes: mute::Mutes,
    shutdown: CancellationToken,
    open: AtomicUsize,
    upstream_errors: AtomicUsize,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    /// The fault for one request (consuming a rule use), recorded in the stats.
    pub(crate) fn decide(&self, method: &Method, path: &str) -> Option<Fault> {
        let fault = lock(&self.rules).take(method, path);
        lock(&self.stats).record(method, path, fault.as_ref());
        fault
    }

    /// Waits until the next `release_stalled`.
    pub(crate) async fn stalled(&self) {
        let mut release = self.release.subscribe();
        release.mark_unchanged();
        let _ = release.changed().await;
    }

    pub(crate) fn upstream_failed(&self) {
        self.upstream_errors.fetch_add(1, Ordering::Relaxed);
    }
}

/// Traffic figures of a proxy; see [`ProxyHandle::counters`].
///
/// # Examples
///
/// ```no_run
/// # async fn doc(proxy: &kopf_tests::proxy::FaultProxy) {
/// let c = proxy.handle().counters();
/// println!("{} requests, {} faults injected, {} drops", c.requests, c.faults, c.drops);
/// # }
/// # let _ = doc;
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Requests received.
    pub requests: u64,
    /// Requests a rule applied to.
    pub faults: u64,
    /// Connections accepted.
    pub connections: u64,
    /// Connections open now.
    pub open: usize,
    /// Calls of [`ProxyHandle::drop_connections`].
    pub drops: u64,
    /// Requests that could not reach the API server (their connection was closed).
    pub upstream_errors: usize,
}

/// The test's remote control of a running [`FaultProxy`]; cheap to clone.
///
/// # Examples
///
/// ```no_run
/// # async fn doc(proxy: &kopf_tests::proxy::FaultProxy) {
/// use kopf_tests::proxy::{Fault, Match, Rule};
/// let handle = proxy.handle();
/// let id = handle.inject(Rule::new(Match::watches(), Fault::WatchGone).times(1));
/// handle.remove(id);
/// # }
/// # let _ = doc;
/// ```
#[derive(Debug, Clone)]
pub struct ProxyHandle {
    shared: Arc<Shared>,
}

impl ProxyHandle {
    /// Installs `rule` after the existing ones (the first matching rule applies) and returns an
    /// id for [`remove`](Self::remove).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn doc(handle: &kopf_tests::proxy::ProxyHandle) {
    /// use kopf_tests::proxy::{Fault, Match, Rule};
    /// handle.inject(Rule::new(Match::method(http::Method::PATCH), Fault::too_many_requests(2)));
    /// # }
    /// # let _ = doc;
    /// ```
    pub fn inject(&self, rule: Rule) -> u64 {
        lock(&self.shared.rules).add(rule)
    }

    /// Removes a rule; `false` if it was already gone (used up or cleared).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn doc(handle: &kopf_tests::proxy::ProxyHandle) {
    /// use kopf_tests::proxy::{Fault, Match, Rule};
    /// let id = handle.inject(Rule::new(Match::any(), Fault::unavailable()));
    /// assert!(handle.remove(id));
    /// # }
    /// # let _ = doc;
    /// ```
    pub fn remove(&self, id: u64) -> bool {
        lock(&self.shared.rules).remove(id)
    }

    /// Removes every rule: from now on everything is forwarded unchanged.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn doc(handle: &kopf_tests::proxy::ProxyHandle) {
    /// handle.clear();
    /// assert_eq!(handle.rules(), 0);
    /// # }
    /// # let _ = doc;
    /// ```
    pub fn clear(&self) {
        lock(&self.shared.rules).clear();
    }

    /// How many rules are installed (limited rules disappear when used up).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn doc(handle: &kopf_tests::proxy::ProxyHandle) {
    /// println!("{} rules left", handle.rules());
    /// # }
    /// # let _ = doc;
    /// ```
    #[must_use]
    pub fn rules(&self) -> usize {
        lock(&self.shared.rules).len()
    }

    /// Closes every open connection (both sides) at once, as a network failure would; returns
    /// how many were open. New connections are accepted as usual.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn doc(handle: &kopf_tests::proxy::ProxyHandle) {
    /// let closed = handle.drop_connections();
    /// println!("closed {closed} connections");
    /// # }
    /// # let _ = doc;
    /// ```
    pub fn drop_connections(&self) -> usize {
        let open = self.shared.open.load(Ordering::SeqCst);
        let fresh = self.shared.shutdown.child_token();
        let old = std::mem::replace(&mut *lock(&self.shared.connections), fresh);
        old.cancel();
        lock(&self.shared.stats).drops += 1;
        open
    }

    /// Lets every request held by a [`Fault::Stall`] or a [`Fault::Hold`] go on (they are
    /// forwarded).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn doc(handle: &kopf_tests::proxy::ProxyHandle) {
    /// handle.release_stalled();
    /// # }
    /// # let _ = doc;
    /// ```
    pub fn release_stalled(&self) {
        self.shared
            .release
            .send_modify(|generation| *generation += 1);
    }

    /// Mutes the responses of the requests `matcher` selects (matched against the
    /// path-and-query, as [`Rule`]s are): from now on, those streaming (a watch) and those to
    /// come forward nothing more to their client — no bytes, not their end — while their
    /// connections stay open, as over a half-open TCP connection or through a stuck load
    /// balancer. Requests still reach the API server and their answers' headers pass. Returns
    /// an id for [`unmute`](Self::unmute).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn doc(handle: &kopf_tests::proxy::ProxyHandle) {
    /// use kopf_tests::proxy::Match;
    /// let silence = handle.mute(Match::watches().path("/kopfexamples"));
    /// // … the operator's watches of kopfexamples receive nothing now …
    /// assert!(handle.unmute(silence));
    /// # }
    /// # let _ = doc;
    /// ```
    pub fn mute(&self, matcher: Match) -> u64 {
        self.shared.mutes.add(matcher)
    }

    /// Lifts a mute: what its responses held goes on to the clients still waiting for it.
    /// `false` if it was already lifted.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn doc(handle: &kopf_tests::proxy::ProxyHandle) {
    /// let silence = handle.mute(kopf_tests::proxy::Match::watches());
    /// assert!(handle.unmute(silence));
    /// assert!(!handle.unmute(silence));
    /// # }
    /// # let _ = doc;
    /// ```
    pub fn unmute(&self, id: u64) -> bool {
        self.shared.mutes.remove(id)
    }

    /// How many requests `matcher` selects so far, matched against the path (without the
    /// query; a watch shows as `path?watch=true`).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn doc(handle: &kopf_tests::proxy::ProxyHandle) {
    /// use kopf_tests::proxy::Match;
    /// let patches = handle.count(&Match::method(http::Method::PATCH).path("/kopfexamples/"));
    /// assert!(patches < 10, "retry storm: {patches} patches");
    /// # }
    /// # let _ = doc;
    /// ```
    #[must_use]
    pub fn count(&self, matcher: &Match) -> u64 {
        lock(&self.shared.stats).count(matcher)
    }

    /// The last [`LOG_CAPACITY`] requests, oldest first, with their arrival time and fault.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn doc(handle: &kopf_tests::proxy::ProxyHandle) {
    /// let patches = handle.log().into_iter().filter(|r| r.method == http::Method::PATCH);
    /// for pair in patches.collect::<Vec<_>>().windows(2) {
    ///     println!("{:?} between two patches", pair[1].at - pair[0].at);
    /// }
    /// # }
    /// # let _ = doc;
    /// ```
    #[must_use]
    pub fn log(&self) -> Vec<RequestRecord> {
        lock(&self.shared.stats).log()
    }

    /// What the forwarded responses of the requests `matcher` selects carried to the client
    /// so far: their number, bytes and lines (a watch's events), matched as in
    /// [`count`](Self::count). Made-up answers (faults) are not included.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn doc(handle: &kopf_tests::proxy::ProxyHandle) {
    /// use kopf_tests::proxy::Match;
    /// let events = handle.received(&Match::watches()).lines;
    /// println!("{events} watch events received");
    /// # }
    /// # let _ = doc;
    /// ```
    #[must_use]
    pub fn received(&self, matcher: &Match) -> Received {
        lock(&self.shared.traffic).received(matcher)
    }

    /// The proxy's traffic counters.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn doc(handle: &kopf_tests::proxy::ProxyHandle) {
    /// assert_eq!(handle.counters().upstream_errors, 0);
    /// # }
    /// # let _ = doc;
    /// ```
    #[must_use]
    pub fn counters(&self) -> Counters {
        let stats = lock(&self.shared.stats);
        Counters {
            requests: stats.total,
            faults: stats.faults,
            connections: stats.connections,
            open: self.shared.open.load(Ordering::SeqCst),
            drops: stats.drops,
            upstream_errors: self.shared.upstream_errors.load(Ordering::Relaxed),
        }
    }
}

/// A running fault-injecting proxy; stopped when dropped (or by [`stop`](Self::stop)).
///
/// # Examples
///
/// ```no_run
/// # async fn doc() -> anyhow::Result<()> {
/// let upstream = kopf_tests::test_config().await?;
/// let proxy = kopf_tests::proxy::FaultProxy::start(&upstream).await?;
/// let client = kopf_tests::connect(proxy.config()).await?;
/// assert!(proxy.handle().counters().requests >= 1);
/// proxy.stop().await;
/// # drop(client);
/// # Ok(()) }
/// # let _ = doc;
/// ```
#[derive(Debug)]
pub struct FaultProxy {
    handle: ProxyHandle,
    address: SocketAddr,
    config: kube::Config,
    accept: Option<AbortOnDrop>,
}

impl FaultProxy {
    /// Starts a proxy on a free port of 127.0.0.1 in front of the API server of `upstream`.
    ///
    /// # Errors
    ///
    /// If `upstream` is not an https server with a CA to verify it by, has a client certificate
    /// (not supported: the proxy forwards headers, not TLS identities), or no port is free.
    ///
    /// # Cancellation safety
    ///
    /// Cancel-safe: nothing runs before it returns.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn doc() -> anyhow::Result<()> {
    /// let proxy = kopf_tests::proxy::FaultProxy::start(&kopf_tests::test_config().await?).await?;
    /// println!("proxy at {}", proxy.address());
    /// # Ok(()) }
    /// # let _ = doc;
    /// ```
    pub async fn start(upstream: &kube::Config) -> Result<Self, ProxyError> {
        let auth = &upstream.auth_info;
        if auth.client_certificate.is_some() || auth.client_certificate_data.is_some() {
            return Err(ProxyError::Upstream(
                "client-certificate authentication cannot be proxied; use a token".to_owned(),
            ));
        }
        let target = Arc::new(Upstream::from_config(upstream)?);
        let downstream = tls::downstream()?;
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(ProxyError::Listen)?;
        let address = listener.local_addr().map_err(ProxyError::Listen)?;
        let shutdown = CancellationToken::new();
        let shared = Arc::new(Shared {
            rules: Mutex::default(),
            stats: Mutex::default(),
            traffic: Arc::default(),
            connections: Mutex::new(shutdown.child_token()),
            release: watch::Sender::new(0),
            mutes: mute::Mutes::default(),
            shutdown,
            open: AtomicUsize::new(0),
            upstream_errors: AtomicUsize::new(0),
        });
        let acceptor = TlsAcceptor::from(Arc::clone(&downstream.server));
        let accept = tokio::spawn(accept_loop(listener, acceptor, target, Arc::clone(&shared)));

        let mut config = upstream.clone();
        config.cluster_url = format!("https://{address}")
            .parse()
            .map_err(|err| ProxyError::Upstream(format!("proxy URL: {err}")))?;
        config.root_cert = Some(vec![downstream.ca_der]);
        config.root_cert_file = None;
        config.tls_server_name = None;
        config.accept_invalid_certs = false;
        config.proxy_url = None;
        Ok(Self {
            handle: ProxyHandle { shared },
            address,
            config,
            accept: Some(AbortOnDrop(accept)),
        })
    }

    /// The control handle (rules, connection drops, counters).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn doc(proxy: &kopf_tests::proxy::FaultProxy) {
    /// let handle = proxy.handle().clone();
    /// handle.clear();
    /// # }
    /// # let _ = doc;
    /// ```
    #[must_use]
    pub fn handle(&self) -> &ProxyHandle {
        &self.handle
    }

    /// The proxy's address on 127.0.0.1.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn doc(proxy: &kopf_tests::proxy::FaultProxy) {
    /// assert!(proxy.address().ip().is_loopback());
    /// # }
    /// # let _ = doc;
    /// ```
    #[must_use]
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The upstream config pointed at the proxy and trusting the proxy's CA (and nothing else);
    /// credentials and other settings are those of the upstream config.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn doc(proxy: &kopf_tests::proxy::FaultProxy) -> anyhow::Result<()> {
    /// let client = kube::Client::try_from(proxy.config())?;
    /// client.apiserver_version().await?;
    /// # Ok(()) }
    /// # let _ = doc;
    /// ```
    #[must_use]
    pub fn config(&self) -> kube::Config {
        self.config.clone()
    }

    /// Stops accepting and closes every connection.
    ///
    /// # Cancellation safety
    ///
    /// Cancel-safe: the proxy is stopped by the time the first poll returns.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn doc(proxy: kopf_tests::proxy::FaultProxy) {
    /// proxy.stop().await;
    /// # }
    /// # let _ = doc;
    /// ```
    pub async fn stop(mut self) {
        self.shutdown();
        tokio::task::yield_now().await;
    }

    fn shutdown(&mut self) {
        self.handle.shared.shutdown.cancel();
        self.accept = None;
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shutdown();
    }
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    upstream: Arc<Upstream>,
    shared: Arc<Shared>,
) {
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
            return;
        };
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(_) => continue,
            },
            () = shared.shutdown.cancelled() => return,
        };
        lock(&shared.stats).connections += 1;
        let dropped = lock(&shared.connections).clone();
        let (acceptor, upstream, shared) =
            (acceptor.clone(), Arc::clone(&upstream), Arc::clone(&shared));
        tokio::spawn(async move {
            shared.open.fetch_add(1, Ordering::SeqCst);
            forward::serve(tcp, acceptor, upstream, Arc::clone(&shared), dropped).await;
            shared.open.fetch_sub(1, Ordering::SeqCst);
            drop(permit);
        });
    }
}
