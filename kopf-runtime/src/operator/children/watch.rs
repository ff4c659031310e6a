//! The child watch of one kind: metadata only, each event mapped to the owner UIDs in the
//! child's `ownerReferences` (those of the owner kinds), the operator's own writes left out.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio_util::sync::CancellationToken;

use super::cause::{ChildCause, OwnerTrigger, Via};
use super::drive::Events;
use super::known::Known;
use super::progress::Progress;
use crate::handler::echoes::{ChildKey, Echoes};
use crate::operator::health::KindHealth;

/// A kind that owns children: its API group (empty for the core group) and kind.
///
/// ```
/// use kopf_runtime::__private::children::OwnerKind;
/// let apps = OwnerKind { group: "example.com".into(), kind: "App".into() };
/// assert!(apps.matches("example.com/v1", "App"));
/// assert!(apps.matches("example.com/v2beta1", "App"));
/// assert!(!apps.matches("v1", "App"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerKind {
    /// The API group (empty: the core group).
    pub group: String,
    /// The kind.
    pub kind: String,
}

impl OwnerKind {
    /// Whether an owner reference's `apiVersion` and `kind` name this kind (at any version).
    #[must_use]
    pub fn matches(&self, api_version: &str, kind: &str) -> bool {
        let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
        group == self.group && kind == self.kind
    }
}

/// What one child watch watches.
///
/// ```
/// use kopf_runtime::__private::children::{ChildWatch, OwnerKind};
/// use k8s_openapi::api::core::v1::ConfigMap;
/// let watch = ChildWatch {
///     resource: kube::core::ApiResource::erase::<ConfigMap>(&()),
///     namespace: Some("ns".into()),
///     owners: vec![OwnerKind { group: "example.com".into(), kind: "App".into() }],
///     server_timeout: 290,
/// };
/// assert_eq!(watch.resource.kind, "ConfigMap");
/// ```
#[derive(Debug, Clone)]
pub struct ChildWatch {
    /// The children's kind.
    pub resource: ApiResource,
    /// The namespace to watch (`None`: all).
    pub namespace: Option<String>,
    /// The owner kinds whose children count; references to other kinds are ignored.
    pub owners: Vec<OwnerKind>,
    /// The `timeoutSeconds` of each watch request (the operator's client bounds a watch's
    /// silence by it).
    pub server_timeout: u32,
}

/// Watches the children of one kind until `stop`, calling `trigger` for each owner of a child
/// that was created, changed or deleted by someone other than the operator (see the module's
/// header of `operator/children`).
///
/// # Cancellation safety
/// Meant to run in its own task; cancelling it (through `stop` or by dropping) leaves nothing
/// half-done (an echo check waiting for an apply in flight finishes on its own, bounded).
pub async fn watch_children(
    client: kube::Client,
    watch: ChildWatch,
    echoes: Arc<Echoes>,
    trigger: OwnerTrigger,
    stop: CancellationToken,
) {
    let health = Arc::new(KindHealth::new(watch.resource.kind.clone(), 1));
    watch_children_reporting(client, watch, echoes, trigger, &health, stop).await;
}

