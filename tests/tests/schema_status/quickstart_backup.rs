use kopf_runtime::SchemalessStatus;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What to copy, and where to. Handlers store their results under `status.<handler id>`:
/// `SchemalessStatus` keeps any key, and everything nested in it, when the API server prunes
/// unknown fields.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
#[kube(group = "example.com", version = "v1", kind = "Backup", namespaced)]
#[kube(status = "SchemalessStatus")]
pub struct BackupSpec {
    pub bucket: String,
    #[serde(default)]
    pub items: Vec<String>,
}
