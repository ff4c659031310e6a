//! # Handlers on built-in kinds: a namespaced one, a cluster-scoped one, and a one-shot timer
//!
//! Not every operator serves its own CRD. This one serves two kinds every cluster has, through
//! their `k8s-openapi` types — the kind a handler serves is the `K` of its `Arc<K>`, so the
//! operator watches `ConfigMap`s and `Namespace`s because its handlers take them:
//!
//! - `audit_data` — every 10 s, for each `ConfigMap` labelled `kopf-examples/audit=true`,
//!   counts the keys of `data` and `binaryData` and their size in bytes, and records them as
//!   annotations on the ConfigMap (written only when they changed):
//!
//!   ```yaml
//!   metadata:
//!     annotations:
//!       kopf-examples/data-keys: "3"
//!       kopf-examples/data-bytes: "1024"
//!   ```
//!
//! - `first_seen` — a **one-shot** timer (`once`) on the same ConfigMaps: stamps
//!   `kopf-examples/first-seen` with the time the operator first saw the ConfigMap (RFC 3339).
//!   A one-shot timer is done for its object after its run: later versions of the object (a
//!   change of its data, of its labels, even removing the stamp by hand) do not run it again in
//!   this process. A restarted operator would run it again, though (the framework remembers
//!   "done" in memory only): the filter `annotations("kopf-examples/first-seen" = absent)` keeps
//!   it from running for the ConfigMaps that have their stamp already, so the first stamp stays;
//!
//! - `inventory` — every 10 s, for each `Namespace` labelled `kopf-examples/watch=true` (a
//!   **cluster-scoped** kind), counts the ConfigMaps in it and records the count as the
//!   annotation `kopf-examples/configmaps` on the Namespace.
//!
//! (The intervals are short for the demonstration and the test; an audit would run every few
//! minutes.)
//!
//! It shows:
//! - **annotations, not results, on kinds without a status.** A timer's return value is stored
//!   under `status.<handler id>`. ConfigMaps and Namespaces have no place for it: a ConfigMap has
//!   no `status` at all, and a Namespace's `status` is a fixed schema (`phase`, `conditions`)
//!   owned by the namespace controller. The framework sends such a result anyway — merged into
//!   the patch of the main resource when the kind has no status subresource (a ConfigMap), to the
//!   status subresource otherwise (a Namespace) — and the API server drops the unknown field
//!   without an error (unknown fields of built-in kinds are pruned; the framework's start-up
//!   check of pruned results covers CRDs only). The value silently disappears, at the price of a
//!   request. So these handlers return `HandlerResult<()>` and write what they compute with
//!   `Patch::merge` into `metadata.annotations`, which every kind has (and which
//!   `kubectl describe` shows). Annotations are strings: numbers are written as their decimal
//!   text;
//! - **no finalizers** (`finalizer = false` on all three). A finalizer makes deletion wait until
//!   the operator has stopped the object's handlers — and while the operator is down or
//!   uninstalled, it makes deletion wait forever. These handlers only write annotations on their
//!   own object: if it is deleted in the middle of a run, the write fails as "object gone" (logged
//!   and dropped) and nothing is lost or left behind. On a **Namespace** a finalizer would be
//!   plainly wrong: it would hold `kubectl delete namespace` in `Terminating` for as long as the
//!   operator does not release it (with everything in the namespace already deleted), and an
//!   operator that is down would hold it forever. (Without finalizers the labelled objects are
//!   also never written to merely for being seen: two writes fewer per object.);
//! - **namespaces and cluster-scoped kinds**: `--namespace NS` limits the *namespaced* kinds
//!   (here the ConfigMaps) to those namespaces; a cluster-scoped kind is watched cluster-wide
//!   regardless (`OperatorBuilder::namespaces`), so `inventory` serves every labelled Namespace,
//!   also when the ConfigMaps are watched in one namespace only;
//! - **filters by label on built-in kinds**: `labels("kopf-examples/audit" = "true")` — keys with
//!   `/` are strings. These filters are evaluated by the operator: it lists and watches all the
//!   ConfigMaps of the watched namespaces, and runs the handlers for the labelled ones only. A
//!   server-side selector (`OperatorBuilder::label_selector`) would spare it the others, but it
//!   applies to every kind of the operator, and the two kinds here have different labels.
//!
//! ## Run it
//!
//! ```text
//! eval "$(tools/kube-testenv/start.sh)"   # or point KUBECONFIG at your cluster
//! cargo run -p kopf-examples --bin builtin_kinds -- --namespace default
//! ```
//!
//! then, in another terminal:
//!
//! ```text
//! kubectl -n default create configmap audited --from-literal=a=hello
//! kubectl -n default label configmap audited kopf-examples/audit=true
//! kubectl -n default get configmap audited -o jsonpath='{.metadata.annotations}'
//! kubectl create namespace watched && kubectl label namespace watched kopf-examples/watch=true
//! kubectl get namespace watched -o jsonpath='{.metadata.annotations}'
//! kubectl delete namespace watched   # not held up: the operator has no finalizer on it
//! ```
//!
//! ## RBAC
//!
//! A ClusterRole (Namespaces are cluster-scoped, and `inventory` counts the ConfigMaps of any
//! labelled Namespace):
//!
//! ```yaml
//! # Watch the objects, apply the handlers' patches (get: the operator re-reads an object when a
//! # patch conflicts or is refused).
//! - apiGroups: [""]
//!   resources: ["configmaps", "namespaces"]
//!   verbs: ["get", "list", "watch", "patch"]
//! # Warning events about failed handlers (those about a Namespace go to the `default`
//! # namespace).
//! - apiGroups: ["events.k8s.io"]
//!   resources: ["events"]
//!   verbs: ["create", "patch"]
//! ```
//!
//! No rule for the CRD: the operator does not read CRDs for built-in kinds. `builtin_kinds` is
//! not in the image that `kopf-examples/deploy/Dockerfile` builds, and `deploy/rbac.yaml` is for
//! `KopfExample` only: to deploy it, add the binary to the image and the rules above to the
//! ClusterRole.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::jiff::Timestamp;
use kopf_runtime::{HandlerResult, Patch, timer};
use kube::api::{Api, ListParams};
use serde_json::{Map, Value, json};
use tracing::info;

