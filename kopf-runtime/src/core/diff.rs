//! What a change handler learns about the change it is called for: the object as last handled
//! (when this process still has it), the watched field's old and new values, and the diff of
//! the object's essence. Kubernetes-free: it only reads JSON bodies.
//!
//! The diff is of the objects' essences in the diff view ([`View::Diff`]): every top-level field
//! except `apiVersion`, `kind`, `metadata` and `status`, plus `metadata.labels` and the
//! annotations that are neither the operator's own, nor any kopf-rs operator's bookkeeping, nor
//! kopf's or kubectl's copies of the object. A status update, a `resourceVersion` bump or the
//! operator's own writes are not changes.

use std::sync::Arc;

use serde_json::Value;

use super::essence::{Owner, View, essence};
use super::object::ObjectState;

/// The change an invocation of a change handler is for (`Invocation::change`).
///
/// ```
/// use kopf_runtime::engine::ChangeContext;
/// let context = ChangeContext::default();
/// assert!(context.old.is_none() && context.field.is_none());
/// ```
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ChangeContext {
    /// The object as this process last handled it: `None` for a create, a resume, and after a
    /// restart or a handover (the stored diff base keeps a digest, not the object).
    pub old: Option<Arc<ObjectState>>,
    /// The watched field's values, for `#[on_update(field = "...")]`.
    pub field: Option<FieldValues>,
    /// The operator's annotation prefix: its annotations are not in the [`Diff`] (empty: only
    /// the bookkeeping recognised by its shape is left out).
    pub(crate) own_prefix: String,
}

impl ChangeContext {
    /// A context with the old object and the watched field's values.
    ///
    /// ```
    /// let context = kopf_runtime::engine::ChangeContext::new(None, None);
    /// assert!(context.old.is_none());
    /// ```
    #[must_use]
    pub fn new(old: Option<Arc<ObjectState>>, field: Option<FieldValues>) -> Self {
        Self {
            old,
            field,
            own_prefix: String::new(),
        }
    }

    /// The context for an operator whose annotations are under `prefix`.
    #[must_use]
    pub(crate) fn owned_by(mut self, prefix: &str) -> Self {
        prefix.clone_into(&mut self.own_prefix);
        self
    }

    /// The diff of the change: `new` against the old object, if known.
    #[must_use]
    pub(crate) fn diff(&self, new: &Value) -> Diff {
        match &self.old {
            Some(old) => Diff::of_essences(&old.body_value(), new, &self.own_prefix),
            None => Diff::unknown(),
        }
    }
}

/// A watched field's value before and after the change (`None`: absent or `null`).
///
/// ```
/// use kopf_runtime::engine::FieldValues;
/// let values = FieldValues { old: Some(1.into()), new: Some(2.into()), old_elided: false };
/// assert_ne!(values.old, values.new);
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FieldValues {
    /// The value when the object was last handled.
    pub old: Option<Value>,
    /// The value now.
    pub new: Option<Value>,
    /// The old value was too large to keep (over 16 KiB): `old` is `None` though it was set.
    pub old_elided: bool,
}

/// What happened at one path of the essence.
///
/// ```
/// assert_ne!(kopf_runtime::DiffOp::Add, kopf_runtime::DiffOp::Remove);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiffOp {
    /// The path was absent and is set now.
    Add,
    /// The path had another value.
    Change,
    /// The path was set and is absent now.
    Remove,
}

/// One difference: the path (object keys; array elements are compared whole), its old value
/// and its new one.
///
/// ```
/// use kopf_runtime::{Diff, DiffOp};
/// let diff = Diff::between(&serde_json::json!({"spec": {"a": 1}}), &serde_json::json!({"spec": {"a": 2}}));
/// let item = &diff.items()[0];
/// assert_eq!((item.op, item.path.as_slice()), (DiffOp::Change, &["spec".to_owned(), "a".to_owned()][..]));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct DiffItem {
    /// Added, changed or removed.
    pub op: DiffOp,
    /// The keys from the object's root.
    pub path: Vec<String>,
    /// The value before (`None` for an addition).
    pub old: Option<Value>,
    /// The value after (`None` for a removal).
    pub new: Option<Value>,
}

