//! The custom resource this operator serves: `Backup` objects of `example.com/v1`.
//!
//! Rename it to your own resource: the group, kind and fields here, then the RBAC rules in
//! `deploy/rbac.yaml` (which name the group and the plural), then regenerate `deploy/crd.yaml`
//! with `cargo run --bin crdgen > deploy/crd.yaml` (a test checks it is current).

use kopf_runtime::SchemalessStatus;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What to copy, and where to: the spec of a [`Backup`].
///
/// ```
/// use operator::crd::{Backup, BackupSpec};
///
/// let spec = BackupSpec { bucket: "s3://backups".into(), items: vec!["db".into()] };
/// let backup = Backup::new("nightly", spec);
/// assert_eq!(backup.spec.items.len(), 1);
/// ```
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "example.com",
    version = "v1",
    kind = "Backup",
    plural = "backups",
    shortname = "bk",
    namespaced,
    // Handlers store their results under `status.<handler id>`: `SchemalessStatus` keeps them
    // whole when the API server prunes unknown fields.
    status = "SchemalessStatus",
    printcolumn = r#"{"name": "Bucket", "type": "string", "jsonPath": ".spec.bucket"}"#,
    printcolumn = r#"{"name": "Copied", "type": "integer", "jsonPath": ".status.back_up.items"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    doc = "A backup: what to copy, and where to."
)]
#[serde(rename_all = "camelCase")]
pub struct BackupSpec {
    /// Where the copies go, e.g. `s3://my-bucket/backups`.
    pub bucket: String,
    /// What to copy (table names, paths, ...); empty by default.
    #[serde(default)]
    pub items: Vec<String>,
}

/// The CRD of [`Backup`] as YAML, as `crdgen` prints it and `deploy/crd.yaml` holds it.
///
/// # Errors
/// Only if the CRD does not serialize, which it always does.
///
/// ```
/// let yaml = operator::crd::crd_yaml()?;
/// assert!(yaml.contains("name: backups.example.com"));
/// # Ok::<(), serde_yaml::Error>(())
/// ```
pub fn crd_yaml() -> Result<String, serde_yaml::Error> {
    use kube::CustomResourceExt as _;
    serde_yaml::to_string(&Backup::crd())
}

#[cfg(test)]
mod tests {
    #[test]
    fn deploy_crd_yaml_is_what_crdgen_prints() {
        let committed = include_str!("../deploy/crd.yaml");
        let current = super::crd_yaml().expect("the CRD serializes");
        assert!(
            committed == current,
            "deploy/crd.yaml is stale: run `cargo run --bin crdgen > deploy/crd.yaml`"
        );
    }
}
