//! The admission webhook server: every `#[validate]` and `#[mutate]` handler served over TLS,
//! with the certificates and the webhook configurations the operator keeps itself (or yours).
//!
//! ```text
//!  Webhooks (the builder's) ──► certificates: a CA shared in a Secret ─► a serving cert each
//!       │                                  or files (reloaded)           replica (renewed)
//!       ├──► configurations (caBundle, rules, paths) ──► server-side apply (unless yours)
//!       └──► the server (TLS, limits) ──► review ──► handler ──► verdict ──► AdmissionReview
//! ```
//!
//! Every replica serves (standbys and sharding members too): reviews are stateless, so a
//! rollout or a crash never leaves admission without a server while one replica runs. Every
//! replica reads (or first makes) the CA's Secret with the client the fence does not hold back;
//! under leader election only the leader applies the configurations, each time it comes to
//! lead (through the fenced client), so replicas of two versions never take turns rewriting them.

mod certs;
mod config;
mod error;
mod review;
mod server;
mod settings;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::handler::admission::WebhookRegistration;
use crate::operator::ha::report::Role;
use certs::Authority;
pub use error::WebhookError;
use server::CurrentTls;
pub(crate) use server::Drain;
pub use settings::Webhooks;
use settings::{Address, Certificates, url_host_port};

/// What the operator knows when it starts the server.
pub(crate) struct Context<'a> {
    /// The operator's client: under leader election, it writes only while this replica leads.
    pub(crate) client: kube::Client,
    /// A client the fence does not hold back, for the CA's Secret (every replica needs it).
    pub(crate) unfenced: kube::Client,
    /// This replica's role, under leader election: the configurations are then the leader's.
    pub(crate) roles: Option<watch::Receiver<Role>>,
    pub(crate) operator: &'a str,
    pub(crate) field_manager: &'a str,
    pub(crate) namespaces: &'a [String],
}

/// The handlers by path; two of one id are an error.
fn by_path(
    handlers: &[WebhookRegistration],
) -> Result<HashMap<String, WebhookRegistration>, WebhookError> {
    let mut paths = HashMap::new();
    for handler in handlers {
        let name = config::webhook_name(handler.id(), "");
        let clash = paths
            .values()
            .any(|known: &WebhookRegistration| config::webhook_name(known.id(), "") == name);
        if clash {
            return Err(WebhookError::DuplicateId(handler.id().to_owned()));
        }
        paths.insert(handler.path(), *handler);
    }
    Ok(paths)
}

/// Starts the server (and keeps its certificate current) until `stop`; applies the
/// configurations unless they are the user's. Returns the bound address and what waits for the
/// open connections once `stop` is cancelled.
///
/// # Cancellation safety
/// Not cancel safe: a dropped future may leave the server listening until `stop`.
pub(crate) async fn start(
    settings: &Webhooks,
    handlers: &[WebhookRegistration],
    context: Context<'_>,
    stop: &CancellationToken,
) -> Result<(SocketAddr, Drain), WebhookError> {
    if let Address::Url(url) = &settings.address {
        url_host_port(url).ok_or_else(|| WebhookError::Url(url.clone()))?;
    }
    let paths = Arc::new(by_path(handlers)?);
    let (tls, ca_bundle) = match &settings.certificates {
        Certificates::SelfSigned(_) => {
            let secret = settings.ca_secret_of(context.operator);
            let ca = Authority::shared(
                context.unfenced.clone(),
                (&secret.0, &secret.1),
                context.operator,
            )
            .await?;
            let names = settings.serving_names();
            let tls = CurrentTls::new(ca.serve(&names)?);
            let bundle = ca.ca_pem.clone();
            tokio::spawn(renew(ca, names, tls.clone(), stop.clone()));
            (tls, bundle)
        }
        Certificates::Files(dir) => {
            let (config, bundle) = certs::from_files(dir)?;
            let tls = CurrentTls::new(config);
            tokio::spawn(reload(dir.clone(), tls.clone(), stop.clone()));
            (tls, bundle)
        }
    };
    let app = review::router(paths);
    let addr = settings.listen;
    let (bound, drain) = (server::serve(addr, app, tls, stop.clone()).await)
        .map_err(|source| WebhookError::Listen { addr, source })?;
    if settings.manage_configuration {
        let common = config::Common {
            name: context.operator,
            address: &settings.address,
            ca_bundle: &ca_bundle,
            namespaces: context.namespaces,
        };
        let configurations = config::configurations(&common, handlers);
        let manager = context.field_manager.to_owned();
        match context.roles {
            None => config::apply(context.unfenced, &manager, &configurations).await?,
            Some(roles) => {
                let leading = apply_when_leading(roles, context.client, manager, configurations);
                let stop = stop.clone();
                tokio::spawn(async move { stop.run_until_cancelled(leading).await });
            }
        }
    }
    tracing::info!(addr = %bound, handlers = handlers.len(), "the webhook server has started");
    Ok((bound, drain))
}

