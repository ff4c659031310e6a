//! # A daemon that owns a child object
//!
//! For every `KopfExample`, the `children` daemon owns one `ConfigMap` named `<parent>-config`
//! in the parent's namespace and keeps it in line with the parent's spec for as long as it runs:
//!
//! ```yaml
//! data:
//!   field: "value"          # spec.field (absent when the spec has none)
//!   items: "a\nb"           # spec.items, one per line (empty when there are none)
//!   duration: "10s"         # spec.duration (absent when the spec has none)
//! ```
//!
//! and mirrors what it does into the parent's `status.children` (with an `error` while reading or
//! applying the child fails):
//!
//! ```json
//! {"configMap": "demo-config", "restored": 2}
//! ```
//!
//! It shows:
//! - **`Children<K>`**, the handler parameter that applies a child: `children.apply("config",
//!   cm)` names it `<parent>-config`, puts it in the parent's namespace, makes the parent its
//!   controller (an owner reference with `controller: true`, `blockOwnerDeletion: true`), gives
//!   it the parent's labels, and writes it by **server-side apply** with the field manager of
//!   [`ChildWrites`] and `force`: the daemon declares the fields it owns, and `force` takes them
//!   back from whoever edited them meanwhile (it is the authority on these keys). Keys it no
//!   longer applies (`duration` after `spec.duration` is removed) are removed by the API server;
//!   keys others add are theirs and are left alone. Its errors name the child and the parent;
//! - the **owner reference**: the daemon never deletes the child. Deleting the parent lets the
//!   Kubernetes garbage collector delete it — also when the operator is down, crashed, or its
//!   finalizer was stripped, which a delete in the daemon could not survive. And a daemon is
//!   stopped for more than deletion (the operator exiting or pausing, its filters no longer
//!   matching): the child's life follows the parent's, not the daemon's. A child written by a
//!   request still in flight when the parent went away names an owner that no longer exists, so
//!   the collector removes it too; with `kubectl delete --cascade=foreground` the parent stays
//!   until the child is gone;
//! - a daemon that waits on **`Live<K>` and its `Stopper` together**: a change of the parent's
//!   spec re-applies the child at once (changes of its metadata or status do not);
//! - **restoring the child** when someone deletes it or edits its data. The daemon checks it
//!   every [`RECHECK_EVERY`] (5 s): one GET, compared with what it applied; an apply (counted in
//!   `status.children.restored`) only when the child is missing or differs. A
//!   `kube::runtime::watcher` on the child would restore it sooner, but a watch per object is one
//!   long-lived request (an open connection) per parent for as long as the daemon runs — with
//!   thousands of parents, thousands of watches on the API server — while a short GET every 5 s
//!   holds nothing open. (At scale, one shared watch of all the children waking the owners
//!   concerned is the better design: that is what a reconcile handler's `owns` does, see
//!   `docs/children.md`.);
//! - a daemon that **never fails**: an error reading or applying the child is logged with the
//!   child and the parent named, written into `status.children.error`, and retried on the next
//!   round; the status is written with `Patch::flush` while the daemon runs;
//! - a prompt stop: every wait and every request is raced against the stop flag, and nothing is
//!   awaited after it, so deleting the parent is not held up by the daemon (a dropped apply is
//!   harmless: applying is idempotent).
//!
//! The restoration count starts from the parent's `status.children.restored`, so it survives an
//! operator restart (a child deleted while the operator was down is re-created, but not counted).
//!
//! ## Run it
//!
//! ```text
//! eval "$(tools/kube-testenv/start.sh)"   # or point KUBECONFIG at your cluster
//! cargo run -p kopf-examples --bin children -- --namespace default --install-crd
//! ```
//!
//! then create a `KopfExample` named `demo` in `default` with `spec.field` set, and read
//! `kubectl get configmap demo-config -o yaml`; change `spec.field` and read it again; delete the
//! ConfigMap, or edit its `data`, and see it back within 5 s (and `status.children.restored`
//! count it); delete `demo` and see the ConfigMap go with it.
//!
//! ## RBAC
//!
//! Besides the rules of `kopf-examples/deploy/rbac.yaml` (the parents), the operator needs:
//!
//! ```yaml
//! - apiGroups: [""]
//!   resources: ["configmaps"]
//!   # get: the periodic check; patch: server-side apply; create: an apply that creates the
//!   # child is also authorized as a create
//!   verbs: ["get", "create", "patch"]
//! ```
//!
//! (and, on a cluster with the `OwnerReferencesPermissionEnforcement` admission plugin, `update`
//! on `kopfexamples/finalizers` in `kopf.dev`, to set `blockOwnerDeletion`). `children` is not in
//! the image that `kopf-examples/deploy/Dockerfile` builds, and `deploy/rbac.yaml` (checked by
//! `tests/tests/rbac.rs`) has no rule for ConfigMaps: to deploy it, add the binary to the image
//! and the rule above to the ClusterRole.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kopf_examples::crd::KopfExample;
use kopf_runtime::engine::ChildWrites;
use kopf_runtime::{ChildError, Children, HandlerResult, Live, Patch, Stopper, daemon};
use serde_json::json;
use tokio::time::Instant;
use tracing::{info, warn};

