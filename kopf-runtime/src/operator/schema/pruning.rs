//! Would the CRD's structural schema prune `status.<handler id>`?

use serde_json::Value;

use super::crd::version_schema;

/// What the API server's pruning does to a handler's result stored under `status.<handler id>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pruning {
    /// Kept as it is.
    Kept,
    /// Dropped with its key.
    Dropped,
    /// The key is kept, everything nested in it is dropped: `{"bucket": "s3://x"}` is stored as
    /// `{}`. This is what `additionalProperties: true` (which schemars emits for a
    /// `#[serde(flatten)]` map) does, even next to `x-kubernetes-preserve-unknown-fields: true`.
    Emptied,
}

/// The schema that applies to one field of an object, as the server's pruning picks it.
enum Field<'a> {
    /// Declared in `properties`: the user's own shape, trusted.
    Declared(&'a Value),
    /// Covered by an `additionalProperties` schema.
    Additional(&'a Value),
    /// Covered by `additionalProperties: true`: a schema that keeps no field of a nested object.
    Nothing,
    /// Not declared, and the object preserves unknown fields: kept without pruning.
    Preserved,
    /// Not declared, and the object does not preserve unknown fields: dropped.
    Dropped,
}

fn field<'a>(object: &'a Value, key: &str) -> Field<'a> {
    if let Some(declared) = object.get("properties").and_then(|p| p.get(key)) {
        return Field::Declared(declared);
    }
    match object.get("additionalProperties") {
        Some(Value::Bool(true)) => Field::Nothing,
        Some(schema @ Value::Object(_)) => Field::Additional(schema),
        _ if preserves(object) => Field::Preserved,
        _ => Field::Dropped,
    }
}

/// Whether an `additionalProperties` schema keeps a result whole: it preserves unknown fields,
/// declares a shape (`properties`), or admits scalars only (nothing nested to prune).
fn keeps_results(schema: &Value) -> bool {
    let scalar = matches!(
        schema.get("type").and_then(Value::as_str),
        Some("string" | "integer" | "number" | "boolean")
    );
    preserves(schema) || scalar || schema.get("properties").is_some()
}

/// What the schema of `version` in the CRD body `crd` does to the results of handler `id`,
/// stored under `status.<id>`. No schema (e.g. a legacy CRD) prunes nothing.
pub(crate) fn pruning(crd: &Value, version: &str, id: &str) -> Pruning {
    let Some(root) = version_schema(crd, version) else {
        return Pruning::Kept;
    };
    let status = match field(root, "status") {
        Field::Preserved => return Pruning::Kept,
        Field::Dropped | Field::Nothing => return Pruning::Dropped,
        Field::Declared(status) | Field::Additional(status) => status,
    };
    match field(status, id) {
        Field::Declared(_) | Field::Preserved => Pruning::Kept,
        Field::Additional(schema) if keeps_results(schema) => Pruning::Kept,
        Field::Additional(_) | Field::Nothing => Pruning::Emptied,
        Field::Dropped => Pruning::Dropped,
    }
}

fn preserves(schema: &Value) -> bool {
    schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd(schema: &Value) -> Value {
        json!({"spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": schema}}]}})
    }

    /// A root schema whose `status` is `status`.
    fn with_status(status: &Value) -> Value {
        crd(&json!({"type": "object", "properties": {"status": status}}))
    }

    const PRESERVE: &str = "x-kubernetes-preserve-unknown-fields";

    #[test]
    fn status_schemas_decide_what_is_kept() {
        use Pruning::{Dropped, Emptied, Kept};
        let table = [
            // SchemalessStatus: the fix.
            (json!({"type": "object", PRESERVE: true}), Kept),
            (
                json!({"type": "object", "nullable": true, PRESERVE: true}),
                Kept,
            ),
            // The quick start's old status: a flattened map (issue 21, section 5).
            (
                json!({"type": "object", PRESERVE: true, "additionalProperties": true}),
                Emptied,
            ),
            (
                json!({"type": "object", "additionalProperties": true}),
                Emptied,
            ),
            (
                json!({"type": "object", "additionalProperties": {}}),
                Emptied,
            ),
            (
                json!({"type": "object", PRESERVE: true, "additionalProperties": {"type": "object"}}),
                Emptied,
            ),
            (
                json!({"type": "object", "additionalProperties": {"type": "array", "items": {}}}),
                Emptied,
            ),
            // additionalProperties that keep a result whole.
            (
                json!({"type": "object", "additionalProperties": {"type": "object", PRESERVE: true}}),
                Kept,
            ),
            (
                json!({"type": "object", "additionalProperties": {"type": "string"}}),
                Kept,
            ),
            (
                json!({"type": "object", "additionalProperties": {"type": "object", "properties": {"n": {}}}}),
                Kept,
            ),
            (
                json!({"type": "object", "additionalProperties": false, PRESERVE: true}),
                Kept,
            ),
            // No way for an undeclared key.
            (json!({"type": "object"}), Dropped),
            (
                json!({"type": "object", "additionalProperties": false}),
                Dropped,
            ),
            (
                json!({"type": "object", "properties": {"phase": {}}}),
                Dropped,
            ),
        ];
        for (status, want) in table {
            assert_eq!(pruning(&with_status(&status), "v1", "t"), want, "{status}");
        }
    }

    #[test]
    fn declared_properties_are_kept_and_others_pruned() {
        let c = with_status(&json!({"type": "object", "properties": {"a": {}}}));
        assert_eq!(pruning(&c, "v1", "a"), Pruning::Kept);
        assert_eq!(pruning(&c, "v1", "b"), Pruning::Dropped);
        // A declared property wins over `additionalProperties: true`.
        let c = with_status(
            &json!({"type": "object", PRESERVE: true, "properties": {"a": {"type": "object", PRESERVE: true}}, "additionalProperties": true}),
        );
        assert_eq!(pruning(&c, "v1", "a"), Pruning::Kept);
        assert_eq!(pruning(&c, "v1", "b"), Pruning::Emptied);
    }

    #[test]
    fn the_root_decides_when_status_is_not_declared() {
        let c = crd(&json!({"type": "object", "properties": {"spec": {}}}));
        assert_eq!(pruning(&c, "v1", "a"), Pruning::Dropped);
        let c = crd(&json!({"type": "object", PRESERVE: true}));
        assert_eq!(pruning(&c, "v1", "a"), Pruning::Kept);
        let c = crd(&json!({"type": "object", "additionalProperties": true}));
        assert_eq!(
            pruning(&c, "v1", "a"),
            Pruning::Dropped,
            "status itself is emptied"
        );
        // A preserving root does not save a declared status that prunes.
        let c = crd(
            &json!({"type": "object", PRESERVE: true, "properties": {"status": {"type": "object"}}}),
        );
        assert_eq!(pruning(&c, "v1", "a"), Pruning::Dropped);
    }

    #[test]
    fn a_version_without_a_schema_prunes_nothing() {
        let c = crd(&json!({"type": "object", "properties": {"status": {"type": "object"}}}));
        assert_eq!(pruning(&c, "v2", "a"), Pruning::Kept);
        assert_eq!(pruning(&json!({}), "v1", "a"), Pruning::Kept);
    }
}
