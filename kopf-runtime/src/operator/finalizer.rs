//! Guarded JSON patches that add or remove the operator's finalizer without touching others.

use kube::api::{DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use super::api::Writer;
use crate::core::object::ObjectRef;

/// The finalizer-related state of an object as last seen.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FinalizerView {
    /// `metadata.finalizers` (`None`: the field is absent).
    pub(crate) finalizers: Option<Vec<String>>,
    /// `metadata.deletionTimestamp` is set.
    pub(crate) deleting: bool,
    /// `metadata.resourceVersion`.
    pub(crate) resource_version: Option<String>,
}

impl FinalizerView {
    /// Reads the view from an object body.
    pub(crate) fn from_body(body: &Value) -> Self {
        let meta = body.get("metadata");
        let finalizers = meta
            .and_then(|m| m.get("finalizers"))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            });
        let deleting = meta
            .and_then(|m| m.get("deletionTimestamp"))
            .is_some_and(|t| !t.is_null());
        let resource_version = meta
            .and_then(|m| m.get("resourceVersion"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        Self {
            finalizers,
            deleting,
            resource_version,
        }
    }

    /// Reads the view from a typed dynamic object.
    pub(crate) fn from_object(obj: &DynamicObject) -> Self {
        Self {
            finalizers: obj.metadata.finalizers.clone(),
            deleting: obj.metadata.deletion_timestamp.is_some(),
            resource_version: obj.metadata.resource_version.clone(),
        }
    }

    /// Whether `name` is among the finalizers.
    pub(crate) fn has(&self, name: &str) -> bool {
        self.finalizers
            .as_deref()
            .is_some_and(|f| f.iter().any(|x| x == name))
    }

    /// Whether `self` is not older than `other` (resource versions compared as numbers when both
    /// are numbers, as the API server issues them; otherwise assumed newer).
    pub(crate) fn is_newer_or_same(&self, other: &Self) -> bool {
        match (self.rv_number(), other.rv_number()) {
            (Some(a), Some(b)) => a >= b,
            _ => true,
        }
    }

    fn rv_number(&self) -> Option<u64> {
        self.resource_version.as_deref()?.parse().ok()
    }
}

/// The JSON patch that makes the finalizer `name` present (`hold`) or absent, guarded by the
/// object's UID and by a `test` of exactly what it changes, so that concurrent changes by other
/// controllers make it fail (422) instead of being overwritten. `None`: nothing to change (or
/// adding is not allowed because the object is being deleted).
pub(crate) fn finalizer_patch(
    uid: &str,
    view: &FinalizerView,
    name: &str,
    hold: bool,
) -> Option<Value> {
    let uid_test = json!({"op": "test", "path": "/metadata/uid", "value": uid});
    match (hold, view.has(name)) {
        (true, false) if !view.deleting => Some(match &view.finalizers {
            None => json!([
                uid_test,
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": [name]},
            ]),
            Some(list) => json!([
                uid_test,
                {"op": "test", "path": "/metadata/finalizers", "value": list},
                {"op": "add", "path": "/metadata/finalizers/-", "value": name},
            ]),
        }),
        (false, true) => {
            let list = view.finalizers.as_deref().unwrap_or_default();
            let index = list.iter().position(|f| f == name)?;
            let path = format!("/metadata/finalizers/{index}");
            Some(json!([
                uid_test,
                {"op": "test", "path": path, "value": name},
                {"op": "remove", "path": path},
            ]))
        }
        _ => None,
    }
}

/// Sends one finalizer JSON patch (no retries: the caller re-reads and recomputes).
///
/// # Cancellation safety
/// Dropping the future may or may not leave the patch applied.
pub(crate) async fn send(
    writer: &Writer,
    object: &ObjectRef,
    patch: Value,
) -> Result<DynamicObject, kube::Error> {
    let patch: json_patch::Patch =
        serde_json::from_value(patch).map_err(kube::Error::SerdeError)?;
    let params = PatchParams {
        field_manager: Some(writer.field_manager.to_string()),
        ..Default::default()
    };
    let _permit = writer.writes.acquire().await;
    // Boxed after the permit: the request future is large (several KB), and an object's job
    // waiting for a write slot (thousands at start-up) should not hold one.
    Box::pin(
        writer
            .api_for(object)
            .patch(&object.name, &params, &Patch::Json::<()>(patch)),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(finalizers: Option<&[&str]>, deleting: bool) -> FinalizerView {
        FinalizerView {
            finalizers: finalizers.map(|f| f.iter().map(|s| (*s).to_owned()).collect()),
            deleting,
            resource_version: None,
        }
    }

    #[test]
    fn adds_to_an_absent_list_with_a_null_test() {
        let p = finalizer_patch("u", &view(None, false), "kopf.dev/finalizer", true).unwrap();
        assert_eq!(
            p[1],
            json!({"op": "test", "path": "/metadata/finalizers", "value": null})
        );
        assert_eq!(p[2]["value"], json!(["kopf.dev/finalizer"]));
    }

    #[test]
    fn appends_to_an_existing_list_after_testing_it() {
        let p = finalizer_patch("u", &view(Some(&["other"]), false), "mine", true).unwrap();
        assert_eq!(
            p[0],
            json!({"op": "test", "path": "/metadata/uid", "value": "u"})
        );
        assert_eq!(p[1]["value"], json!(["other"]));
        assert_eq!(
            p[2],
            json!({"op": "add", "path": "/metadata/finalizers/-", "value": "mine"})
        );
    }

    #[test]
    fn removes_only_its_own_entry() {
        let p =
            finalizer_patch("u", &view(Some(&["a", "mine", "b"]), true), "mine", false).unwrap();
        assert_eq!(
            p[1],
            json!({"op": "test", "path": "/metadata/finalizers/1", "value": "mine"})
        );
        assert_eq!(
            p[2],
            json!({"op": "remove", "path": "/metadata/finalizers/1"})
        );
    }

    #[test]
    fn never_adds_while_deleting_and_skips_no_ops() {
        assert_eq!(finalizer_patch("u", &view(None, true), "mine", true), None);
        assert_eq!(
            finalizer_patch("u", &view(Some(&["mine"]), false), "mine", true),
            None
        );
        assert_eq!(
            finalizer_patch("u", &view(Some(&["a"]), false), "mine", false),
            None
        );
    }

    #[test]
    fn reads_the_view_from_a_body() {
        let v = FinalizerView::from_body(&json!({"metadata": {
            "finalizers": ["x"], "deletionTimestamp": "2026-01-01T00:00:00Z", "resourceVersion": "12"}}));
        assert_eq!(
            v,
            FinalizerView {
                finalizers: Some(vec!["x".into()]),
                deleting: true,
                resource_version: Some("12".into())
            }
        );
        let older = FinalizerView {
            resource_version: Some("9".into()),
            ..v.clone()
        };
        assert!(v.is_newer_or_same(&older) && !older.is_newer_or_same(&v));
    }
}
