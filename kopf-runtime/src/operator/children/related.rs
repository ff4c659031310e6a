//! The related-objects watch of one kind: whole objects, each event mapped by the user's
//! function to owner names (namespace and name), which the callback resolves to owners.

use std::sync::Arc;

use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::cause::{ChildCause, NamedTrigger, Via};
use super::drive::Events;
use super::known::Known;
use super::progress::Progress;
use crate::operator::health::KindHealth;

/// Maps a related object (its JSON body) to the owners it concerns, by namespace and name.
pub type RelatedMap = Arc<dyn Fn(&Value) -> Vec<(Option<String>, String)> + Send + Sync>;

/// What one related-objects watch watches.
///
/// ```
/// use std::sync::Arc;
/// use kopf_runtime::__private::children::RelatedWatch;
/// use k8s_openapi::api::core::v1::Secret;
/// // Every Secret concerns the owner named in its `app` label, in its namespace.
/// let watch = RelatedWatch {
///     resource: kube::core::ApiResource::erase::<Secret>(&()),
///     namespace: None,
///     map: Arc::new(|body: &serde_json::Value| {
///         let meta = &body["metadata"];
///         match meta["labels"]["app"].as_str() {
///             Some(app) => vec![(meta["namespace"].as_str().map(Into::into), app.to_owned())],
///             None => Vec::new(),
///         }
///     }),
///     server_timeout: 290,
/// };
/// let body = serde_json::json!({"metadata": {"namespace": "ns", "labels": {"app": "a"}}});
/// assert_eq!((watch.map)(&body), vec![(Some("ns".to_owned()), "a".to_owned())]);
/// ```
#[derive(Clone)]
pub struct RelatedWatch {
    /// The related kind.
    pub resource: ApiResource,
    /// The namespace to watch (`None`: all).
    pub namespace: Option<String>,
    /// The user's map from a related object to owner names.
    pub map: RelatedMap,
    /// The `timeoutSeconds` of each watch request.
    pub server_timeout: u32,
}

impl std::fmt::Debug for RelatedWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelatedWatch")
            .field("resource", &self.resource.kind)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// An owner, by name.
type Target = (Option<String>, String);

/// Watches the related objects of one kind until `stop`, calling `trigger` for each owner name
/// the map function gives for an object that was created, changed or deleted (and, when an
/// object stops mapping to an owner, for the owner it mapped to before).
///
/// # Cancellation safety
/// Meant to run in its own task; cancelling it leaves nothing half-done.
pub async fn watch_related(
    client: kube::Client,
    watch: RelatedWatch,
    trigger: NamedTrigger,
    stop: CancellationToken,
) {
    let health = Arc::new(KindHealth::new(watch.resource.kind.clone(), 1));
    watch_related_reporting(client, watch, trigger, &health, stop).await;
}

/// [`watch_related`], reporting to `health` as a kind's watch stream does: its initial list,
/// its failures and relists, and its pulse (see `operator/health`).
pub(crate) async fn watch_related_reporting(
    client: kube::Client,
    watch: RelatedWatch,
    trigger: NamedTrigger,
    health: &Arc<KindHealth>,
    stop: CancellationToken,
) {
    let kind: Arc<str> = watch.resource.kind.as_str().into();
    let what = match &watch.namespace {
        Some(ns) => format!("the related {kind} in {ns}"),
        None => format!("the related {kind}"),
    };
    let (progress, client) = Progress::start(health, &client);
    let api: Api<DynamicObject> = match &watch.namespace {
        Some(ns) => Api::namespaced_with(client, ns, &watch.resource),
        None => Api::all_with(client, &watch.resource),
    };
    let config = watcher::Config::default().timeout(watch.server_timeout);
    let stream = watcher::watcher(api, config).default_backoff();
    let stream = std::pin::pin!(stream);
    let mut known: Known<Target> = Known::default();
    let fire = |targets: Vec<Target>, object: &DynamicObject| {
        let cause = ChildCause {
            via: Via::Related,
            kind: kind.clone(),
            namespace: object.metadata.namespace.clone(),
            name: object.metadata.name.clone().unwrap_or_default(),
        };
        for (namespace, name) in &targets {
            trigger(namespace.as_deref(), name, &cause);
        }
    };
    let mut events = Events::new(stream, progress, &what, &stop);
    while let Some(event) = events.next().await {
        match event {
            Event::Init => known.list_begins(),
            Event::InitApply(object) | Event::Apply(object) => {
                let meta = &object.metadata;
                let (Some(uid), Some(rv)) = (meta.uid.as_deref(), meta.resource_version.as_deref())
                else {
                    continue;
                };
                let targets = known.seen(uid, rv, map(&watch.map, &object, &what));
                fire(targets, &object);
            }
            Event::Delete(object) => {
                let Some(uid) = object.metadata.uid.as_deref() else {
                    continue;
                };
                let mut targets = known.deleted(uid);
                for target in map(&watch.map, &object, &what) {
                    if !targets.contains(&target) {
                        targets.push(target);
                    }
                }
                fire(targets, &object);
            }
            Event::InitDone => {
                let gone = DynamicObject::new("(gone while the watch was down)", &watch.resource);
                fire(known.list_done(), &gone);
            }
        }
    }
}

/// The owner names `object` maps to (none if its body cannot be formed).
fn map(map: &RelatedMap, object: &DynamicObject, what: &str) -> Vec<Target> {
    match serde_json::to_value(object) {
        Ok(body) => map(&body),
        Err(err) => {
            warn!(watch = %what, name = ?object.metadata.name, %err, "cannot read a related object");
            Vec::new()
        }
    }
}
