//! The kube-rs arm of scenario 10 (`children`): a kube-rs `Controller` over the benchmark's
//! `KopfExample` parents that `.owns(..)` their ConfigMap, Secret and Service, written the way a
//! careful kube-rs user writes it, kube-rs's defaults otherwise.
//!
//! ```text
//!   watcher(KopfExample) ─────────┐
//!   metadata_watcher(ConfigMap) ──┤  owner                  ┌─ SSA ConfigMap <parent>-config
//!   metadata_watcher(Secret) ─────┼─────► reconcile(parent) ─┼─ SSA Secret    <parent>-secret
//!   metadata_watcher(Service) ────┘  references             └─ SSA Service   <parent>-svc
//!                        Ok → requeue in 300 s; Err → error_policy: backoff
//! ```
//!
//! - `reconcile` server-side applies the three children of `kopf_bench::children` (the same
//!   objects as every arm), each with the parent's controller owner reference, the field manager
//!   `bench-kube-controller` and `force`, one after the other, and asks to be requeued in 300 s.
//! - `error_policy` backs off per parent: 1 s after the first failure, doubling up to 5 min,
//!   reset by the next success (the count is kept in the context).
//! - Watches: the parents and each child kind in the benchmark's namespace, default watcher
//!   configuration; no debounce, unbounded concurrency (the `Controller`'s defaults); the
//!   client is kube-rs's default (no client-side rate limit).
//! - Logs with the same subscriber as the kopf-rs arm (human lines, INFO; a success at DEBUG, a
//!   failure at WARN) and shuts down gracefully on SIGTERM (`Controller::shutdown_on_signal`).
//!   It prints no readiness line (the harness reads readiness from the audit log): kube-rs 5's
//!   `Store::wait_until_ready` wakes only the last of several waiters, and a second waiter here
//!   held the `Controller`'s own runner back (no reconcile at all).
//!
//! Usage: `bench-kube-controller` (with `KUBECONFIG`). No fire log: the harness observes the
//! children through its own watch.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kopf_bench::children;
use kopf_bench::kubeutil::client;
use kopf_bench::names::NAMESPACE;
use kopf_examples::crd::KopfExample;
use kopf_runtime::{LogFormat, init_logging};
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt as _};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::{debug, warn};

/// The field manager of every child write.
const FIELD_MANAGER: &str = "bench-kube-controller";
/// The requeue interval after a successful reconcile.
const REQUEUE: Duration = Duration::from_secs(300);
/// The first error backoff, doubled per consecutive failure up to [`BACKOFF_MAX`].
const BACKOFF: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(300);

/// What a reconcile can fail with.
#[derive(Debug, thiserror::Error)]
enum Error {
    /// The parent has no namespace or UID (cannot own children).
    #[error("the parent {0} has no namespace or UID")]
    Unowned(String),
    /// A child's server-side apply failed.
    #[error("applying {kind} {name}: {source}")]
    Apply {
        kind: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// What reconciles share: the client and the consecutive failures per parent.
struct Context {
    client: Client,
    failures: Mutex<HashMap<ObjectRef<KopfExample>, u32>>,
}

/// Server-side applies `child` with the parent's owner reference.
async fn apply<C>(
    client: &Client,
    owner: &k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
    mut child: C,
) -> Result<(), Error>
where
    C: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Serialize
        + DeserializeOwned
        + Clone
        + std::fmt::Debug,
{
    child.meta_mut().owner_references = Some(vec![owner.clone()]);
    let name = child.name_any();
    let api: Api<C> = Api::namespaced(client.clone(), NAMESPACE);
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    api.patch(&name, &pp, &Patch::Apply(&child))
        .await
        .map_err(|source| Error::Apply {
            kind: C::kind(&()).into_owned(),
            name,
            source,
        })?;
    Ok(())
}

/// Applies the parent's three children; requeues in 300 s.
async fn reconcile(parent: Arc<KopfExample>, ctx: Arc<Context>) -> Result<Action, Error> {
    let name = parent.name_any();
    let owner = parent
        .controller_owner_ref(&())
        .filter(|_| parent.namespace().is_some())
        .ok_or_else(|| Error::Unowned(name.clone()))?;
    let field = parent.spec.field.as_deref().unwrap_or_default();
    apply(&ctx.client, &owner, children::config_map(&name, field)).await?;
    apply(&ctx.client, &owner, children::secret(&name)).await?;
    apply(&ctx.client, &owner, children::service(&name)).await?;
    ctx.failures
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(&ObjectRef::from_obj(&*parent));
    Ok(Action::requeue(REQUEUE))
}

/// The backoff after `failures` consecutive failures: 1 s, 2 s, 4 s, … up to 5 min.
fn backoff(failures: u32) -> Duration {
    BACKOFF
        .saturating_mul(2u32.saturating_pow(failures.saturating_sub(1)))
        .min(BACKOFF_MAX)
}

// The signature `Controller::run` asks for.
#[allow(clippy::needless_pass_by_value)]
fn error_policy(parent: Arc<KopfExample>, error: &Error, ctx: Arc<Context>) -> Action {
    let failures = {
        let mut map = ctx.failures.lock().unwrap_or_else(PoisonError::into_inner);
        let count = map.entry(ObjectRef::from_obj(&*parent)).or_default();
        *count = count.saturating_add(1);
        *count
    };
    let delay = backoff(failures);
    warn!(parent = %parent.name_any(), failures, ?delay, "reconcile failed: {error}");
    Action::requeue(delay)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    init_logging(LogFormat::Human)?;
    let client = client(None).await?;
    let parents: Api<KopfExample> = Api::namespaced(client.clone(), NAMESPACE);
    let controller = Controller::new(parents, watcher::Config::default())
        .owns(
            Api::<ConfigMap>::namespaced(client.clone(), NAMESPACE),
            watcher::Config::default(),
        )
        .owns(
            Api::<Secret>::namespaced(client.clone(), NAMESPACE),
            watcher::Config::default(),
        )
        .owns(
            Api::<Service>::namespaced(client.clone(), NAMESPACE),
            watcher::Config::default(),
        )
        .shutdown_on_signal();
    let ctx = Arc::new(Context {
        client,
        failures: Mutex::new(HashMap::new()),
    });
    controller
        .run(reconcile, error_policy, ctx)
        .for_each(|res| async move {
            match res {
                Ok((obj, _)) => debug!(parent = %obj.name, "reconciled"),
                Err(e) => warn!("controller: {e}"),
            }
        })
        .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_up_to_five_minutes() {
        let got: Vec<u64> = [1, 2, 3, 9, 10, 40]
            .into_iter()
            .map(|f| backoff(f).as_secs())
            .collect();
        assert_eq!(got, [1, 2, 4, 256, 300, 300]);
    }
}
