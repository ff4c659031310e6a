//! The watches that wake reconcile handlers from outside their own kind: one metadata-only
//! watch per kind that some reconcile handler owns (its children), and one watch per kind a
//! handler watches with a map (its related objects); and one watch per indexed kind, which
//! feeds its indexes. Started with the kinds, stopped with their watches (`watch_stop`).
//!
//! ```text
//!  a child changed ──watch_children──▶ owner UID ──▶ Supervisor::trigger(uid, Child)
//!                                                    on every kind owning that child kind
//!  a related object changed ──watch_related──▶ map ──▶ (namespace, name)
//!        ──▶ Supervisor::uid_of ──▶ Supervisor::trigger(uid, Related) on the watching kind
//!  an indexed object changed ──watch_indexes──▶ every index of its kind (Index<I> reads it)
//! ```
//!
//! Each watch reports to a health of its own kind and role (`configmaps.v1 (children)`,
//! `secrets.v1 (related)`), planned from the handlers before anything starts: like a kind's
//! watch, it first waits until its kind is served (`Unavailable` meanwhile), readiness waits
//! for its initial list, and a stream that fails (forbidden, say) is down: not ready, and after
//! the recovery bound not alive; the metrics count its failures and relists.
//!
//! A trigger for an object the supervisor does not track (another member's shard, a filtered
//! out object, a paused replica's) is a no-op there: each replica wakes only what it serves,
//! while every member of a sharded group watches all the children (see `operator/children`).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;

use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;
use tracing::error;

use super::Shared;
use super::lockstep::Indexed;
use super::watch::await_served;
use crate::core::erased::ErasedHandler;
use crate::core::reconcile::kinds::{Related, Trigger};
use crate::core::resource::ResourceInfo;
use crate::core::supervisor::Supervisor;
use crate::handler::{Echoes, ErasedIndex};
use crate::operator::children::{
    ChildCause, ChildWatch, IndexWatch, NamedTrigger, OwnerKind, OwnerTrigger, RelatedMap,
    RelatedWatch, watch_children_reporting, watch_indexes, watch_related_reporting,
};
use crate::operator::health::KindHealth;
use crate::operator::health::pulse::WatchLimits;
use crate::operator::write::api_resource;

/// What a watch that wakes reconcile handlers watches: the children of owners, or objects
/// related to them. Its health's name and its metrics' `watch` label say which.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Role {
    /// Children (`owns(..)`).
    Children,
    /// Related objects (`watches(..)`).
    Related,
    /// The objects of an indexed kind (`#[index]`).
    Index,
}

impl Role {
    /// As the metrics label it.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Children => "children",
            Self::Related => "related",
            Self::Index => "index",
        }
    }
}

/// The health of the children's and related objects' watches: one per watched kind and role,
/// counting its streams (one per namespace, and per handler's `watches(..)` entry). Planned from
/// the handlers before anything starts, so that readiness waits for them from the first probe.
#[derive(Debug, Default)]
pub(crate) struct RelationHealth {
    watches: BTreeMap<(Role, ResourceInfo), Arc<KindHealth>>,
}

impl RelationHealth {
    /// The watches `kinds` (each with its handlers) and the kinds of `indexes` need, the
    /// operator limited to `namespaces` (empty: all), judged by `limits`.
    pub(crate) fn plan(
        kinds: &[(&ResourceInfo, &[Arc<dyn ErasedHandler>])],
        indexes: &[Indexed],
        namespaces: &[String],
        limits: WatchLimits,
    ) -> Self {
        let handlers = || kinds.iter().flat_map(|(_, handlers)| handlers.iter());
        let owned: BTreeSet<ResourceInfo> = handlers()
            .flat_map(|h| h.spec().reconcile.owns)
            .map(|owns| owns())
            .collect();
        let mut streams: BTreeMap<(Role, ResourceInfo), usize> = BTreeMap::new();
        for child in owned {
            let n = namespaces_of(namespaces, &child).len();
            *streams.entry((Role::Children, child)).or_default() += n;
        }
        for related in handlers().flat_map(|h| h.spec().reconcile.watches) {
            let info = (related.kind)();
            let n = namespaces_of(namespaces, &info).len();
            *streams.entry((Role::Related, info)).or_default() += n;
        }
        for info in indexes
            .iter()
            .map(|(info, _)| info)
            .collect::<BTreeSet<_>>()
        {
            let n = namespaces_of(namespaces, info).len();
            streams.insert((Role::Index, info.clone()), n);
        }
        let watches = (streams.into_iter())
            .map(|((role, info), n)| {
                let name = format!("{info} ({})", role.label());
                let health = KindHealth::new(name, n).with_watch_limits(limits);
                ((role, info), Arc::new(health))
            })
            .collect();
        Self { watches }
    }

    /// Each watch: its kind, its role and its health.
    pub(crate) fn watches(&self) -> impl Iterator<Item = (&ResourceInfo, Role, &Arc<KindHealth>)> {
        (self.watches.iter()).map(|((role, info), health)| (info, *role, health))
    }

