//! Reading a CRD body (as JSON): the structural schema of one of its versions.

use serde_json::Value;

/// The schema of `version` in the CRD body `crd`, if it has one.
pub(super) fn version_schema<'a>(crd: &'a Value, version: &str) -> Option<&'a Value> {
    crd.pointer("/spec/versions")
        .and_then(Value::as_array)
        .and_then(|vs| {
            vs.iter()
                .find(|v| v.get("name").and_then(Value::as_str) == Some(version))
        })
        .and_then(|v| v.pointer("/schema/openAPIV3Schema"))
}
