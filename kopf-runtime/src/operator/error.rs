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
    /// The signal handlers cannot be installed.
    #[error("cannot listen for SIGINT/SIGTERM")]
    Signal(#[source] std::io::Error),
}
