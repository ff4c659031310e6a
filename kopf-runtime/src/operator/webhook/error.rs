//! [`WebhookError`]: why the admission webhook server cannot start.

use std::net::SocketAddr;
use std::path::PathBuf;

/// Why the webhook server cannot start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookError {
    /// The address is not `https://host[:port]`.
    #[error("the webhook URL `{0}` is not https://host[:port] without a path")]
    Url(String),
    /// Two admission handlers have one id.
    #[error("two admission handlers are named `{0}`: give one an `id = \"...\"`")]
    DuplicateId(String),
    /// A certificate cannot be made.
    #[error("cannot make {what}: {source}")]
    Certificate {
        /// Which one.
        what: &'static str,
        /// Why.
        #[source]
        source: rcgen::Error,
    },
    /// A PEM text cannot be read.
    #[error("cannot read {what}: {message}")]
    Pem {
        /// Which one.
        what: &'static str,
        /// Why.
        message: String,
    },
    /// A certificate file cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// rustls refuses the certificate or key.
    #[error("the webhook certificate or key is unusable: {0}")]
    Tls(#[source] rustls::Error),
    /// The CA's Secret cannot be read or created.
    #[error("cannot read or create the webhook CA's Secret {secret}: {source}")]
    Secret {
        /// `namespace/name`.
        secret: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The CA's Secret holds no usable CA.
    #[error("the webhook CA's Secret {secret} is unusable: {why}")]
    BadSecret {
        /// `namespace/name`.
        secret: String,
        /// Why.
        why: String,
    },
    /// A webhook configuration cannot be applied.
    #[error("cannot apply the webhook configuration {name}: {source}")]
    Configuration {
        /// The configuration's name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// A configuration cannot be encoded.
    #[error("cannot encode a webhook configuration: {0}")]
    Encode(#[source] serde_json::Error),
    /// The server cannot listen.
    #[error("the webhook server cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}