/// The field manager of the daemon's server-side applies.
pub const FIELD_MANAGER: &str = "kopf-examples-children";
/// How often the child is checked (and put back if it was deleted or edited).
const RECHECK_EVERY: Duration = Duration::from_secs(5);
/// The label the child carries, saying who manages it.
const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", FIELD_MANAGER);

/// The child's name is the parent's with this suffix: `<parent>-config`.
const SUFFIX: &str = "config";

/// The child as the parent's spec wants it: its data. `Children` adds the rest (its name, its
/// namespace, the owner reference, the parent's labels).
#[derive(Debug, Clone, PartialEq)]
struct Desired {
    data: BTreeMap<String, String>,
}

impl Desired {
    /// The child of `parent`.
    fn of(parent: &KopfExample) -> Self {
        let spec = &parent.spec;
        let mut data = BTreeMap::new();
        if let Some(field) = &spec.field {
            data.insert("field".to_owned(), field.clone());
        }
        data.insert("items".to_owned(), spec.items.join("\n"));
        if let Some(duration) = &spec.duration {
            data.insert("duration".to_owned(), duration.clone());
        }
        Self { data }
    }

    /// The manifest to apply: only the fields the daemon owns.
    fn manifest(&self) -> ConfigMap {
        let mut cm = ConfigMap {
            data: Some(self.data.clone()),
            ..ConfigMap::default()
        };
        let managed_by = (MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned());
        cm.metadata.labels = Some(BTreeMap::from([managed_by]));
        cm
    }

    /// Whether `current` has everything the daemon applies: its data keys with their values and
    /// the owner reference `owner`. What others added is not the daemon's business.
    fn is_met_by(&self, current: &ConfigMap, owner: &OwnerReference) -> bool {
        let data = current.data.as_ref();
        let data_ok = self
            .data
            .iter()
            .all(|(key, value)| data.and_then(|d| d.get(key)) == Some(value));
        let owned = (current.metadata.owner_references.iter().flatten()).any(|r| r == owner);
        data_ok && owned
    }
}

/// What a round found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Round {
    /// The child was as applied: nothing to do.
    InLine,
    /// The child was applied because the spec changed (or for the first time).
    Applied,
    /// The child was missing and has been re-created.
    RestoredDeleted,
    /// The child had been edited and has been put back.
    RestoredEdited,
}

/// The daemon's view of its child, and of what it reported in `status.children`.
#[derive(Debug)]
struct Child {
    /// What was last applied successfully (`None` before the first apply).
    applied: Option<Desired>,
    restored: u64,
    error: Option<String>,
    /// Changed since the last flush.
    dirty: bool,
}

impl Child {
    /// A fresh view, counting restorations from those the parent's status already has.
    fn resumed(parent: &KopfExample) -> Self {
        let restored = parent
            .status
            .as_ref()
            .and_then(|s| s.0.get("children"))
            .and_then(|c| c.get("restored"))
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0);
        Self {
            applied: None,
            restored,
            error: None,
            dirty: true,
        }
    }

    /// Makes the child match `want`: applies it when it is new or changed, else checks it and
    /// puts it back if it was deleted or edited.
    async fn converge(
        &mut self,
        children: &Children<KopfExample>,
        want: &Desired,
    ) -> Result<Round, ChildError> {
        let round = if self.applied.as_ref() == Some(want) {
            match children.get::<ConfigMap>(SUFFIX).await? {
                Some(current) if want.is_met_by(&current, &children.owner_reference()) => {
                    return Ok(Round::InLine);
                }
                Some(_) => Round::RestoredEdited,
                None => Round::RestoredDeleted,
            }
        } else {
            Round::Applied
        };
        children.apply(SUFFIX, want.manifest()).await?;
        self.applied = Some(want.clone());
        Ok(round)
    }

    /// One round: converges, logs and records the outcome, and writes the status if it changed.
    async fn reconcile(&mut self, children: &Children<KopfExample>, want: &Desired, patch: &Patch) {
        let child = children.name_for(SUFFIX);
        match self.converge(children, want).await {
            Ok(round) => {
                match round {
                    Round::InLine => {}
                    Round::Applied => info!(%child, "applied the ConfigMap"),
                    Round::RestoredDeleted | Round::RestoredEdited => {
                        self.restored += 1;
                        self.dirty = true;
                        let what = if round == Round::RestoredDeleted {
                            "re-created the deleted ConfigMap"
                        } else {
                            "put back the edited ConfigMap"
                        };
                        info!(%child, restored = self.restored, "{what}");
                    }
                }
                self.set_error(None);
            }
            Err(err) => {
                // The error names the child and the parent.
                warn!(%err, "retrying in {RECHECK_EVERY:?}");
                self.set_error(Some(err.to_string()));
            }
        }
        self.flush(patch, &child).await;
    }

    fn set_error(&mut self, error: Option<String>) {
        if self.error != error {
            self.error = error;
            self.dirty = true;
        }
    }

    /// Puts the summary into the patch as `status.children` (without sending it); a `null`
    /// error removes the one written before (a merge patch).
    fn stage(&self, patch: &Patch, name: &str) {
        patch.status(
            "children",
            json!({ "configMap": name, "restored": self.restored, "error": self.error }),
        );
    }

    /// Writes `status.children` now, if it changed.
    async fn flush(&mut self, patch: &Patch, name: &str) {
        if !self.dirty {
            return;
        }
        self.stage(patch, name);
        match patch.flush().await {
            Ok(()) => self.dirty = false,
            // Stays pending in the patch; the next flush (or the daemon's exit) retries it.
            Err(err) => warn!(%err, "cannot write status.children yet"),
        }
    }
}