/// The label that asks for the audit of a ConfigMap.
pub const AUDIT_LABEL: &str = "kopf-examples/audit";
/// The label that asks for the inventory of a Namespace.
pub const WATCH_LABEL: &str = "kopf-examples/watch";
/// The number of keys of a ConfigMap (`data` and `binaryData`).
pub const DATA_KEYS: &str = "kopf-examples/data-keys";
/// The size of a ConfigMap's values, in bytes.
pub const DATA_BYTES: &str = "kopf-examples/data-bytes";
/// When the operator first saw a ConfigMap.
pub const FIRST_SEEN: &str = "kopf-examples/first-seen";
/// The number of ConfigMaps in a Namespace.
pub const CONFIGMAPS: &str = "kopf-examples/configmaps";

/// What the audit finds in a ConfigMap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Audit {
    /// Keys of `data` and `binaryData` together.
    keys: usize,
    /// The sizes of their values: UTF-8 bytes of `data`, raw bytes of `binaryData`.
    bytes: usize,
}

impl Audit {
    fn of(cm: &ConfigMap) -> Self {
        let data = cm.data.iter().flatten().map(|(_, v)| v.len());
        let binary = cm.binary_data.iter().flatten().map(|(_, v)| v.0.len());
        let sizes: Vec<usize> = data.chain(binary).collect();
        Self {
            keys: sizes.len(),
            bytes: sizes.iter().sum(),
        }
    }

