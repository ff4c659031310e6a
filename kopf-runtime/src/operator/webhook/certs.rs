//! The webhook server's certificates: a CA the replicas share (kept in a Secret, made by the
//! first replica that finds none) and a serving certificate each replica issues itself from it
//! and renews in memory; or a certificate and key from files, reloaded when they change.
//!
//! Every replica's serving certificate chains to the one CA in the webhook configurations'
//! `caBundle`, so any replica may answer, and renewing a serving certificate never changes the
//! bundle: no admission fails across a renewal.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, PostParams};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::error::WebhookError;

/// The keys of the CA's Secret.
const CA_CERT: &str = "ca.crt";
const CA_KEY: &str = "ca.key";

/// The CA's common name.
const CA_NAME: &str = "kopf-rs admission webhook CA";

/// How many days a self-signed serving certificate is valid; it is renewed after two thirds.
const SERVING_DAYS: i64 = 90;

/// When a self-signed serving certificate is renewed: two thirds into its validity.
pub(super) const SERVING_RENEWAL: Duration = Duration::from_secs(60 * 24 * 3600);

/// The UTC date `days` from today (year, month, day), as certificates count validity.
fn ymd(days: i64) -> (i32, u8, u8) {
    let then = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(24 * days);
    let date = then.to_zoned(jiff::tz::TimeZone::UTC).date();
    let month = u8::try_from(date.month()).unwrap_or(1);
    let day = u8::try_from(date.day()).unwrap_or(1);
    (i32::from(date.year()), month, day)
}

/// The start of the UTC day `days` from today.
macro_rules! day {
    ($days:expr) => {{
        let (year, month, day) = ymd($days);
        rcgen::date_time_ymd(year, month, day)
    }};
}

/// A CA: its certificate (PEM, the `caBundle`) and what signs with it.
pub(super) struct Authority {
    pub(super) ca_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority").finish_non_exhaustive()
    }
}

fn rcgen(what: &'static str) -> impl Fn(rcgen::Error) -> WebhookError {
    move |source| WebhookError::Certificate { what, source }
}

impl Authority {
    /// The CA's parameters: what signing needs of it is its name and its key, so that the ones
    /// of a CA read back from its Secret sign as the original did.
    fn params() -> Result<CertificateParams, WebhookError> {
        let mut params =
            CertificateParams::new(Vec::<String>::new()).map_err(rcgen("the CA parameters"))?;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        (params.distinguished_name).push(DnType::CommonName, CA_NAME);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        Ok(params)
    }

    /// A new CA, valid for ten years.
    pub(super) fn generate() -> Result<Self, WebhookError> {
        let key = KeyPair::generate().map_err(rcgen("the CA key"))?;
        let mut params = Self::params()?;
        params.not_before = day!(-1);
        params.not_after = day!(3650);
        let cert = params
            .self_signed(&key)
            .map_err(rcgen("the CA certificate"))?;
        Ok(Self {
            ca_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// The CA kept as `ca.crt` and `ca.key` (PEM).
    fn from_pem(cert: &str, key: &str) -> Result<Self, WebhookError> {
        let key = KeyPair::from_pem(key).map_err(rcgen("the CA key in the Secret"))?;
        Ok(Self {
            ca_pem: cert.to_owned(),
            issuer: Issuer::new(Self::params()?, key),
        })
    }

    /// A server configuration with a new serving certificate for `names`.
    pub(super) fn serve(&self, names: &[String]) -> Result<Arc<ServerConfig>, WebhookError> {
        let (chain, key) = self.issue(names)?;
        server_config(chain, key)
    }

    /// A serving certificate for `names` (DNS names or IP addresses), with its chain and key.
    fn issue(
        &self,
        names: &[String],
    ) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), WebhookError> {
        let key = KeyPair::generate().map_err(rcgen("the serving key"))?;
        let mut params =
            CertificateParams::new(names.to_vec()).map_err(rcgen("the serving names"))?;
        let common = names.first().cloned().unwrap_or_default();
        params.distinguished_name.push(DnType::CommonName, common);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.not_before = day!(-1);
        params.not_after = day!(SERVING_DAYS);
        let cert =
            (params.signed_by(&key, &self.issuer)).map_err(rcgen("the serving certificate"))?;
        let ca = CertificateDer::from_pem_slice(self.ca_pem.as_bytes()).map_err(|e| {
            WebhookError::Pem {
                what: "the CA certificate",
                message: e.to_string(),
            }
        })?;
        let chain = vec![cert.der().clone(), ca];
        let key = PrivateKeyDer::try_from(key.serialize_der()).map_err(|e| WebhookError::Pem {
            what: "the serving key",
            message: e.to_owned(),
        })?;
        Ok((chain, key))
    }

    /// The CA of the Secret `name` in `namespace`: read, or made and stored if there is none
    /// (another replica storing one first wins, and is read).
    ///
    /// # Cancellation safety
    /// Cancel safe: a Secret created before the cancellation is read by the next attempt.
    pub(super) async fn shared(
        client: kube::Client,
        (namespace, name): (&str, &str),
        operator: &str,
    ) -> Result<Self, WebhookError> {
        let secrets: Api<Secret> = Api::namespaced(client, namespace);
        let secret_err = |source| WebhookError::Secret {
            secret: format!("{namespace}/{name}"),
            source,
        };
        if let Some(secret) = secrets.get_opt(name).await.map_err(secret_err)? {
            return Self::from_secret(&secret, namespace, name);
        }
        let made = Self::generate()?;
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                labels: Some(BTreeMap::from([(
                    "app.kubernetes.io/managed-by".to_owned(),
                    operator.to_owned(),
                )])),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([
                (
                    CA_CERT.to_owned(),
                    ByteString(made.ca_pem.clone().into_bytes()),
                ),
                (
                    CA_KEY.to_owned(),
                    ByteString(made.issuer.key().serialize_pem().into_bytes()),
                ),
            ])),
            ..Secret::default()
        };
        match secrets.create(&PostParams::default(), &secret).await {
            Ok(_) => Ok(made),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                let secret = secrets.get(name).await.map_err(secret_err)?;
                Self::from_secret(&secret, namespace, name)
            }
            Err(source) => Err(secret_err(source)),
        }
    }

    fn from_secret(secret: &Secret, namespace: &str, name: &str) -> Result<Self, WebhookError> {
        let field = |key: &str| {
            let value = secret.data.as_ref().and_then(|d| d.get(key));
            value
                .and_then(|v| String::from_utf8(v.0.clone()).ok())
                .ok_or_else(|| WebhookError::BadSecret {
                    secret: format!("{namespace}/{name}"),
                    why: format!("it has no `{key}` in PEM"),
                })
        };
        Self::from_pem(&field(CA_CERT)?, &field(CA_KEY)?)
    }
}

