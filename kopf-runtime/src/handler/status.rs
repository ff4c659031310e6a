//! [`SchemalessStatus`]: a custom resource status that keeps every handler's result.

use std::borrow::Cow;
use std::ops::{Deref, DerefMut};

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A schemaless `status` for a custom resource: any key, with anything nested in it, is kept by
/// the API server. Handlers store their results under `status.<handler id>`.
///
/// Its schema is exactly `{"type": "object", "x-kubernetes-preserve-unknown-fields": true}`.
/// A `#[serde(flatten)]` map with that extension is *not* the same: schemars also emits
/// `additionalProperties: true`, and the API server then keeps the keys but prunes everything
/// inside them (a result `{"bucket": "s3://x"}` is stored as `{}`).
///
/// It dereferences to a [`serde_json::Map`]: read a result with `status.get("summarize")`.
///
/// # Examples
///
/// ```
/// use kopf_runtime::SchemalessStatus;
/// use kube::{CustomResource, CustomResourceExt as _};
/// use schemars::JsonSchema;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, JsonSchema)]
/// #[kube(group = "example.com", version = "v1", kind = "Backup", namespaced)]
/// #[kube(status = "SchemalessStatus")]
/// pub struct BackupSpec {
///     pub bucket: String,
/// }
///
/// let crd = serde_json::to_value(Backup::crd())?;
/// let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
/// let status = &schema["properties"]["status"];
/// assert_eq!(status["x-kubernetes-preserve-unknown-fields"], true);
/// assert!(status.get("additionalProperties").is_none());
///
/// let status: SchemalessStatus =
///     serde_json::from_value(serde_json::json!({"summarize": {"bucket": "s3://x"}}))?;
/// assert_eq!(status.get("summarize"), Some(&serde_json::json!({"bucket": "s3://x"})));
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(transparent)]
pub struct SchemalessStatus(pub Map<String, Value>);

impl JsonSchema for SchemalessStatus {
    fn schema_name() -> Cow<'static, str> {
        "SchemalessStatus".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_generator: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": true,
        })
    }
}

impl Deref for SchemalessStatus {
    type Target = Map<String, Value>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl DerefMut for SchemalessStatus {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl From<Map<String, Value>> for SchemalessStatus {
    fn from(fields: Map<String, Value>) -> Self {
        Self(fields)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_schema_is_exactly_an_object_that_preserves_unknown_fields() {
        let schema =
            schemars::SchemaGenerator::default().into_root_schema_for::<SchemalessStatus>();
        let mut value = schema.to_value();
        if let Some(root) = value.as_object_mut() {
            root.remove("$schema");
            root.remove("title");
        }
        assert_eq!(
            value,
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
        );
    }

    #[test]
    fn nested_values_round_trip() -> Result<(), serde_json::Error> {
        let stored = json!({"summarize": {"bucket": "s3://x", "nested": {"deep": [1, 2]}}});
        let status: SchemalessStatus = serde_json::from_value(stored.clone())?;
        assert_eq!(status["summarize"]["nested"]["deep"][1], 2);
        assert_eq!(serde_json::to_value(&status)?, stored);
        Ok(())
    }
}