    /// The annotations recording it.
    fn annotations(self) -> [(&'static str, String); 2] {
        [
            (DATA_KEYS, self.keys.to_string()),
            (DATA_BYTES, self.bytes.to_string()),
        ]
    }
}

/// The annotation `key` of an object, if it has it.
fn annotation<'a>(meta: &'a kube::api::ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// Merges into `patch` those of `wanted` that the object does not have with these values yet;
/// returns whether there were any. An annotation written with the value it has would still be a
/// write: a new `resourceVersion`, an event for every watcher of the kind.
fn annotate(meta: &kube::api::ObjectMeta, wanted: &[(&str, String)], patch: &Patch) -> bool {
    let changed: Map<String, Value> = wanted
        .iter()
        .filter(|(key, value)| annotation(meta, key) != Some(value.as_str()))
        .map(|(key, value)| ((*key).to_owned(), Value::String(value.clone())))
        .collect();
    if changed.is_empty() {
        return false;
    }
    patch.merge(json!({"metadata": {"annotations": changed}}));
    true
}

/// Every 10 s: the keys and bytes of a labelled ConfigMap, as annotations (applied after the
/// run). Returns `()`: a ConfigMap has no `status` to keep a result in.
#[timer(interval = "10s", labels("kopf-examples/audit" = "true"), finalizer = false)]
async fn audit_data(cm: Arc<ConfigMap>, patch: Patch) -> HandlerResult {
    let audit = Audit::of(&cm);
    if annotate(&cm.metadata, &audit.annotations(), &patch) {
        info!(keys = audit.keys, bytes = audit.bytes, "the data changed");
    }
    Ok(())
}

/// Once per labelled ConfigMap (per process; the annotation filter covers restarts): the time
/// the operator first saw it.
#[timer(
    once,
    labels("kopf-examples/audit" = "true"),
    annotations("kopf-examples/first-seen" = absent),
    finalizer = false
)]
async fn first_seen(_cm: Arc<ConfigMap>, patch: Patch) -> HandlerResult {
    let now = Timestamp::now().to_string();
    info!(first_seen = %now, "first seen");
    patch.merge(json!({"metadata": {"annotations": {FIRST_SEEN: now}}}));
    Ok(())
}

/// Every 10 s: the number of ConfigMaps in a labelled Namespace, as an annotation on it. A
/// failed list is retried after 10 s. A Namespace being deleted (`Terminating`) stops the timer
/// at once: a run in progress is cancelled at its `.await`.
#[timer(
    interval = "10s",
    labels("kopf-examples/watch" = "true"),
    finalizer = false,
    backoff = "10s"
)]
async fn inventory(ns: Arc<Namespace>, client: kube::Client, patch: Patch) -> HandlerResult {
    let name = ns.metadata.name.as_deref().unwrap_or_default();
    // Names only: the ConfigMaps' data is not needed to count them.
    let listed = Api::<ConfigMap>::namespaced(client, name)
        .list_metadata(&ListParams::default())
        .await?;
    let count = listed.items.len();
    if annotate(&ns.metadata, &[(CONFIGMAPS, count.to_string())], &patch) {
        info!(configmaps = count, "the inventory changed");
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    kopf_examples::cli::run().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use kopf_runtime::ObjectRef;
    use std::collections::BTreeMap;

    fn config_map(data: &[(&str, &str)], binary: &[(&str, &[u8])]) -> ConfigMap {
        ConfigMap {
            data: Some(
                data.iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            binary_data: Some(
                binary
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), ByteString(v.to_vec())))
                    .collect(),
            ),
            ..ConfigMap::default()
        }
    }

    #[test]
    fn the_audit_counts_text_and_binary_values() {
        assert_eq!(
            Audit::of(&ConfigMap::default()),
            Audit { keys: 0, bytes: 0 }
        );
        // "é" is two bytes in UTF-8.
        let cm = config_map(&[("a", "hello"), ("b", "é")], &[("c", &[0, 1, 2])]);
        assert_eq!(Audit::of(&cm), Audit { keys: 3, bytes: 10 });
    }

    #[test]
    fn only_changed_annotations_are_patched() {
        let patch = Patch::detached(ObjectRef {
            uid: "u".into(),
            namespace: Some("ns".into()),
            name: "cm".into(),
        });
        let mut meta = kube::api::ObjectMeta {
            annotations: Some(BTreeMap::from([
                (DATA_KEYS.to_owned(), "1".to_owned()),
                ("other".to_owned(), "kept".to_owned()),
            ])),
            ..kube::api::ObjectMeta::default()
        };
        let audit = Audit { keys: 1, bytes: 5 };
        assert!(annotate(&meta, &audit.annotations(), &patch));
        assert_eq!(
            patch.pending(),
            Some(json!({"metadata": {"annotations": {DATA_BYTES: "5"}}}))
        );
        meta.annotations
            .get_or_insert_default()
            .insert(DATA_BYTES.to_owned(), "5".to_owned());
        let unchanged = Patch::detached(ObjectRef {
            uid: "u".into(),
            namespace: None,
            name: "cm".into(),
        });
        assert!(!annotate(&meta, &audit.annotations(), &unchanged));
        assert!(unchanged.is_empty());
    }
}