/// [`watch_children`], reporting to `health` as a kind's watch stream does: its initial list,
/// its failures and relists, and its pulse (see `operator/health`).
pub(crate) async fn watch_children_reporting(
    client: kube::Client,
    watch: ChildWatch,
    echoes: Arc<Echoes>,
    trigger: OwnerTrigger,
    health: &Arc<KindHealth>,
    stop: CancellationToken,
) {
    let what = match &watch.namespace {
        Some(ns) => format!("the children {} in {ns}", watch.resource.kind),
        None => format!("the children {}", watch.resource.kind),
    };
    let (progress, client) = Progress::start(health, &client);
    // Metadata only: `PartialObjectMeta` requests ask the server for the metadata alone.
    let api: Api<PartialObjectMeta<DynamicObject>> = match &watch.namespace {
        Some(ns) => Api::namespaced_with(client, ns, &watch.resource),
        None => Api::all_with(client, &watch.resource),
    };
    let config = watcher::Config::default().timeout(watch.server_timeout);
    let stream = watcher::watcher(api, config).default_backoff();
    let stream = std::pin::pin!(stream);
    let children = Children {
        kind: watch.resource.kind.as_str().into(),
        group: watch.resource.group.clone(),
        owners: watch.owners,
        echoes,
        trigger,
    };
    let mut known = Known::default();
    let mut events = Events::new(stream, progress, &what, &stop);
    while let Some(event) = events.next().await {
        match event {
            Event::Init => known.list_begins(),
            Event::InitApply(child) | Event::Apply(child) => {
                children.seen(&mut known, &child.metadata).await;
            }
            Event::Delete(child) => {
                let meta = &child.metadata;
                let Some(uid) = meta.uid.as_deref() else {
                    continue;
                };
                children.echoes.forget(&children.key(meta));
                children.fire(&known.deleted(uid), meta);
            }
            Event::InitDone => {
                // Vanished while the watch was down: their owners hear of it by the kind only.
                let cause = children.cause(None, "(gone while the watch was down)");
                for owner in known.list_done() {
                    (children.trigger)(&owner, &cause);
                }
            }
        }
    }
}

/// One child watch's fixed parts.
struct Children {
    kind: Arc<str>,
    group: String,
    owners: Vec<OwnerKind>,
    echoes: Arc<Echoes>,
    trigger: OwnerTrigger,
}

impl Children {
    /// A version of a child: triggers its owners, unless it is the operator's own write.
    async fn seen(&self, known: &mut Known<Arc<str>>, meta: &ObjectMeta) {
        let (Some(uid), Some(rv)) = (meta.uid.as_deref(), meta.resource_version.as_deref()) else {
            return;
        };
        let owners = self.owner_uids(meta);
        let targets = known.seen(uid, rv, owners);
        if targets.is_empty() {
            return;
        }
        let key = self.key(meta);
        if !self.echoes.pending(&key) {
            if !self.echoes.is_echo(&key, rv).await {
                self.fire(&targets, meta);
            }
            return;
        }
        // An apply of this child is in flight: its answer decides (bounded), off the loop.
        let (echoes, rv, cause) = (self.echoes.clone(), rv.to_owned(), self.cause_of(meta));
        let trigger = self.trigger.clone();
        tokio::spawn(async move {
            if !echoes.is_echo(&key, &rv).await {
                for owner in &targets {
                    trigger(owner, &cause);
                }
            }
        });
    }

    fn fire(&self, owners: &[Arc<str>], meta: &ObjectMeta) {
        if owners.is_empty() {
            return;
        }
        let cause = self.cause_of(meta);
        for owner in owners {
            (self.trigger)(owner, &cause);
        }
    }

    /// The UIDs of the child's owners of the owner kinds.
    fn owner_uids(&self, meta: &ObjectMeta) -> Vec<Arc<str>> {
        let refs = meta.owner_references.iter().flatten();
        refs.filter(|r| {
            self.owners
                .iter()
                .any(|k| k.matches(&r.api_version, &r.kind))
        })
        .map(|r| r.uid.as_str().into())
        .collect()
    }

    fn key(&self, meta: &ObjectMeta) -> ChildKey {
        ChildKey {
            group: self.group.clone(),
            kind: self.kind.to_string(),
            namespace: meta.namespace.clone(),
            name: meta.name.clone().unwrap_or_default(),
        }
    }

    fn cause_of(&self, meta: &ObjectMeta) -> ChildCause {
        self.cause(
            meta.namespace.clone(),
            meta.name.as_deref().unwrap_or_default(),
        )
    }

    fn cause(&self, namespace: Option<String>, name: &str) -> ChildCause {
        ChildCause {
            via: Via::Child,
            kind: self.kind.clone(),
            namespace,
            name: name.to_owned(),
        }
    }
}
