//! The proxy's TLS: a fresh CA and serving certificate per proxy (downstream), and a client
//! configuration that trusts the real API server's CA (upstream). Verification is never off.

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use super::ProxyError;

/// The names the proxy's serving certificate is valid for.
const SERVING_NAMES: [&str; 2] = ["127.0.0.1", "localhost"];

/// The CA the test trusts and the server configuration signed by it.
pub(crate) struct DownstreamTls {
    /// The CA certificate (DER), to put into the clients' `root_cert`.
    pub(crate) ca_der: Vec<u8>,
    /// The rustls server configuration (HTTP/1.1 only).
    pub(crate) server: Arc<ServerConfig>,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Generates a CA and a serving certificate for 127.0.0.1/localhost signed by it.
pub(crate) fn downstream() -> Result<DownstreamTls, ProxyError> {
    let tls = |what: &'static str| move |err: rcgen::Error| ProxyError::Certificate(what, err);
    let ca_key = KeyPair::generate().map_err(tls("CA key"))?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(tls("CA params"))?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "kopf-tests fault proxy CA");
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca_params
        .self_signed(&ca_key)
        .map_err(tls("CA certificate"))?;
    let issuer = Issuer::new(ca_params, ca_key);

    let key = KeyPair::generate().map_err(tls("serving key"))?;
    let names: Vec<String> = SERVING_NAMES.iter().map(|s| (*s).to_owned()).collect();
    let mut params = CertificateParams::new(names).map_err(tls("serving params"))?;
    params
        .distinguished_name
        .push(DnType::CommonName, "kopf-tests fault proxy");
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(tls("serving certificate"))?;

    let chain = vec![cert.der().clone(), ca_cert.der().clone()];
    let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let mut server = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(ProxyError::Tls)?
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .map_err(ProxyError::Tls)?;
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(DownstreamTls {
        ca_der: ca_cert.der().to_vec(),
        server: Arc::new(server),
    })
}

/// A client configuration trusting exactly `roots` (the API server's CA from the kubeconfig).
pub(crate) fn upstream(roots: &[Vec<u8>]) -> Result<Arc<ClientConfig>, ProxyError> {
    if roots.is_empty() {
        return Err(ProxyError::NoUpstreamCa);
    }
    let mut store = RootCertStore::empty();
    for der in roots {
        store
            .add(CertificateDer::from(der.clone()))
            .map_err(ProxyError::Tls)?;
    }
    let mut client = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(ProxyError::Tls)?
        .with_root_certificates(store)
        .with_no_client_auth();
    client.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(client))
}
