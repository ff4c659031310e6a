//! What the admission webhook tests share: a TLS connection to a webhook server on the
//! loopback that trusts only the CA the operator made, and removing the webhook configurations
//! an operator left behind.

use std::sync::Arc;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, DeleteParams, ListParams};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// A port on the loopback that was free a moment ago: for a webhook server's URL.
///
/// # Panics
///
/// If the loopback has no free port.
///
/// # Examples
///
/// ```
/// assert_ne!(kopf_tests::free_port(), 0);
/// ```
#[must_use]
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
    listener.local_addr().expect("its address").port()
}

/// A TLS connection to `127.0.0.1:port`, verifying the server as `127.0.0.1` under `ca` (PEM)
/// alone.
///
/// # Errors
///
/// If `ca` is not a PEM certificate, the connection fails, or the server's certificate does
/// not verify.
///
/// # Cancellation safety
///
/// Cancel-safe: a dropped connection is closed.
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> anyhow::Result<()> {
/// let ca = std::fs::read("ca.crt")?;
/// let tls = kopf_tests::webhook_tls(9443, &ca).await?;
/// let (_, session) = tls.get_ref();
/// assert!(session.peer_certificates().is_some());
/// # Ok(()) }
/// ```
pub async fn webhook_tls(port: u16, ca: &[u8]) -> anyhow::Result<TlsStream<TcpStream>> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca)?)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(("127.0.0.1", port)).await?;
    Ok(connector
        .connect(ServerName::try_from("127.0.0.1")?, tcp)
        .await?)
}

/// Deletes the Validating- and MutatingWebhookConfiguration `name` (an operator's, which it
/// leaves when it stops).
///
/// # Errors
///
/// The API error of either deletion (a missing one included).
///
/// # Cancellation safety
///
/// Not cancel safe: a cancelled call may have deleted only the first.
pub async fn remove_webhook_configurations(
    client: &kube::Client,
    name: &str,
) -> anyhow::Result<()> {
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    validating.delete(name, &DeleteParams::default()).await?;
    mutating.delete(name, &DeleteParams::default()).await?;
    Ok(())
}

/// Deletes the webhook configurations that admit objects of `namespace` only (those of an
/// operator serving that namespace alone, left behind by a test that failed before removing
/// them): their server is gone, and a `Fail` policy would refuse the namespace's cleanup.
pub(crate) async fn remove_webhook_configurations_of(
    client: &kube::Client,
    namespace: &str,
) -> anyhow::Result<()> {
    remove_if_only(client, namespace, |c: &ValidatingWebhookConfiguration| {
        (c.webhooks.iter().flatten())
            .map(|h| h.namespace_selector.clone())
            .collect()
    })
    .await?;
    remove_if_only(client, namespace, |c: &MutatingWebhookConfiguration| {
        (c.webhooks.iter().flatten())
            .map(|h| h.namespace_selector.clone())
            .collect()
    })
    .await
}

/// Deletes the configurations of type `K` whose webhooks all select `namespace` alone.
async fn remove_if_only<K>(
    client: &kube::Client,
    namespace: &str,
    selectors: impl Fn(&K) -> Vec<Option<LabelSelector>>,
) -> anyhow::Result<()>
where
    K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let only_this = |selector: &Option<LabelSelector>| {
        let expressions = selector.as_ref().and_then(|s| s.match_expressions.as_ref());
        expressions.is_some_and(|all| {
            all.iter().any(|e| {
                e.key == "kubernetes.io/metadata.name"
                    && e.operator == "In"
                    && e.values.as_deref() == Some(&[namespace.to_owned()])
            })
        })
    };
    let api: Api<K> = Api::all(client.clone());
    for config in api.list(&ListParams::default()).await? {
        let hooks = selectors(&config);
        if !hooks.is_empty() && hooks.iter().all(only_this) {
            let name = config.meta().name.clone().unwrap_or_default();
            api.delete(&name, &DeleteParams::default()).await?;
        }
    }
    Ok(())
}
