//! The watches that wake reconcile handlers from outside their own kind: one metadata-only
//! watch per kind that some reconcile handler owns (its children), and one watch per kind a
//! handler watches with a map (its related objects). Started with the kinds, stopped with
//! their watches (`watch_stop`).
//!
//! ```text
//!  a child changed ──watch_children──▶ owner UID ──▶ Supervisor::trigger(uid, Child)
//!                                                    on every kind owning that child kind
//!  a related object changed ──watch_related──▶ map ──▶ (namespace, name)
//!        ──▶ Supervisor::uid_of ──▶ Supervisor::trigger(uid, Related) on the watching kind
//! ```
//!
//! A trigger for an object the supervisor does not track (another member's shard, a filtered
//! out object, a paused replica's) is a no-op there: each replica wakes only what it serves,
//! while every member of a sharded group watches all the children (see `operator/children`).

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::task::AbortHandle;

use super::Shared;
use crate::core::erased::ErasedHandler;
use crate::core::reconcile::kinds::{Related, Trigger};
use crate::core::resource::ResourceInfo;
use crate::core::supervisor::Supervisor;
use crate::handler::Echoes;
use crate::operator::children::{
    ChildCause, ChildWatch, NamedTrigger, OwnerKind, OwnerTrigger, RelatedMap, RelatedWatch,
    watch_children, watch_related,
};
use crate::operator::write::api_resource;

/// One served kind as the relations see it: what it is, its supervisor, its handlers.
pub(crate) struct Served<'a> {
    pub(crate) info: &'a ResourceInfo,
    pub(crate) supervisor: Supervisor,
    pub(crate) handlers: &'a [Arc<dyn ErasedHandler>],
}

/// Starts the children's and related objects' watches of every served kind's reconcile
/// handlers; `server_timeout` bounds each watch request. Returns their tasks.
pub(crate) fn launch(
    shared: &Shared,
    served: &[Served<'_>],
    echoes: &Arc<Echoes>,
    server_timeout: u32,
) -> Vec<AbortHandle> {
    let mut tasks = Vec::new();
    for (child, owners) in owned_kinds(served) {
        let kinds = owners.iter().map(|s| owner_kind(s.0)).collect();
        let supervisors: Vec<Supervisor> = owners.into_iter().map(|s| s.1).collect();
        let trigger: OwnerTrigger = Arc::new(move |uid: &str, _cause: &ChildCause| {
            for supervisor in &supervisors {
                supervisor.trigger(uid, Trigger::Child);
            }
        });
        for namespace in namespaces(shared, &child) {
            let watch = ChildWatch {
                resource: api_resource(&child),
                namespace,
                owners: Vec::clone(&kinds),
                server_timeout,
            };
            let task = watch_children(
                shared.client.clone(),
                watch,
                echoes.clone(),
                trigger.clone(),
                shared.watch_stop.clone(),
            );
            tasks.push(tokio::spawn(task).abort_handle());
        }
    }
    for kind in served {
        for related in kind
            .handlers
            .iter()
            .flat_map(|h| h.spec().reconcile.watches)
        {
            tasks.extend(launch_related(shared, kind, related, server_timeout));
        }
    }
    tasks
}

/// Each kind some reconcile handler owns, with the owner kinds (and their supervisors).
fn owned_kinds<'a>(
    served: &[Served<'a>],
) -> BTreeMap<ResourceInfo, Vec<(&'a ResourceInfo, Supervisor)>> {
    let mut owned: BTreeMap<ResourceInfo, Vec<(&ResourceInfo, Supervisor)>> = BTreeMap::new();
    for kind in served {
        for owns in kind.handlers.iter().flat_map(|h| h.spec().reconcile.owns) {
            let owners = owned.entry(owns()).or_default();
            if !owners.iter().any(|(info, _)| *info == kind.info) {
                owners.push((kind.info, kind.supervisor.clone()));
            }
        }
    }
    owned
}

/// The related objects' watches of one handler's `watches(..)` entry.
fn launch_related(
    shared: &Shared,
    kind: &Served<'_>,
    related: &Related,
    server_timeout: u32,
) -> Vec<AbortHandle> {
    let map = related.map;
    let map: RelatedMap = Arc::new(move |body| {
        map(body)
            .into_iter()
            .map(|target| (target.namespace, target.name))
            .collect()
    });
    let supervisor = kind.supervisor.clone();
    let trigger: NamedTrigger = Arc::new(move |namespace, name, _cause| {
        if let Some(uid) = supervisor.uid_of(namespace, name) {
            supervisor.trigger(&uid, Trigger::Related);
        }
    });
    let info = (related.kind)();
    namespaces(shared, &info)
        .into_iter()
        .map(|namespace| {
            let watch = RelatedWatch {
                resource: api_resource(&info),
                namespace,
                map: map.clone(),
                server_timeout,
            };
            let task = watch_related(
                shared.client.clone(),
                watch,
                trigger.clone(),
                shared.watch_stop.clone(),
            );
            tokio::spawn(task).abort_handle()
        })
        .collect()
}

/// The namespaces to watch a kind in: each selected one for a namespaced kind, else all.
fn namespaces(shared: &Shared, info: &ResourceInfo) -> Vec<Option<String>> {
    let selected = &shared.selection.namespaces;
    if info.namespaced && !selected.is_empty() {
        selected.iter().cloned().map(Some).collect()
    } else {
        vec![None]
    }
}

/// An owner kind as the children's owner references name it.
fn owner_kind(info: &ResourceInfo) -> OwnerKind {
    OwnerKind {
        group: info.group.to_string(),
        kind: info.kind.to_string(),
    }
}
