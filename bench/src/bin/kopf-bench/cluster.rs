//! The harness's own API work: the CRD, the namespace, creating and removing objects, and a
//! watch that counts objects and finalizers. Every request carries the harness user agent, so the
//! audit-log count leaves it out.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context as _, bail};
use futures::{StreamExt as _, TryStreamExt as _, stream};
use k8s_openapi::api::coordination::v1::Lease;
use kopf_bench::kubeutil::{self, HARNESS_USER_AGENT, client, objects};
use kopf_bench::names::{NAMESPACE, object_index, object_name};
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt as _};
use serde_json::json;
use tokio::time::Instant;

/// The harness's connection to the API server.
#[derive(Clone)]
pub(crate) struct Cluster {
    client: Client,
    api: Api<DynamicObject>,
}

impl Cluster {
    pub(crate) async fn connect() -> anyhow::Result<Self> {
        let client = client(Some(HARNESS_USER_AGENT)).await?;
        Ok(Self {
            api: objects(client.clone()),
            client,
        })
    }

    /// The harness's client (its requests carry the harness user agent).
    pub(crate) fn client(&self) -> Client {
        self.client.clone()
    }

    /// The UID of every benchmark object, by name.
    pub(crate) async fn uids(&self) -> anyhow::Result<HashMap<String, String>> {
        let list = self.api.list_metadata(&ListParams::default()).await?;
        Ok(list
            .into_iter()
            .filter_map(|o| Some((o.name_any(), o.uid()?)))
            .collect())
    }

    /// Applies the CRD and the namespace and waits until the resource is served.
    pub(crate) async fn setup(&self) -> anyhow::Result<()> {
        kubeutil::apply_crd_and_namespace(&self.client, NAMESPACE).await
    }

    async fn for_each(&self, names: Vec<String>, patch: serde_json::Value) -> anyhow::Result<()> {
        let api = &self.api;
        let patch = &patch;
        stream::iter(names)
            .map(|name| async move {
                match api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                    Err(e) => Err(anyhow::Error::new(e).context(format!("patching {name}"))),
                }
            })
            .buffer_unordered(kubeutil::IN_FLIGHT)
            .try_collect::<()>()
            .await
    }

    /// Makes exactly objects 0..n exist, none being deleted, none with finalizers.
    pub(crate) async fn prepare(&self, n: usize) -> anyhow::Result<()> {
        let list = self.api.list(&ListParams::default()).await?;
        let mut existing = HashMap::new();
        let mut strip = Vec::new();
        let mut wanted: Vec<String> = (0..n).map(object_name).collect();
        let wanted_set: std::collections::HashSet<&String> = wanted.iter().collect();
        let mut extra = false;
        for obj in list {
            let name = obj.name_any();
            if !obj.finalizers().is_empty() {
                strip.push(name.clone());
            }
            if obj.metadata.deletion_timestamp.is_some() || !wanted_set.contains(&name) {
                extra = true;
            }
            existing.insert(name, ());
        }
        self.for_each(strip, json!({"metadata": {"finalizers": null}}))
            .await?;
        if extra {
            self.delete_all().await?;
            self.wait_count(0, Duration::from_secs(120)).await?;
            existing.clear();
        }
        wanted.retain(|name| !existing.contains_key(name));
        kubeutil::create_objects(&self.api, wanted).await
    }

    /// Deletes every benchmark object with one delete-collection request.
    pub(crate) async fn delete_all(&self) -> anyhow::Result<()> {
        self.api
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await?;
        Ok(())
    }

    /// Removes every finalizer and deletes everything (cleanup after an arm that left them). At
    /// tens of thousands of objects on a loaded machine the delete-collection request can outlast
    /// the API server's request timeout (60 s) and end in an error having marked only some of
    /// them: then the finalizers of those are removed and the next round deletes the rest.
    pub(crate) async fn remove_all(&self) -> anyhow::Result<()> {
        const ROUNDS: usize = 5;
        let mut round = 1;
        loop {
            if let Err(e) = self.delete_all().await {
                eprintln!("kopf-bench: cleanup round {round}: deleting the objects: {e:#}");
            }
            let list = self.api.list(&ListParams::default()).await?;
            let names = list
                .into_iter()
                .filter(|o| !o.finalizers().is_empty())
                .map(|o| o.name_any());
            self.for_each(names.collect(), json!({"metadata": {"finalizers": null}}))
                .await?;
            match self.wait_count(0, Duration::from_secs(120)).await {
                Ok(()) => return Ok(()),
                Err(e) if round == ROUNDS => return Err(e),
                Err(e) => eprintln!("kopf-bench: cleanup round {round}: {e:#}"),
            }
            round += 1;
        }
    }

    async fn wait_count(&self, n: usize, limit: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            let count = self
                .api
                .list_metadata(&ListParams::default())
                .await?
                .items
                .len();
            if count == n {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("{count} benchmark objects exist after {limit:?}, expected {n}");
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The shard range of each of the objects `0..n` (from its UID).
    pub(crate) async fn shard_ranges(&self, n: usize) -> anyhow::Result<Vec<u16>> {
        let list = self.api.list_metadata(&ListParams::default()).await?;
        let mut out = vec![None; n];
        for obj in list {
            if let Some(slot) = object_index(&obj.name_any()).and_then(|i| out.get_mut(i)) {
                *slot = obj.uid().map(|uid| kopf_runtime::ha::shard_of(&uid));
            }
        }
        out.into_iter()
            .collect::<Option<Vec<u16>>>()
            .context("a benchmark object is missing or has no UID")
    }

    /// Deletes every Lease in the benchmark's namespace (what elected or sharded replicas of an
    /// earlier trial left behind).
    pub(crate) async fn delete_leases(&self) -> anyhow::Result<()> {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), NAMESPACE);
        leases
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await?;
        Ok(())
    }

    /// Starts a watch that keeps the counts of objects and of objects with finalizers.
    pub(crate) fn watch(&self) -> Watch {
        let state = Arc::new(Mutex::new(WatchState::default()));
        let task_state = Arc::clone(&state);
        let api = self.api.clone();
        let task = tokio::spawn(async move {
            let mut events = watcher(api, watcher::Config::default()).boxed();
            let mut init: HashMap<String, bool> = HashMap::new();
            while let Some(event) = events.next().await {
                let Ok(event) = event else { continue };
                let mut st = task_state.lock().unwrap_or_else(PoisonError::into_inner);
                match event {
                    watcher::Event::Init => init.clear(),
                    watcher::Event::InitApply(o) => {
                        init.insert(o.name_any(), !o.finalizers().is_empty());
                    }
                    watcher::Event::InitDone => {
                        st.objects = std::mem::take(&mut init);
                        st.synced = true;
                    }
                    watcher::Event::Apply(o) => {
                        st.objects.insert(o.name_any(), !o.finalizers().is_empty());
                    }
                    watcher::Event::Delete(o) => {
                        st.objects.remove(&o.name_any());
                    }
                }
            }
        });
        Watch { state, task }
    }
}

#[derive(Default)]
struct WatchState {
    synced: bool,
    objects: HashMap<String, bool>,
}

/// Counts kept by [`Cluster::watch`].
pub(crate) struct Watch {
    state: Arc<Mutex<WatchState>>,
    task: tokio::task::JoinHandle<()>,
}

impl Watch {
    /// `(objects, objects with finalizers)`, once the initial list is in.
    pub(crate) fn counts(&self) -> Option<(usize, usize)> {
        let st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        st.synced.then(|| {
            (
                st.objects.len(),
                st.objects.values().filter(|f| **f).count(),
            )
        })
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}
