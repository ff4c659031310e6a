use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
#[kube(group = "example.com", version = "v1", kind = "Backup", namespaced)]
#[kube(status = "BackupStatus")]
pub struct BackupSpec {
    pub bucket: String,
    #[serde(default)]
    pub every: Option<String>,
}

/// Handlers store their results under `status.<handler id>`: keep the status schemaless
/// (or declare those fields), or the API server prunes them.
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct BackupStatus {
    #[serde(flatten)]
    pub fields: std::collections::BTreeMap<String, serde_json::Value>,
}
