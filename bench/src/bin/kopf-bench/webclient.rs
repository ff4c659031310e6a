//! Scenario 11's side of the wire: the certificates both servers load, and an HTTPS client that
//! posts `AdmissionReview`s as the API server does (HTTP/1.1, connections kept and reused, a new
//! one opened when none is idle), at a fixed rate whatever the answers' latency (an open loop:
//! a slow answer delays no later request, so no slowness hides).

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use http::{Request, header};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::time::{Instant, MissedTickBehavior};

/// The path both servers answer the check on (kopf-rs: `/validate/<handler id>`).
pub(crate) const PATH: &str = "/validate/owner";

/// Makes a CA and a serving certificate for 127.0.0.1, writes `tls.crt` and `tls.key` into
/// `dir`, and returns the CA (PEM).
pub(crate) fn write_certificates(dir: &Path) -> anyhow::Result<String> {
    let ca_key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
    let ca_pem = params.self_signed(&ca_key)?.pem();
    let issuer = rcgen::Issuer::new(params, ca_key);
    let key = rcgen::KeyPair::generate()?;
    let cert =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])?.signed_by(&key, &issuer)?;
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("tls.key"), key.serialize_pem())?;
    std::fs::write(dir.join("tls.crt"), cert.pem() + &ca_pem)?;
    Ok(ca_pem)
}

/// An `AdmissionReview` of the creation of a `KopfExample` (about 1.3 KB), with `uid`; the
/// object names an owner when `owned`.
pub(crate) fn review(uid: &str, owned: bool) -> Vec<u8> {
    let field = if owned { json!("team-a") } else { Value::Null };
    let object = json!({
        "apiVersion": "kopf.dev/v1", "kind": "KopfExample",
        "metadata": {
            "name": format!("obj-{uid}"), "namespace": "bench", "uid": uid,
            "labels": {"app": "bench", "tier": "backend"},
            "annotations": {"example.com/note": "an object of the admission benchmark"},
            "creationTimestamp": "2026-12-06T00:00:00Z",
        },
        "spec": {"field": field, "items": ["one", "two", "three"]},
    });
    let review = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "kopf.dev", "version": "v1", "kind": "KopfExample"},
            "resource": {"group": "kopf.dev", "version": "v1", "resource": "kopfexamples"},
            "requestKind": {"group": "kopf.dev", "version": "v1", "kind": "KopfExample"},
            "requestResource": {"group": "kopf.dev", "version": "v1", "resource": "kopfexamples"},
            "name": format!("obj-{uid}"), "namespace": "bench", "operation": "CREATE",
            "userInfo": {"username": "system:admin", "groups": ["system:masters", "system:authenticated"]},
            "object": object, "oldObject": null, "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    });
    serde_json::to_vec(&review).unwrap_or_default()
}

/// What an answer said: admitted or not, and the refusal's message.
pub(crate) struct Answer {
    pub(crate) allowed: bool,
    pub(crate) message: String,
}

/// A keep-alive HTTPS client of one server.
pub(crate) struct Client {
    connector: tokio_rustls::TlsConnector,
    port: u16,
    idle: Mutex<Vec<SendRequest<Full<Bytes>>>>,
}

impl Client {
    /// A client of `127.0.0.1:port` trusting `ca` (PEM).
    pub(crate) fn new(port: u16, ca: &str) -> anyhow::Result<Self> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from_pem_slice(ca.as_bytes())?)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Self {
            connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
            port,
            idle: Mutex::new(Vec::new()),
        })
    }

    /// An idle connection, or a new one.
    async fn connection(&self) -> anyhow::Result<SendRequest<Full<Bytes>>> {
        loop {
            let kept = self
                .idle
                .lock()
                .map_err(|_| anyhow::anyhow!("poisoned"))?
                .pop();
            match kept {
                Some(sender) if !sender.is_closed() => return Ok(sender),
                Some(_) => {}
                None => break,
            }
        }
        let tcp = TcpStream::connect(("127.0.0.1", self.port)).await?;
        tcp.set_nodelay(true)?;
        let name = ServerName::try_from("127.0.0.1")?;
        let tls = self.connector.connect(name, tcp).await?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        tokio::spawn(connection);
        Ok(sender)
    }

    /// Posts one review, reads its answer and checks it echoes `uid`.
    ///
    /// # Cancellation safety
    ///
    /// Not cancel safe: a cancelled post drops its connection.
    pub(crate) async fn post(&self, uid: &str, body: Vec<u8>) -> anyhow::Result<Answer> {
        let mut sender = self.connection().await?;
        sender.ready().await?;
        let request = Request::post(PATH)
            .header(header::HOST, "127.0.0.1")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))?;
        let response = sender.send_request(request).await?;
        let status = response.status();
        let closes = (response.headers().get(header::CONNECTION))
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
        let body = response.into_body().collect().await?.to_bytes();
        if !closes {
            self.idle
                .lock()
                .map_err(|_| anyhow::anyhow!("poisoned"))?
                .push(sender);
        }
        anyhow::ensure!(
            status.is_success(),
            "HTTP {status}: {}",
            String::from_utf8_lossy(&body)
        );
        let review: Value = serde_json::from_slice(&body).context("the answer is not JSON")?;
        let response = &review["response"];
        anyhow::ensure!(
            response["uid"] == uid,
            "the answer's uid is not the request's"
        );
        Ok(Answer {
            allowed: response["allowed"]
                .as_bool()
                .context("no `allowed` in the answer")?,
            message: response["status"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        })
    }
}

/// What a run of requests gave: each latency in ms (from the instant it was due), and the
/// requests that failed or were answered wrongly.
#[derive(Default)]
pub(crate) struct Load {
    pub(crate) latencies_ms: Vec<f64>,
    pub(crate) failed: usize,
    pub(crate) first_failure: Option<String>,
}

/// Posts admissible reviews at `rate` per second for `duration`, each due at its own instant.
///
/// # Cancellation safety
///
/// Not cancel safe: the requests in flight are abandoned.
pub(crate) async fn load(client: &Arc<Client>, rate: usize, duration: Duration) -> Load {
    let period = Duration::from_secs(1) / u32::try_from(rate.max(1)).unwrap_or(u32::MAX);
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Burst);
    let end = Instant::now() + duration;
    let mut tasks = tokio::task::JoinSet::new();
    let mut sent = 0_u64;
    loop {
        let due = ticks.tick().await;
        if due >= end {
            break;
        }
        sent += 1;
        let (client, uid) = (client.clone(), format!("r{sent}"));
        tasks.spawn(async move {
            let out = client.post(&uid, review(&uid, true)).await;
            let ms = due.elapsed().as_secs_f64() * 1e3;
            out.and_then(|a| {
                anyhow::ensure!(a.allowed, "an admissible object was refused: {}", a.message);
                Ok(ms)
            })
        });
    }
    let mut out = Load::default();
    while let Some(joined) = tasks.join_next().await {
        match joined.map_err(anyhow::Error::from).and_then(|r| r) {
            Ok(ms) => out.latencies_ms.push(ms),
            Err(e) => {
                out.failed += 1;
                out.first_failure.get_or_insert_with(|| format!("{e:#}"));
            }
        }
    }
    out
}
