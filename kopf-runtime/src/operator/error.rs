//! The operator's error type.

use std::net::SocketAddr;

/// Why the operator could not start or run.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use kopf_runtime::{Operator, OperatorError};
/// let refused = Operator::builder().max_requests_per_second(0).start().await;
/// assert!(matches!(refused, Err(OperatorError::InvalidOption { option: "max_requests_per_second", .. })));
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OperatorError {
    /// No kubeconfig and no in-cluster configuration could be found or used.
    #[error("cannot find the Kubernetes client configuration (kubeconfig or in-cluster)")]
    Config(#[source] kube::config::InferConfigError),
    /// The Kubernetes client could not be built from its configuration.
    #[error("cannot build the Kubernetes client")]
    Client(#[source] kube::Error),
    /// The registered handlers are inconsistent (e.g. duplicate ids).
    #[error("the handler registry is invalid")]
    Registry(#[source] crate::handler::RegistryError),
    /// There is nothing to run.
    #[error("no handlers are registered (or none is left after selecting)")]
    NoHandlers,
    /// An option has a value that cannot work.
    #[error("invalid operator option `{option}`: {reason}")]
    InvalidOption {
        /// The builder method.
        option: &'static str,
        /// Why the value is rejected.
        reason: String,
    },
    /// The health probe server cannot listen on its address.
    #[error("cannot serve health probes on {addr}")]
    Health {
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The API server's URL is `https://`, but the binary was built without a TLS stack for
    /// kube: kopf-runtime does not pick one for you. Enable one in the binary's `Cargo.toml`,
    /// e.g. `kube = { version = "5", features = ["rustls-tls", "ring"] }` (or `aws-lc-rs`
    /// instead of `ring`, or `openssl-tls`). See the quick start.
    #[error(
        "the API server {cluster_url} needs TLS, but the binary has no TLS stack for kube: \
         enable kube's `rustls-tls` (with `ring` or `aws-lc-rs`) or `openssl-tls` feature"
    )]
    NoTlsStack {
        /// The API server's URL from the configuration.
        cluster_url: String,
    },
    /// The client configuration turns off TLS verification of the API server (for example
    /// `insecure-skip-tls-verify: true` in the kubeconfig). kopf-rs never talks to an API server
    /// it has not verified: give the cluster's CA (`certificate-authority-data`) instead.
    #[error(
        "the Kubernetes client configuration for {cluster_url} disables TLS verification \
         (insecure-skip-tls-verify); refusing to start: configure the cluster's CA instead"
    )]
    InsecureTls {
        /// The API server's URL from the configuration.
        cluster_url: String,
    },
    /// The API server's URL is plain `http://` on a host that is not the loopback, so the
    /// credentials (the service account's token) and every object would cross the network in
    /// clear, from and to a server nobody verified. Use `https://`; plain HTTP is accepted only
    /// for `127.0.0.0/8`, `::1` and `localhost` (e.g. `kubectl proxy`).
    ///
    /// Checked for a configuration the operator uses (from the environment or
    /// [`OperatorBuilder::kube_config`](crate::OperatorBuilder::kube_config)); a ready-made
    /// `kube::Client` given to [`OperatorBuilder::client`](crate::OperatorBuilder::client) does
    /// not expose its URL and cannot be checked.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kopf_runtime::*;
    /// # use kopf_runtime::engine::*;
    /// # struct Mine;
    /// # static SPEC: HandlerSpec = HandlerSpec::new("mine", HandlerKind::Daemon);
    /// # impl ErasedHandler for Mine {
    /// #     fn spec(&self) -> &'static HandlerSpec { &SPEC }
    /// #     fn matches(&self, _: &ObjectState) -> Result<bool, MatchError> { Ok(true) }
    /// #     fn invoke(&self, _: Invocation) -> Result<Call, HandlerError> { Err(HandlerError::permanent("demo")) }
    /// # }
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let cm = ResourceInfo::new("", "v1", "ConfigMap", "configmaps", true);
    /// let config = kube::Config::new("http://10.1.2.3:8080".parse().expect("a URL"));
    /// let refused = Operator::builder().handler(cm, Arc::new(Mine)).kube_config(config).start().await;
    /// assert!(matches!(refused, Err(OperatorError::PlainHttp { .. })));
    /// # }
    /// ```
    #[error(
        "the Kubernetes API server URL {cluster_url} is plain HTTP to a host that is not the \
         loopback; refusing to send credentials in clear: use https:// (plain HTTP is accepted \
         only for 127.0.0.0/8, ::1 and localhost)"
    )]
    PlainHttp {
        /// The API server's URL from the configuration.
        cluster_url: String,
    },
    /// The admission webhook server cannot start: its certificates, its configurations or its
    /// port.
    #[cfg(feature = "webhook")]
    #[error("cannot start the admission webhook server")]
    Webhook(#[source] super::webhook::WebhookError),
    /// The signal handlers cannot be installed.
    #[error("cannot listen for SIGINT/SIGTERM")]
    Signal(#[source] std::io::Error),
}