    /// The health of a planned watch.
    fn of(&self, role: Role, info: &ResourceInfo) -> Arc<KindHealth> {
        let key = (role, info.clone());
        (self.watches.get(&key).cloned())
            .expect("the relations are planned from the same handlers they are launched for")
    }
}

/// One served kind as the relations see it: what it is, its supervisor, its handlers.
pub(crate) struct Served<'a> {
    pub(crate) info: &'a ResourceInfo,
    pub(crate) supervisor: Supervisor,
    pub(crate) handlers: &'a [Arc<dyn ErasedHandler>],
}

/// Starts the children's and related objects' watches of every served kind's reconcile
/// handlers, and one watch per indexed kind feeding its indexes; `server_timeout` bounds each
/// watch request. Returns their tasks.
pub(crate) fn launch(
    shared: &Shared,
    served: &[Served<'_>],
    indexes: &[Indexed],
    echoes: &Arc<Echoes>,
    healths: &RelationHealth,
    server_timeout: u32,
) -> Vec<AbortHandle> {
    let mut tasks = launch_indexes(shared, indexes, healths, server_timeout);
    for (child, owners) in owned_kinds(served) {
        let kinds = owners.iter().map(|s| owner_kind(s.0)).collect();
        let supervisors: Vec<Supervisor> = owners.into_iter().map(|s| s.1).collect();
        let trigger: OwnerTrigger = Arc::new(move |uid: &str, _cause: &ChildCause| {
            for supervisor in &supervisors {
                supervisor.trigger(uid, Trigger::Child);
            }
        });
        let health = healths.of(Role::Children, &child);
        for namespace in namespaces(shared, &child) {
            let watch = ChildWatch {
                resource: api_resource(&child),
                namespace,
                owners: Vec::clone(&kinds),
                server_timeout,
            };
            let (client, stop) = (shared.client.clone(), shared.watch_stop.clone());
            let (echoes, trigger, reporting) = (echoes.clone(), trigger.clone(), health.clone());
            let task = async move {
                watch_children_reporting(client, watch, echoes, trigger, &reporting, stop).await;
            };
            tasks.push(spawn(shared, &child, &health, task));
        }
    }
    for kind in served {
        for related in kind
            .handlers
            .iter()
            .flat_map(|h| h.spec().reconcile.watches)
        {
            tasks.extend(launch_related(
                shared,
                kind,
                related,
                healths,
                server_timeout,
            ));
        }
    }
    tasks
}

/// Spawns one watch of `info`: it waits until the kind is served (as a kind's watch does),
/// then runs `watch` until the operator stops watching. A panic fails `/healthz`.
fn spawn(
    shared: &Shared,
    info: &ResourceInfo,
    health: &Arc<KindHealth>,
    watch: impl Future<Output = ()> + Send + 'static,
) -> AbortHandle {
    let (client, info, stop): (_, _, CancellationToken) = (
        shared.client.clone(),
        info.clone(),
        shared.watch_stop.clone(),
    );
    let discovering = health.clone();
    let task = tokio::spawn(async move {
        let discovered = stop.run_until_cancelled(await_served(&client, &info, &discovering));
        if discovered.await.is_some() {
            watch.await;
        }
    });
    let abort = task.abort_handle();
    let health = health.clone();
    tokio::spawn(async move {
        if let Err(err) = task.await
            && err.is_panic()
        {
            health.mark_dead(); // /healthz fails: a restart is the way out
            error!(watch = %health.name, "the watch task panicked");
        }
    });
    abort
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
    healths: &RelationHealth,
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
    let health = healths.of(Role::Related, &info);
    namespaces(shared, &info)
        .into_iter()
        .map(|namespace| {
            let watch = RelatedWatch {
                resource: api_resource(&info),
                namespace,
                map: map.clone(),
                server_timeout,
            };
            let (client, stop) = (shared.client.clone(), shared.watch_stop.clone());
            let (trigger, reporting) = (trigger.clone(), health.clone());
            let task = async move {
                watch_related_reporting(client, watch, trigger, &reporting, stop).await;
            };
            spawn(shared, &info, &health, task)
        })
        .collect()
}

/// One watch stream per indexed kind and namespace, feeding every index of that kind. Not
/// sharded: an index holds every object of its kind, whichever member serves it.
fn launch_indexes(
    shared: &Shared,
    indexes: &[Indexed],
    healths: &RelationHealth,
    server_timeout: u32,
) -> Vec<AbortHandle> {
    let mut by_kind: BTreeMap<&ResourceInfo, Vec<Arc<dyn ErasedIndex>>> = BTreeMap::new();
    for (info, index) in indexes {
        by_kind.entry(info).or_default().push(index.clone());
    }
    let mut tasks = Vec::new();
    for (info, indexes) in by_kind {
        let health = healths.of(Role::Index, info);
        let namespaces = namespaces(shared, info);
        for index in &indexes {
            index.expect_lists(namespaces.len());
        }
        for namespace in namespaces {
            let watch = IndexWatch {
                resource: api_resource(info),
                namespace,
                indexes: indexes.clone(),
                server_timeout,
            };
            let (client, stop) = (shared.client.clone(), shared.watch_stop.clone());
            let reporting = health.clone();
            let task = async move {
                watch_indexes(client, watch, &reporting, stop).await;
            };
            tasks.push(spawn(shared, info, &health, task));
        }
    }
    tasks
}

/// The namespaces to watch a kind in: each selected one for a namespaced kind, else all.
fn namespaces(shared: &Shared, info: &ResourceInfo) -> Vec<Option<String>> {
    namespaces_of(&shared.selection.namespaces, info)
}

/// The namespaces to watch a kind in, the operator limited to `selected` (empty: all).
fn namespaces_of(selected: &[String], info: &ResourceInfo) -> Vec<Option<String>> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::erased::{Call, Invocation, MatchError};
    use crate::core::object::ObjectState;
    use crate::core::outcome::HandlerError;
    use crate::core::reconcile::kinds::Target;
    use crate::core::spec::{HandlerKind, HandlerSpec, ReconcileOptions};
    use crate::operator::health::WatchPhase;

    fn config_maps() -> ResourceInfo {
        ResourceInfo::new("", "v1", "ConfigMap", "configmaps", true)
    }
    fn secrets() -> ResourceInfo {
        ResourceInfo::new("", "v1", "Secret", "secrets", true)
    }
    fn namespaces_kind() -> ResourceInfo {
        ResourceInfo::new("", "v1", "Namespace", "namespaces", false)
    }
    fn nowhere(_: &serde_json::Value) -> Vec<Target> {
        Vec::new()
    }

    const RECONCILE: HandlerSpec = HandlerSpec::new("web", HandlerKind::Reconcile);
    /// Owns config maps, watches secrets.
    static WEB: HandlerSpec = HandlerSpec {
        reconcile: ReconcileOptions {
            owns: &[config_maps],
            watches: &[Related {
                kind: secrets,
                map: nowhere,
            }],
            ..ReconcileOptions::NONE
        },
        ..RECONCILE
    };
    /// Owns config maps too; watches secrets and namespaces (cluster-scoped).
    static DB: HandlerSpec = HandlerSpec {
        id: "db",
        reconcile: ReconcileOptions {
            owns: &[config_maps],
            watches: &[
                Related {
                    kind: secrets,
                    map: nowhere,
                },
                Related {
                    kind: namespaces_kind,
                    map: nowhere,
                },
            ],
            ..ReconcileOptions::NONE
        },
        ..RECONCILE
    };

    struct Spec(&'static HandlerSpec);

    impl ErasedHandler for Spec {
        fn spec(&self) -> &'static HandlerSpec {
            self.0
        }
        fn matches(&self, _: &ObjectState) -> Result<bool, MatchError> {
            Ok(true)
        }
        fn invoke(&self, _: Invocation) -> Result<Call, HandlerError> {
            unreachable!("planning never invokes a handler")
        }
    }

    /// How many streams `health` waits for: the lists it needs before it is watching.
    fn streams(health: &KindHealth) -> usize {
        let mut n = 0;
        while health.phase() != WatchPhase::Watching {
            assert!(n < 100, "{} never becomes ready", health.name);
            health.list_done();
            n += 1;
        }
        n
    }

    #[test]
    fn one_watch_per_kind_and_role_with_a_stream_per_namespace_and_entry() {
        let web: Vec<Arc<dyn ErasedHandler>> = vec![Arc::new(Spec(&WEB))];
        let db: Vec<Arc<dyn ErasedHandler>> = vec![Arc::new(Spec(&DB))];
        let (apps, dbs) = (
            ResourceInfo::new("example.com", "v1", "App", "apps", true),
            ResourceInfo::new("example.com", "v1", "Db", "dbs", true),
        );
        let kinds = [(&apps, web.as_slice()), (&dbs, db.as_slice())];
        let selected = ["a".to_owned(), "b".to_owned()];
        let plan = RelationHealth::plan(&kinds, &[], &selected, WatchLimits::default());
        let planned: Vec<_> = (plan.watches())
            .map(|(info, role, health)| (info.plural.to_string(), role, streams(health)))
            .collect();
        assert_eq!(
            planned,
            [
                // Owned by both handlers, watched once per namespace.
                ("configmaps".to_owned(), Role::Children, 2),
                // Cluster-scoped: one stream whatever the namespaces.
                ("namespaces".to_owned(), Role::Related, 1),
                // Each handler's entry maps on its own: two entries in two namespaces.
                ("secrets".to_owned(), Role::Related, 4),
            ]
        );
        assert_eq!(
            plan.of(Role::Children, &config_maps()).name,
            "configmaps.v1 (children)"
        );

        let everywhere = RelationHealth::plan(&kinds, &[], &[], WatchLimits::default());
        let counts: Vec<_> = (everywhere.watches())
            .map(|(_, _, health)| streams(health))
            .collect();
        assert_eq!(counts, [1, 1, 2], "one stream per entry in all namespaces");
    }
}
