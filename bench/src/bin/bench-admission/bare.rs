//! The reference arm: the same admission check as a bare axum handler behind tokio-rustls, the
//! way kube-rs operators serve webhooks by hand (kube's `admission` types, no limits beyond
//! hyper's defaults).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use axum::routing::post;
use axum::{Json, Router};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use kopf_examples::crd::KopfExample;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::{NO_OWNER, owner_named};

/// The check, answered as a kube-rs user answers it.
async fn validate(
    Json(review): Json<AdmissionReview<KopfExample>>,
) -> Json<AdmissionReview<DynamicObject>> {
    let request: AdmissionRequest<KopfExample> = match review.try_into() {
        Ok(request) => request,
        Err(e) => return Json(AdmissionResponse::invalid(e.to_string()).into_review()),
    };
    let response = AdmissionResponse::from(&request);
    let response = match &request.object {
        Some(obj) if owner_named(obj) => response,
        _ => response.deny(NO_OWNER),
    };
    Json(response.into_review())
}

/// A bound TLS listener with the router.
pub(crate) struct Server {
    listener: TcpListener,
    tls: TlsAcceptor,
    app: Router,
}

impl Server {
    /// Binds `addr` with the certificate and key in `certs` (`tls.crt`, `tls.key`).
    pub(crate) async fn bind(addr: SocketAddr, certs: &Path) -> anyhow::Result<Self> {
        let chain = CertificateDer::pem_file_iter(certs.join("tls.crt"))
            .context("reading tls.crt")?
            .collect::<Result<Vec<_>, _>>()
            .context("parsing tls.crt")?;
        let key = PrivateKeyDer::from_pem_file(certs.join("tls.key")).context("reading tls.key")?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, key)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self {
            listener: TcpListener::bind(addr).await?,
            tls: TlsAcceptor::from(Arc::new(config)),
            app: Router::new().route("/validate/owner", post(validate)),
        })
    }

    /// The port it listens on.
    pub(crate) fn port(&self) -> u16 {
        self.listener.local_addr().map_or(0, |a| a.port())
    }

    /// Accepts connections until an accept fails; each one is served on a task of its own.
    ///
    /// # Cancellation safety
    ///
    /// Cancel safe: dropping it stops accepting; connections being served go on.
    pub(crate) async fn serve(self) -> anyhow::Result<()> {
        loop {
            let (tcp, _) = self.listener.accept().await?;
            let (tls, app) = (self.tls.clone(), self.app.clone());
            tokio::spawn(async move {
                let Ok(stream) = tls.accept(tcp).await else {
                    return;
                };
                let service = TowerToHyperService::new(app);
                let _ended = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    }
}
