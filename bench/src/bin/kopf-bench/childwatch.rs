//! The harness's own view of scenario 10's children: one watch per child kind (label
//! `kopf-bench/parent`, the harness's user agent), keeping per child its owner's UID and whether
//! its content is what the arm must make (`kopf_bench::children`), and a log of the moments a
//! child's content turned right or wrong (stamped when the watch delivered the event).
//!
//! ```text
//!   watch ConfigMap ─┐
//!   watch Secret ────┼─► State { (kind, parent) → Seen { owner, ok, since } }
//!   watch Service ───┘          └─ log: [Transition { kind, parent, ok, at }]
//! ```
//!
//! Convergence is read from `since` (the instant the last child reached its current state), an
//! edit's restoration from the log, so the harness's polling interval does not blur either.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use anyhow::bail;
use futures::StreamExt as _;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kopf_bench::children::{ChildKind, PARENT_LABEL, config_map_ok, secret_ok, service_ok};
use kopf_bench::firelog::unix_nanos;
use kopf_bench::names::{FIELD_VALUE, NAMESPACE};
use kube::api::{DeleteParams, ListParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client, Resource, ResourceExt as _};
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// What the watch knows of one child.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    /// The UID of its controller owner (or first owner).
    owner: Option<String>,
    /// Whether its content is what the arm must make.
    ok: bool,
    /// When it reached this (owner, ok) state (Unix ns).
    since: u128,
}

/// A child's content turned right (`ok`) or wrong.
#[derive(Debug, Clone)]
pub(crate) struct Transition {
    pub(crate) kind: ChildKind,
    pub(crate) parent: String,
    pub(crate) ok: bool,
    /// Unix ns.
    pub(crate) at: u128,
}

#[derive(Default)]
struct State {
    synced: HashSet<ChildKind>,
    children: HashMap<(ChildKind, String), Seen>,
    log: Vec<Transition>,
}

impl State {
    /// Records a child's state as of `at` (Unix ns); a change of `ok` goes to the log.
    fn observe(
        &mut self,
        kind: ChildKind,
        parent: String,
        owner: Option<String>,
        ok: bool,
        at: u128,
    ) {
        let key = (kind, parent);
        let old = self.children.get(&key);
        if old.is_some_and(|s| s.owner == owner && s.ok == ok) {
            return;
        }
        if old.is_none_or(|s| s.ok != ok) {
            let parent = key.1.clone();
            self.log.push(Transition {
                kind,
                parent,
                ok,
                at,
            });
        }
        self.children.insert(
            key,
            Seen {
                owner,
                ok,
                since: at,
            },
        );
    }

    /// After the log index `from`: when the child went wrong, and when it was right again.
    fn restoration(
        &self,
        from: usize,
        kind: ChildKind,
        parent: &str,
    ) -> (Option<u128>, Option<u128>) {
        let mut events = self
            .log
            .iter()
            .skip(from)
            .filter(|t| t.kind == kind && t.parent == parent);
        let Some(broken) = events.by_ref().find(|t| !t.ok) else {
            return (None, None);
        };
        (Some(broken.at), events.find(|t| t.ok).map(|t| t.at))
    }
}

/// The watches of the children (stopped when dropped).
pub(crate) struct ChildWatch {
    state: Arc<Mutex<State>>,
    tasks: Vec<JoinHandle<()>>,
}

/// The parent a child names, its owner's UID, and whether its content is right.
type Check<K> = fn(&K) -> Option<(String, Option<String>, bool)>;

fn owner_uid<K: Resource>(obj: &K) -> Option<String> {
    let owners = obj.meta().owner_references.as_ref()?;
    owners
        .iter()
        .find(|o| o.controller == Some(true))
        .or_else(|| owners.first())
        .map(|o| o.uid.clone())
}

fn parent_of<K: Resource>(obj: &K) -> Option<String> {
    obj.labels().get(PARENT_LABEL).cloned()
}

fn check<K: Resource>(
    obj: &K,
    ok: impl Fn(&K, &str) -> bool,
) -> Option<(String, Option<String>, bool)> {
    let parent = parent_of(obj)?;
    let right = ok(obj, &parent);
    Some((parent, owner_uid(obj), right))
}