/// A certificate chain and key from files (`tls.crt`, `tls.key`), and the CA to put in the
/// `caBundle` (`ca.crt`, else the chain's last certificate).
pub(super) fn from_files(dir: &Path) -> Result<(Arc<ServerConfig>, String), WebhookError> {
    let read = |file: &str| {
        let path = dir.join(file);
        std::fs::read(&path).map_err(|source| WebhookError::File { path, source })
    };
    let pem = |what: &'static str| {
        move |e: rustls::pki_types::pem::Error| WebhookError::Pem {
            what,
            message: e.to_string(),
        }
    };
    let chain_pem = read("tls.crt")?;
    let chain = CertificateDer::pem_slice_iter(&chain_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(pem("tls.crt"))?;
    let key = PrivateKeyDer::from_pem_slice(&read("tls.key")?).map_err(pem("tls.key"))?;
    let bundle = match read("ca.crt") {
        Ok(ca) => String::from_utf8_lossy(&ca).into_owned(),
        Err(_) => last_pem_block(&String::from_utf8_lossy(&chain_pem)),
    };
    Ok((server_config(chain, key)?, bundle))
}

/// The last `-----BEGIN ...-----` block of a PEM text.
fn last_pem_block(text: &str) -> String {
    text.rfind("-----BEGIN")
        .map_or_else(String::new, |at| text[at..].to_owned())
}

fn server_config(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<Arc<ServerConfig>, WebhookError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(WebhookError::Tls)?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(WebhookError::Tls)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    use rustls::client::WebPkiServerVerifier;
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::{ServerName, UnixTime};

    /// Whether a client trusting only `ca` accepts `chain` for `name`.
    fn verifies(ca: &str, chain: &[CertificateDer<'static>], name: &str) -> bool {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(ca.as_bytes()).unwrap())
            .unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .unwrap();
        let name = ServerName::try_from(name.to_owned()).unwrap();
        let (leaf, rest) = chain.split_first().unwrap();
        verifier
            .verify_server_cert(leaf, rest, &name, &[], UnixTime::now())
            .is_ok()
    }

    #[test]
    fn a_ca_read_back_from_its_secret_signs_certificates_its_bundle_verifies() {
        let ca = Authority::generate().unwrap();
        let names = ["127.0.0.1".to_owned(), "hooks.ops.svc".to_owned()];
        let (chain, _) = ca.issue(&names).unwrap();
        assert!(verifies(&ca.ca_pem, &chain, "hooks.ops.svc"));
        let again = Authority::from_pem(&ca.ca_pem, &ca.issuer.key().serialize_pem()).unwrap();
        let (chain, _) = again.issue(&names).unwrap();
        assert!(
            verifies(&ca.ca_pem, &chain, "hooks.ops.svc"),
            "the reread CA signs alike"
        );
        assert!(verifies(&ca.ca_pem, &chain, "127.0.0.1"));
        assert!(
            !verifies(&ca.ca_pem, &chain, "other.ops.svc"),
            "only for its names"
        );
        let stranger = Authority::generate().unwrap();
        assert!(
            !verifies(&stranger.ca_pem, &chain, "hooks.ops.svc"),
            "only under its CA"
        );
        assert!(again.serve(&names).is_ok());
    }

    #[test]
    fn the_bundle_from_a_chain_is_its_last_certificate() {
        let text = "-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----\n\
                    -----BEGIN CERTIFICATE-----\nB\n-----END CERTIFICATE-----\n";
        assert!(last_pem_block(text).contains("\nB\n"));
        assert_eq!(last_pem_block("nothing"), "");
    }
}