/// Owns the parent's `<name>-config` ConfigMap and keeps it in line until stopped.
#[daemon(cancellation_timeout = "10s")]
async fn children(
    mut live: Live<KopfExample>,
    stopper: Stopper,
    patch: Patch,
    children: Children<KopfExample>,
) -> HandlerResult {
    let parent = live.get();
    let mut want = Desired::of(&parent);
    let mut child = Child::resumed(&parent);
    let mut next_round = Instant::now(); // the first round at once
    loop {
        tokio::select! {
            () = stopper.stopped() => break,
            () = tokio::time::sleep_until(next_round) => {}
            latest = live.changed() => {
                // No more versions: the daemon is being stopped.
                let Some(latest) = latest else { break };
                let latest = Desired::of(&latest);
                if latest == want {
                    // Only the metadata or the status changed (e.g. our own status write).
                    continue;
                }
                want = latest; // a new spec: re-apply at once
            }
        }
        tokio::select! {
            () = stopper.stopped() => break,
            () = child.reconcile(&children, &want, &patch) => {}
        }
        next_round = Instant::now() + RECHECK_EVERY;
    }
    // No `.await` after the stop flag: what was not written yet is sent after the return.
    if child.dirty {
        child.stage(&patch, &children.name_for(SUFFIX));
    }
    info!(reason = %stopper.reason(), restored = child.restored, "stopped owning the ConfigMap");
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = kopf_examples::cli::ExampleArgs::from_env();
    if args.install_crd {
        kopf_examples::cli::install_crds().await?;
    }
    // `Children` applies with this field manager.
    let writes = ChildWrites::new(FIELD_MANAGER);
    args.builder().data(writes).run().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kopf_examples::crd::KopfExampleSpec;

    fn parent(spec: KopfExampleSpec) -> KopfExample {
        let mut obj = KopfExample::new("demo", spec);
        obj.metadata.namespace = Some("ns".to_owned());
        obj.metadata.uid = Some("uid-1".to_owned());
        obj
    }

    #[test]
    fn the_child_reflects_the_spec() {
        let spec = KopfExampleSpec {
            field: Some("value".to_owned()),
            items: vec!["a".to_owned(), "b".to_owned()],
            duration: None,
        };
        let want = Desired::of(&parent(spec));
        assert_eq!(
            want.data,
            BTreeMap::from([
                ("field".to_owned(), "value".to_owned()),
                ("items".to_owned(), "a\nb".to_owned()),
            ])
        );
        let manifest = serde_json::to_value(want.manifest()).expect("serializable");
        assert_eq!(manifest["apiVersion"], "v1");
        assert_eq!(manifest["kind"], "ConfigMap");
        assert_eq!(
            manifest["metadata"],
            json!({"labels": {MANAGED_BY.0: MANAGED_BY.1}})
        );
    }

    #[test]
    fn edits_of_owned_keys_and_lost_owners_are_drift_added_keys_are_not() {
        let want = Desired::of(&parent(KopfExampleSpec {
            field: Some("value".to_owned()),
            ..KopfExampleSpec::default()
        }));
        let owner = OwnerReference {
            uid: "uid-1".to_owned(),
            controller: Some(true),
            block_owner_deletion: Some(true),
            ..OwnerReference::default()
        };
        let mut current = want.manifest();
        current.metadata.owner_references = Some(vec![owner.clone()]);
        assert!(want.is_met_by(&current, &owner));
        if let Some(data) = current.data.as_mut() {
            data.insert("someone-else".to_owned(), "theirs".to_owned());
        }
        assert!(want.is_met_by(&current, &owner));
        if let Some(data) = current.data.as_mut() {
            data.insert("field".to_owned(), "tampered".to_owned());
        }
        assert!(!want.is_met_by(&current, &owner));
        let orphaned = want.manifest();
        assert!(!want.is_met_by(&orphaned, &owner));
    }
}