/// The change of an object's essence, as kopf's `diff`: the smallest paths whose values
/// differ, in key order. Injected into `#[on_update]` handlers; it is known only when this
/// process saw the object as last handled (see [`Diff::is_known`]).
///
/// ```
/// use kopf_runtime::Diff;
/// let old = serde_json::json!({"metadata": {"resourceVersion": "1"}, "spec": {"size": 1}});
/// let new = serde_json::json!({"metadata": {"resourceVersion": "2"}, "spec": {"size": 2}, "status": {"x": 1}});
/// let diff = Diff::between(&old, &new);
/// assert_eq!(diff.items().len(), 1, "neither metadata.resourceVersion nor status counts");
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Diff {
    items: Vec<DiffItem>,
    known: bool,
}

impl Diff {
    /// The diff of two objects' essences (see the module docs). With no operator known, its
    /// annotations are left out when they are bookkeeping by their shape (`….last-handled`,
    /// `….progress`, `….cron`); a handler's `Diff` also leaves out the rest of its own.
    ///
    /// ```
    /// let same = serde_json::json!({"spec": {"a": [1, 2]}});
    /// assert!(kopf_runtime::Diff::between(&same, &same).items().is_empty());
    /// ```
    #[must_use]
    pub fn between(old: &Value, new: &Value) -> Self {
        Self::of_essences(old, new, "")
    }

    /// The diff of two objects' essences for the operator whose annotations are under
    /// `own_prefix`.
    #[must_use]
    pub(crate) fn of_essences(old: &Value, new: &Value, own_prefix: &str) -> Self {
        let owner = Owner {
            prefix: own_prefix,
            finalizer: "",
        };
        let (old, new) = (
            essence(old, View::Diff, owner),
            essence(new, View::Diff, owner),
        );
        let mut items = Vec::new();
        walk(&mut Vec::new(), Some(&old), Some(&new), &mut items);
        Self { items, known: true }
    }

    /// A diff this process cannot tell (it did not see the object as last handled: after a
    /// restart or a handover).
    ///
    /// ```
    /// assert!(!kopf_runtime::Diff::unknown().is_known());
    /// ```
    #[must_use]
    pub fn unknown() -> Self {
        Self::default()
    }

    /// The differences, in key order.
    #[must_use]
    pub fn items(&self) -> &[DiffItem] {
        &self.items
    }

    /// Whether the diff is known: `false` when the old object was not available (the change
    /// is real, but its details are not; a `field` handler's [`FieldChange`](crate::FieldChange)
    /// is always known).
    #[must_use]
    pub fn is_known(&self) -> bool {
        self.known
    }
}

