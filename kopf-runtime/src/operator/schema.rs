//! A start-up check: would the CRD's structural schema prune `status.<handler id>`?

use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use serde_json::Value;

use crate::core::resource::ResourceInfo;

/// The handler ids whose results would be pruned from `status` by the schema of `version` in the
/// CRD body `crd`. An id is kept when `status` (or the root) preserves unknown fields, or when
/// `status` declares a property of that name.
pub(crate) fn pruned_ids<'a>(crd: &Value, version: &str, ids: &[&'a str]) -> Vec<&'a str> {
    let Some(schema) = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .and_then(|vs| {
            vs.iter()
                .find(|v| v.get("name").and_then(Value::as_str) == Some(version))
        })
        .and_then(|v| v.pointer("/schema/openAPIV3Schema"))
    else {
        return Vec::new(); // no schema here (e.g. a legacy CRD): nothing is pruned
    };
    if preserves(schema) {
        return Vec::new();
    }
    let Some(status) = schema.pointer("/properties/status") else {
        return ids.to_vec();
    };
    if preserves(status) {
        return Vec::new();
    }
    ids.iter()
        .copied()
        .filter(|id| {
            status
                .pointer(&format!("/properties/{}", escape(id)))
                .is_none()
        })
        .collect()
}

fn preserves(schema: &Value) -> bool {
    schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true)
}

fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// Fetches the CRD of `info` (if it is one) and warns once about each handler id whose results
/// the schema would prune.
///
/// # Cancellation safety
/// Cancel safe: it only reads.
pub(crate) async fn warn_if_pruned(client: &Client, info: &ResourceInfo, ids: &[&str]) {
    if info.group.is_empty() || ids.is_empty() {
        return;
    }
    let crds = ApiResource {
        group: "apiextensions.k8s.io".into(),
        version: "v1".into(),
        api_version: "apiextensions.k8s.io/v1".into(),
        kind: "CustomResourceDefinition".into(),
        plural: "customresourcedefinitions".into(),
    };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &crds);
    let name = format!("{}.{}", info.plural, info.group);
    let crd = match api.get_opt(&name).await {
        Ok(Some(crd)) => crd,
        Ok(None) => return, // a built-in or aggregated resource: no CRD schema to check
        Err(err) => {
            tracing::debug!(crd = %name, error = %err, "cannot read the CRD to check its schema");
            return;
        }
    };
    let Ok(body) = serde_json::to_value(&crd) else {
        return;
    };
    for id in pruned_ids(&body, &info.version, ids) {
        tracing::warn!(
            resource = %info, handler = id,
            "the CRD's schema would prune `status.{id}`: results of handler `{id}` will be dropped by \
             the API server; add `x-kubernetes-preserve-unknown-fields: true` to `status` or declare \
             `status.{id}` in the schema"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd(schema: &Value) -> Value {
        json!({"spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": schema}}]}})
    }

    #[test]
    fn preserved_status_keeps_everything() {
        let c = crd(
            &json!({"type": "object", "properties": {"status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}),
        );
        assert!(pruned_ids(&c, "v1", &["t"]).is_empty());
    }

    #[test]
    fn declared_properties_are_kept_and_others_pruned() {
        let c = crd(
            &json!({"type": "object", "properties": {"status": {"type": "object", "properties": {"a": {}}}}}),
        );
        assert_eq!(pruned_ids(&c, "v1", &["a", "b"]), vec!["b"]);
    }

    #[test]
    fn missing_status_prunes_all_unless_root_preserves() {
        let c = crd(&json!({"type": "object", "properties": {"spec": {}}}));
        assert_eq!(pruned_ids(&c, "v1", &["a"]), vec!["a"]);
        let c = crd(&json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}));
        assert!(pruned_ids(&c, "v1", &["a"]).is_empty());
        assert!(pruned_ids(&c, "v2", &["a"]).is_empty());
    }
}
