//! Shared helpers of the children's watch tests: a recorder of triggers, a canary that tells
//! when a watch has handled everything written before, and ConfigMap helpers.
#![allow(dead_code, unreachable_pub)] // each test binary uses a different subset

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kopf_runtime::__private::children::{
    ChildCause, ChildWatch, Echoes, NamedTrigger, OwnerKind, OwnerTrigger, watch_children,
};
use kopf_tests::{TestNamespace, wait_for};
use kube::api::{Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use tokio_util::sync::CancellationToken;

/// How long a trigger may take after the write that causes it.
pub const PROMPTLY: Duration = Duration::from_secs(10);

/// Errors that are not `std::error::Error` (`ChildError`, `HandlerError`) into `anyhow`.
pub trait Shown<T> {
    fn shown(self) -> anyhow::Result<T>;
}

impl<T, E: std::fmt::Display> Shown<T> for Result<T, E> {
    fn shown(self) -> anyhow::Result<T> {
        self.map_err(|e| anyhow::anyhow!("{e}"))
    }
}

/// Every trigger so far: (owner, cause).
#[derive(Clone, Default)]
pub struct Triggers(pub Arc<Mutex<Vec<(String, ChildCause)>>>);

impl Triggers {
    pub fn push(&self, owner: String, cause: &ChildCause) {
        let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        all.push((owner, cause.clone()));
    }

    pub fn by_uid(&self) -> OwnerTrigger {
        let this = self.clone();
        Arc::new(move |uid: &str, cause: &ChildCause| this.push(uid.to_owned(), cause))
    }

    pub fn by_name(&self) -> NamedTrigger {
        let this = self.clone();
        Arc::new(move |ns: Option<&str>, name: &str, cause: &ChildCause| {
            this.push(format!("{}/{name}", ns.unwrap_or_default()), cause);
        })
    }

    /// The names of the objects that triggered `owner`, in order.
    pub fn of(&self, owner: &str) -> Vec<String> {
        let all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        all.iter()
            .filter(|(o, _)| o == owner)
            .map(|(_, c)| c.name.clone())
            .collect()
    }

    /// Waits until `owner` has been triggered `n` times; returns the time since `start`.
    pub async fn wait_since(&self, start: Instant, owner: &str, n: usize) -> Duration {
        wait_for(format!("{n} triggers of {owner}"), PROMPTLY, || async {
            let got = self.of(owner);
            if got.len() >= n {
                Ok(())
            } else {
                Err(format!("{got:?}"))
            }
        })
        .await;
        start.elapsed()
    }

    /// Waits until `owner` has been triggered `n` times.
    pub async fn wait(&self, owner: &str, n: usize) {
        self.wait_since(Instant::now(), owner, n).await;
    }

    /// Waits at most `timeout` until `owner` has been triggered `n` times.
    pub async fn wait_for(&self, owner: &str, n: usize, timeout: Duration) {
        wait_for(format!("{n} triggers of {owner}"), timeout, || async {
            let got = self.of(owner);
            if got.len() >= n {
                Ok(())
            } else {
                Err(format!("{got:?}"))
            }
        })
        .await;
    }
}

/// An owner of its own on the watched stream: once a new child of it has triggered it, every
/// event written before has been handled (a watch delivers in order).
pub struct Canary {
    owner: ConfigMap,
    children: std::sync::atomic::AtomicUsize,
}

impl Canary {
    /// Waits until the watch has handled everything written before this call.
    pub async fn sync(&self, ns: &TestNamespace, triggers: &Triggers) -> anyhow::Result<()> {
        let n = self
            .children
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let name = format!("canary-sync-{n}");
        config_map(ns, &name, Some(reference_to(&self.owner))).await?;
        let uid = self.owner.metadata.uid.clone().unwrap_or_default();
        wait_for(format!("the trigger of {name}"), PROMPTLY, || async {
            if triggers.of(&uid).contains(&name) {
                Ok(())
            } else {
                Err("not yet")
            }
        })
        .await;
        Ok(())
    }
}

pub fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Creates a ConfigMap `name` in `ns`, with `owner` as an owner (not its controller).
pub async fn config_map(
    ns: &TestNamespace,
    name: &str,
    owner: Option<OwnerReference>,
) -> anyhow::Result<ConfigMap> {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.into());
    cm.metadata.owner_references = owner.map(|o| vec![o]);
    Ok(ns
        .api::<ConfigMap>()
        .create(&PostParams::default(), &cm)
        .await?)
}

pub fn reference_to(owner: &ConfigMap) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: owner.metadata.name.clone().unwrap_or_default(),
        uid: owner.metadata.uid.clone().unwrap_or_default(),
        ..OwnerReference::default()
    }
}

/// Edits `name`'s labels as another field manager would (`kubectl label`).
pub async fn edit<K>(ns: &TestNamespace, name: &str, value: &str) -> anyhow::Result<()>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let patch = serde_json::json!({"metadata": {"labels": {"edited": value}}});
    ns.api::<K>()
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Starts the ConfigMap children's watch of `ns`, and waits until it delivers: a canary child
/// is edited until its owner is triggered.
pub async fn child_watch(
    client: kube::Client,
    ns: &TestNamespace,
    echoes: Arc<Echoes>,
    triggers: &Triggers,
) -> anyhow::Result<(CancellationToken, Canary)> {
    let watch = ChildWatch {
        resource: ApiResource::erase::<ConfigMap>(&()),
        namespace: Some(ns.name().to_owned()),
        owners: vec![OwnerKind {
            group: String::new(),
            kind: "ConfigMap".into(),
        }],
        server_timeout: 60,
    };
    let stop = CancellationToken::new();
    tokio::spawn(watch_children(
        client,
        watch,
        echoes,
        triggers.by_uid(),
        stop.clone(),
    ));
    let canary = config_map(ns, "canary", None).await?;
    config_map(ns, "canary-child", Some(reference_to(&canary))).await?;
    let uid = canary.metadata.uid.clone().unwrap_or_default();
    let mut round = 0;
    wait_for(
        "the child watch to deliver",
        Duration::from_secs(30),
        || {
            round += 1;
            let (round, uid) = (round, uid.clone());
            async move {
                edit::<ConfigMap>(ns, "canary-child", &round.to_string())
                    .await
                    .map_err(|e| e.to_string())?;
                tokio::time::sleep(Duration::from_millis(200)).await;
                if triggers.of(&uid).is_empty() {
                    Err("no trigger yet".to_owned())
                } else {
                    Ok(())
                }
            }
        },
    )
    .await;
    let canary = Canary {
        owner: canary,
        children: std::sync::atomic::AtomicUsize::new(0),
    };
    Ok((stop, canary))
}
