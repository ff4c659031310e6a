//! [`Webhooks`]: where the API server reaches the server, where its certificates come from,
//! whether the operator keeps the configurations, and which handlers it serves.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

/// How the API server reaches the webhook server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Address {
    /// `https://host:port`, for an operator outside the cluster (development, tests).
    Url(String),
    /// A Service in front of the operator's pods.
    Service {
        namespace: String,
        name: String,
        port: u16,
    },
}

/// Where the serving certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Certificates {
    /// Made by the operator from a CA kept in this Secret (namespace, name; `None`: the default).
    SelfSigned(Option<(String, String)>),
    /// `tls.crt`, `tls.key` and optionally `ca.crt` in this directory, reloaded when they change.
    Files(PathBuf),
}

/// The admission webhook server's settings, for
/// [`OperatorBuilder::webhooks`](crate::OperatorBuilder::webhooks) (feature `webhook`).
///
/// By default the operator makes its own certificates (a CA kept in a Secret that every replica
/// shares, and a serving certificate per replica, renewed in memory) and keeps a
/// `ValidatingWebhookConfiguration` and a `MutatingWebhookConfiguration`, named after the
/// operator, pointing at itself. The guide is `docs/webhooks.md`.
///
/// ```
/// use kopf_runtime::Webhooks;
///
/// // In the cluster: a Service `backups-webhook` in `backups` sends port 443 to the pods' 9443.
/// let in_cluster = Webhooks::service("backups", "backups-webhook");
/// // On a developer's machine, with the API server able to reach it:
/// let local = Webhooks::url("https://127.0.0.1:9443");
/// // Certificates from cert-manager, the configurations applied by you:
/// let managed = Webhooks::service("backups", "backups-webhook")
///     .certificates_from("/var/run/webhook-certs")
///     .configuration_managed_by_you();
/// # drop((in_cluster, local, managed));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Webhooks {
    pub(super) address: Address,
    pub(super) listen: SocketAddr,
    pub(super) certificates: Certificates,
    pub(super) manage_configuration: bool,
    /// Only these handlers (ids), when given.
    only: Option<Vec<String>>,
}

/// The port the server listens on by default.
const DEFAULT_PORT: u16 = 9443;

impl Webhooks {
    /// The API server reaches the operator through the Service `name` in `namespace`, port 443
    /// (to the pods' port 9443, where the server listens).
    #[must_use]
    pub fn service(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            address: Address::Service {
                namespace: namespace.into(),
                name: name.into(),
                port: 443,
            },
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), DEFAULT_PORT),
            certificates: Certificates::SelfSigned(None),
            manage_configuration: true,
            only: None,
        }
    }

    /// The API server reaches the operator at `url` (`https://host:port`, no path): for an
    /// operator run outside the cluster. The server listens on the URL's port.
    #[must_use]
    pub fn url(url: impl Into<String>) -> Self {
        let url = url.into();
        let port = url_host_port(&url).map_or(DEFAULT_PORT, |(_, port)| port);
        Self {
            address: Address::Url(url),
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port),
            certificates: Certificates::SelfSigned(None),
            manage_configuration: true,
            only: None,
        }
    }

    /// The Service's port, when it is not 443.
    #[must_use]
    pub fn service_port(mut self, port: u16) -> Self {
        if let Address::Service { port: p, .. } = &mut self.address {
            *p = port;
        }
        self
    }

    /// Where the server listens (default: every address, port 9443, or the URL's port).
    #[must_use]
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = addr;
        self
    }

    /// Keeps the self-signed CA in the Secret `name` in `namespace` (default: in the Service's
    /// namespace, else `POD_NAMESPACE`, else `default`; named `<operator>-webhook-ca`).
    #[must_use]
    pub fn ca_secret(mut self, namespace: impl Into<String>, name: impl Into<String>) -> Self {
        self.certificates = Certificates::SelfSigned(Some((namespace.into(), name.into())));
        self
    }

    /// Serves the certificate and key in `dir` (`tls.crt`, `tls.key`, as a mounted
    /// `kubernetes.io/tls` Secret has them, e.g. from cert-manager), reloaded within 10 s when
    /// they change; the `caBundle` is `ca.crt` there, else the chain's last certificate.
    #[must_use]
    pub fn certificates_from(mut self, dir: impl Into<PathBuf>) -> Self {
        self.certificates = Certificates::Files(dir.into());
        self
    }

    /// The operator leaves the webhook configurations alone: you apply them (with the
    /// `caBundle`, or cert-manager's CA injector), with one webhook per handler, named
    /// `<id>.<operator>.kopf.dev`, at the path `/validate/<id>` or `/mutate/<id>`.
    #[must_use]
    pub fn configuration_managed_by_you(mut self) -> Self {
        self.manage_configuration = false;
        self
    }

    /// Serves only the admission handlers with these ids (default: every `#[validate]` and
    /// `#[mutate]` of the binary).
    #[must_use]
    pub fn handlers<S: Into<String>>(mut self, ids: impl IntoIterator<Item = S>) -> Self {
        self.only = Some(ids.into_iter().map(Into::into).collect());
        self
    }

    /// The ids [`handlers`](Self::handlers) selected, if it was called.
    pub(crate) fn selected(&self) -> Option<&[String]> {
        self.only.as_deref()
    }

    /// The names the serving certificate is for: the URL's host, or the Service's DNS names.
    pub(super) fn serving_names(&self) -> Vec<String> {
        match &self.address {
            Address::Url(url) => url_host_port(url)
                .map(|(host, _)| vec![host])
                .unwrap_or_default(),
            Address::Service {
                namespace, name, ..
            } => vec![
                format!("{name}.{namespace}.svc"),
                format!("{name}.{namespace}.svc.cluster.local"),
                format!("{name}.{namespace}"),
                name.clone(),
            ],
        }
    }

    pub(super) fn ca_secret_of(&self, operator: &str) -> (String, String) {
        if let Certificates::SelfSigned(Some(secret)) = &self.certificates {
            return secret.clone();
        }
        let namespace = match &self.address {
            Address::Service { namespace, .. } => namespace.clone(),
            Address::Url(_) => {
                std::env::var("POD_NAMESPACE").unwrap_or_else(|_| "default".to_owned())
            }
        };
        (namespace, format!("{operator}-webhook-ca"))
    }
}

/// `(host, port)` of `https://host[:port][/]`.
pub(super) fn url_host_port(url: &str) -> Option<(String, u16)> {
    let rest = url.strip_prefix("https://")?.trim_end_matches('/');
    if rest.contains('/') {
        return None;
    }
    match rest.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(']') || host.starts_with('[') => {
            let port = port.parse().ok()?;
            Some((host.trim_matches(['[', ']']).to_owned(), port))
        }
        _ => Some((rest.trim_matches(['[', ']']).to_owned(), 443)),
    }
}