/// Collects the differences under `path`: objects are compared key by key, anything else whole.
fn walk(path: &mut Vec<String>, old: Option<&Value>, new: Option<&Value>, out: &mut Vec<DiffItem>) {
    let (old, new) = (old.filter(|v| !v.is_null()), new.filter(|v| !v.is_null()));
    match (old, new) {
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                path.push(key.clone());
                walk(path, a.get(key), b.get(key), out);
                path.pop();
            }
        }
        (None, None) => {}
        (a, b) if a == b => {}
        (a, b) => out.push(DiffItem {
            op: match (a, b) {
                (None, _) => DiffOp::Add,
                (_, None) => DiffOp::Remove,
                _ => DiffOp::Change,
            },
            path: path.clone(),
            old: a.cloned(),
            new: b.cloned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{Diff, DiffOp};

    fn ops(old: &serde_json::Value, new: &serde_json::Value) -> Vec<(DiffOp, String)> {
        let diff = Diff::between(old, new);
        diff.items()
            .iter()
            .map(|i| (i.op, i.path.join(".")))
            .collect()
    }

    #[test]
    fn additions_changes_and_removals_at_the_smallest_paths() {
        let old = json!({"spec": {"a": 1, "b": {"c": "x"}, "gone": true, "list": [1, 2]}});
        let new = json!({"spec": {"a": 2, "b": {"c": "x", "d": "y"}, "list": [1, 3]}});
        assert_eq!(
            ops(&old, &new),
            [
                (DiffOp::Change, "spec.a".to_owned()),
                (DiffOp::Add, "spec.b.d".to_owned()),
                (DiffOp::Remove, "spec.gone".to_owned()),
                (DiffOp::Change, "spec.list".to_owned()),
            ]
        );
    }

    #[test]
    fn metadata_counts_only_for_labels_and_annotations_and_status_never() {
        let old = json!({"metadata": {"name": "a", "resourceVersion": "1", "labels": {"x": "1"}},
            "status": {"n": 1}});
        let new = json!({"metadata": {"name": "a", "resourceVersion": "9", "labels": {"x": "2"},
            "generation": 3}, "status": {"n": 2}});
        assert_eq!(
            ops(&old, &new),
            [(DiffOp::Change, "metadata.labels.x".to_owned())]
        );
    }

    /// kopf's rule: the diff is of the essence, which holds no bookkeeping of the operator (nor
    /// of kopf) and no `kubectl` copy of the object, so `kubectl apply` of one spec field and
    /// the operator's own writes name only that field.
    #[test]
    fn bookkeeping_and_last_applied_annotations_are_not_in_the_diff() {
        let applied = "kubectl.kubernetes.io/last-applied-configuration";
        let old = json!({"metadata": {"annotations": {
            "team": "blue",
            applied: r#"{"spec":{"size":1}}"#,
            "kopf.dev/op.last-handled": r#"{"d":"0000000000000001","u":"u1","v":1}"#,
        }}, "spec": {"size": 1}});
        let new = json!({"metadata": {"annotations": {
            "team": "blue",
            applied: r#"{"spec":{"size":2}}"#,
            "kopf.dev/op.last-handled": r#"{"d":"0000000000000002","u":"u1","v":1}"#,
            "kopf.dev/op.progress": r#"{"c":"update","h":{},"u":"u1","v":1}"#,
            "kopf.dev/op.tick.cron": "2026-06-01T10:00:00Z",
            "kopf.zalando.org/last-handled-configuration": "{}",
        }}, "spec": {"size": 2}});
        assert_eq!(ops(&old, &new), [(DiffOp::Change, "spec.size".to_owned())]);
        let bare = json!({"spec": {"size": 1}});
        let booked = json!({"metadata": {"annotations": {applied: "{}"}}, "spec": {"size": 2}});
        assert_eq!(
            ops(&bare, &booked),
            [(DiffOp::Change, "spec.size".to_owned())]
        );
    }

    #[test]
    fn every_annotation_under_the_operators_prefix_is_left_out_of_its_diff() {
        let old = json!({"metadata": {"annotations": {"kopf.dev/x": "1", "team": "blue"}}});
        let new = json!({"metadata": {"annotations": {"kopf.dev/x": "2", "team": "red"}}});
        let diff = Diff::of_essences(&old, &new, "kopf.dev/");
        let paths: Vec<_> = diff.items().iter().map(|i| i.path.join(".")).collect();
        assert_eq!(paths, ["metadata.annotations.team"]);
        assert_eq!(
            Diff::between(&old, &new).items().len(),
            2,
            "no operator known"
        );
        let context = super::ChangeContext::new(None, None).owned_by("kopf.dev/");
        assert!(!context.diff(&new).is_known());
    }

    #[test]
    fn null_is_absent_and_a_type_change_is_a_change() {
        assert!(ops(&json!({"spec": {"a": null}}), &json!({"spec": {}})).is_empty());
        assert_eq!(
            ops(
                &json!({"spec": {"a": {"b": 1}}}),
                &json!({"spec": {"a": 5}})
            ),
            [(DiffOp::Change, "spec.a".to_owned())]
        );
        assert!(Diff::between(&json!(1), &json!(2)).is_known());
    }
}