/// How long a leader waits before it applies the configurations again after a failure.
const APPLY_RETRY: Duration = Duration::from_secs(5);

/// Under leader election: applies the configurations each time this replica comes to lead (a
/// failure is logged and tried again while it leads), until the role stops changing.
///
/// # Cancellation safety
/// Cancel safe: an apply cut short is made again by the next leader.
async fn apply_when_leading(
    mut roles: watch::Receiver<Role>,
    client: kube::Client,
    manager: String,
    configurations: config::Configurations,
) {
    loop {
        if roles.wait_for(|role| *role == Role::Leader).await.is_err() {
            return;
        }
        loop {
            match config::apply(client.clone(), &manager, &configurations).await {
                Ok(()) => break,
                Err(err) => {
                    tracing::error!(error = %err, "cannot apply the webhook configurations; trying again")
                }
            }
            let standing_by = roles.wait_for(|role| *role != Role::Leader);
            if tokio::time::timeout(APPLY_RETRY, standing_by).await.is_ok() {
                break;
            }
        }
        if roles.wait_for(|role| *role != Role::Leader).await.is_err() {
            return;
        }
    }
}

/// Issues a new serving certificate from the CA every [`certs::SERVING_RENEWAL`].
async fn renew(ca: Authority, names: Vec<String>, tls: CurrentTls, stop: CancellationToken) {
    loop {
        let wait = tokio::time::sleep(certs::SERVING_RENEWAL);
        if stop.run_until_cancelled(wait).await.is_none() {
            return;
        }
        match ca.serve(&names) {
            Ok(config) => {
                tls.replace(config);
                tracing::info!("the webhook server's certificate was renewed");
            }
            Err(e) => tracing::error!(error = %e, "cannot renew the webhook server's certificate"),
        }
    }
}

/// How often the certificate files are checked for a change.
const FILES_POLL: Duration = Duration::from_secs(10);

/// Reloads the certificate files when they change (a broken change keeps the last good ones).
async fn reload(dir: PathBuf, tls: CurrentTls, stop: CancellationToken) {
    let stamp = |dir: &PathBuf| {
        ["tls.crt", "tls.key"].map(|f| {
            std::fs::metadata(dir.join(f))
                .and_then(|m| m.modified())
                .ok()
        })
    };
    let mut seen = stamp(&dir);
    loop {
        let wait = tokio::time::sleep(FILES_POLL);
        if stop.run_until_cancelled(wait).await.is_none() {
            return;
        }
        let now = stamp(&dir);
        if now == seen {
            continue;
        }
        seen = now;
        match certs::from_files(&dir) {
            Ok((config, _)) => {
                tls.replace(config);
                tracing::info!(dir = %dir.display(), "the webhook server's certificate was reloaded");
            }
            Err(e) => {
                tracing::error!(error = %e, "the changed webhook certificate files are unusable; still serving the last good ones")
            }
        }
    }
}

#[cfg(test)]
mod tests;