impl ChildWatch {
    pub(crate) fn start(client: &Client) -> Self {
        let state = Arc::new(Mutex::new(State::default()));
        let tasks = vec![
            spawn_kind::<ConfigMap>(client, ChildKind::ConfigMap, &state, |o| {
                check(o, |cm, _| config_map_ok(cm, FIELD_VALUE))
            }),
            spawn_kind::<Secret>(client, ChildKind::Secret, &state, |o| check(o, secret_ok)),
            spawn_kind::<Service>(client, ChildKind::Service, &state, |o| check(o, service_ok)),
        ];
        Self { state, tasks }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits up to 60 s until every kind's initial list is in.
    pub(crate) async fn wait_synced(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.lock().synced.len() < ChildKind::ALL.len() {
            if Instant::now() > deadline {
                bail!("the harness's child watches did not list within 60 s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    /// How many children are in place: right content, owned by their parent (`parents`: name →
    /// UID), and when the last of them got there (Unix ns).
    pub(crate) fn in_place(&self, parents: &HashMap<String, String>) -> (usize, u128) {
        let st = self.lock();
        let mut count = 0;
        let mut last = 0;
        for (name, uid) in parents {
            for kind in ChildKind::ALL {
                if let Some(seen) = st.children.get(&(kind, name.clone()))
                    && seen.ok
                    && seen.owner.as_ref() == Some(uid)
                {
                    count += 1;
                    last = last.max(seen.since);
                }
            }
        }
        (count, last)
    }

    /// How many children the watches see.
    pub(crate) fn count(&self) -> usize {
        self.lock().children.len()
    }

    /// The length of the transition log (a mark for [`restoration`](Self::restoration)).
    pub(crate) fn mark(&self) -> usize {
        self.lock().log.len()
    }

    /// After the mark `from`: when the child went wrong, and when it was right again after that.
    pub(crate) fn restoration(
        &self,
        from: usize,
        kind: ChildKind,
        parent: &str,
    ) -> (Option<u128>, Option<u128>) {
        self.lock().restoration(from, kind, parent)
    }
}

impl Drop for ChildWatch {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

fn spawn_kind<K>(
    client: &Client,
    kind: ChildKind,
    state: &Arc<Mutex<State>>,
    check: Check<K>,
) -> JoinHandle<()>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + 'static,
{
    let api: Api<K> = Api::namespaced(client.clone(), NAMESPACE);
    let state = Arc::clone(state);
    tokio::spawn(async move {
        let config = watcher::Config::default().labels(PARENT_LABEL);
        let mut events = watcher(api, config).default_backoff().boxed();
        let mut listed: HashSet<String> = HashSet::new();
        while let Some(event) = events.next().await {
            let Ok(event) = event else { continue };
            let mut st = state.lock().unwrap_or_else(PoisonError::into_inner);
            match event {
                watcher::Event::Init => listed.clear(),
                watcher::Event::InitApply(o) | watcher::Event::Apply(o) => {
                    if let Some((parent, owner, ok)) = check(&o) {
                        listed.insert(parent.clone());
                        st.observe(kind, parent, owner, ok, unix_nanos());
                    }
                }
                watcher::Event::InitDone => {
                    st.children
                        .retain(|(k, parent), _| *k != kind || listed.contains(parent));
                    st.synced.insert(kind);
                }
                watcher::Event::Delete(o) => {
                    if let Some(parent) = parent_of(&o) {
                        st.children.remove(&(kind, parent));
                    }
                }
            }
        }
    })
}

/// Deletes every child of scenario 10 (by label) and waits up to 120 s until none is left.
/// No garbage collector runs in the benchmark's testenv: deleting the parents leaves them.
pub(crate) async fn remove_children(client: &Client) -> anyhow::Result<()> {
    remove_kind::<ConfigMap>(client).await?;
    remove_kind::<Secret>(client).await?;
    remove_kind::<Service>(client).await
}

async fn remove_kind<K>(client: &Client) -> anyhow::Result<()>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), NAMESPACE);
    let lp = ListParams::default().labels(PARENT_LABEL);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let left = api.list_metadata(&lp).await?.items;
        if left.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{} {} children left after 120 s", left.len(), K::kind(&()));
        }
        match api.delete_collection(&DeleteParams::default(), &lp).await {
            Ok(_) => {}
            // Some kinds (Services) do not serve delete-collection: one by one.
            Err(kube::Error::Api(s)) if s.code == 405 => {
                let names: Vec<String> = left.iter().map(|o| o.name_any()).collect();
                futures::stream::iter(names)
                    .for_each_concurrent(kopf_bench::kubeutil::IN_FLIGHT, |name| {
                        let api = api.clone();
                        async move {
                            if let Err(e) = api.delete(&name, &DeleteParams::default()).await {
                                eprintln!("kopf-bench: deleting {} {name}: {e}", K::kind(&()));
                            }
                        }
                    })
                    .await;
            }
            Err(e) => return Err(e.into()),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CM: ChildKind = ChildKind::ConfigMap;

    fn observe(st: &mut State, parent: &str, owner: &str, ok: bool, at: u128) {
        st.observe(CM, parent.into(), Some(owner.into()), ok, at);
    }

    /// `since` moves only when the owner or the content's rightness changes; the log holds only
    /// changes of rightness; a restoration pairs the first "wrong" after the mark with the next
    /// "right".
    #[test]
    fn states_and_restorations() {
        let mut st = State::default();
        observe(&mut st, "a", "u1", true, 10);
        observe(&mut st, "a", "u1", true, 20); // an unrelated update
        assert_eq!(st.children[&(CM, "a".into())].since, 10);
        observe(&mut st, "a", "u2", true, 30); // a new owner: since moves, no transition
        assert_eq!(st.children[&(CM, "a".into())].since, 30);
        assert_eq!(st.log.len(), 1);
        let mark = st.log.len();
        assert_eq!(st.restoration(mark, CM, "a"), (None, None));
        observe(&mut st, "b", "u3", false, 35); // another child's edit
        observe(&mut st, "a", "u2", false, 40);
        assert_eq!(st.restoration(mark, CM, "a"), (Some(40), None));
        observe(&mut st, "a", "u2", false, 45);
        observe(&mut st, "a", "u2", true, 50);
        assert_eq!(st.restoration(mark, CM, "a"), (Some(40), Some(50)));
        assert_eq!(st.restoration(mark, ChildKind::Secret, "a"), (None, None));
    }
}
