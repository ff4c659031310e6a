//! Does a watched field's schema admit values the handler's `FieldChange<T>` cannot decode?
//!
//! `#[on_update(field = "spec.size")]` with `FieldChange<u64>` compiles whatever the CRD says;
//! if the schema declares `spec.size` a string, every update of it fails to decode at run time.
//! The check decodes one sample of each JSON type the schema admits at that path into `T`, and
//! reports a refusal only when the decoder says the *type* is wrong ("invalid type: …"): a
//! refused value (an unknown enum variant, a missing struct field, a bad date) depends on the
//! data, not the schema, and is not reported.

use serde_json::{Value, json};

use super::crd::version_schema;
use crate::core::spec::FieldType;

/// A JSON type the schema admits at a field, and a type that decodes it.
struct Admitted {
    /// How a message names it ("a string").
    what: &'static str,
    /// A value of that type the schema admits.
    sample: Value,
    /// A Rust type that decodes every such value.
    fits: &'static str,
}

/// The schema at `segments` in `version` of `crd`: through `properties`, or through an
/// `additionalProperties` schema (map values). `None` when the path is not declared (a
/// schemaless or preserved part: nothing to check against).
fn schema_at<'a>(crd: &'a Value, version: &str, segments: &[&str]) -> Option<&'a Value> {
    let mut schema = version_schema(crd, version)?;
    for segment in segments {
        schema = match schema.get("properties").and_then(|p| p.get(*segment)) {
            Some(declared) => declared,
            None => schema
                .get("additionalProperties")
                .filter(|a| a.is_object())?,
        };
    }
    Some(schema)
}

/// The JSON types `schema` admits (not `null`: a `FieldChange` gives `None` for it), each with a
/// sample. Empty when it admits anything.
fn admitted(schema: &Value) -> Vec<Admitted> {
    let flag = |name: &str| schema.get(name).and_then(Value::as_bool) == Some(true);
    if flag("x-kubernetes-int-or-string") {
        return vec![
            Admitted {
                what: "an integer",
                sample: json!(1),
                fits: "k8s_openapi::apimachinery::pkg::util::intstr::IntOrString",
            },
            Admitted {
                what: "a string",
                sample: json!("1"),
                fits: "k8s_openapi::apimachinery::pkg::util::intstr::IntOrString",
            },
        ];
    }
    let (what, sample, fits) = match schema.get("type").and_then(Value::as_str) {
        Some("string") => ("a string", string_sample(schema), "String"),
        Some("integer") => ("an integer", json!(1), "i64"),
        Some("number") => ("a number", json!(1.5), "f64"),
        Some("boolean") => ("a boolean", json!(true), "bool"),
        Some("object") => ("an object", json!({}), "serde_json::Value or a struct"),
        Some("array") => ("an array", json!([]), "Vec<_>"),
        _ => return Vec::new(),
    };
    vec![Admitted { what, sample, fits }]
}

/// A string the schema admits: its first `enum` value, or one in its `format`.
fn string_sample(schema: &Value) -> Value {
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    match schema.get("format").and_then(Value::as_str) {
        Some("date-time") => json!("2026-01-01T00:00:00Z"),
        Some("date") => json!("2026-01-01"),
        _ => json!("x"),
    }
}

/// Why a handler's `FieldChange<T>` does not fit the schema of its field.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Misfit {
    /// The JSON type the schema admits and `T` refuses ("a string").
    pub(crate) admitted: &'static str,
    /// The decoder's message for the sample.
    pub(crate) error: String,
    /// A type that would fit.
    pub(crate) fits: &'static str,
}

/// Whether the schema of the field at `segments` in `version` of `crd` admits a JSON type that
/// `value_type` cannot decode. `None` when it fits, or when the schema says nothing of the field.
pub(crate) fn misfit(
    crd: &Value,
    version: &str,
    segments: &[&str],
    value_type: &FieldType,
) -> Option<Misfit> {
    let schema = schema_at(crd, version, segments)?;
    admitted(schema).into_iter().find_map(|admitted| {
        let error = (value_type.decode)(&admitted.sample).err()?;
        error.starts_with("invalid type:").then_some(Misfit {
            admitted: admitted.what,
            error,
            fits: admitted.fits,
        })
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use serde::Deserialize;

    use super::*;
    use crate::handler::decode_probe;

    fn crd(spec: &Value) -> Value {
        let root = json!({"type": "object", "properties": {"spec": spec}});
        json!({"spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": root}}]}})
    }

    /// A schema for `spec.f`.
    fn field(schema: &Value) -> Value {
        crd(&json!({"type": "object", "properties": {"f": schema}}))
    }

    fn of<T: serde::de::DeserializeOwned>(name: &'static str) -> FieldType {
        FieldType {
            name,
            decode: decode_probe::<T>,
        }
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    enum Mode {
        Fast,
        Slow,
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Limits {
        cpu: String,
    }

    #[test]
    fn a_type_is_reported_only_when_the_schema_admits_a_json_type_it_refuses() {
        let string = json!({"type": "string"});
        let table: [(Value, FieldType, Option<&str>); 16] = [
            // The case, and its fix.
            (string.clone(), of::<u64>("u64"), Some("a string")),
            (string.clone(), of::<String>("String"), None),
            (
                string.clone(),
                of::<Option<u64>>("Option<u64>"),
                Some("a string"),
            ),
            (json!({"type": "integer"}), of::<u64>("u64"), None),
            (json!({"type": "integer"}), of::<f64>("f64"), None),
            (
                json!({"type": "integer"}),
                of::<String>("String"),
                Some("an integer"),
            ),
            (
                json!({"type": "number"}),
                of::<u64>("u64"),
                Some("a number"),
            ),
            (
                json!({"type": "boolean"}),
                of::<String>("String"),
                Some("a boolean"),
            ),
            (
                json!({"type": "array", "items": {}}),
                of::<String>("String"),
                Some("an array"),
            ),
            (
                json!({"type": "object"}),
                of::<BTreeMap<String, String>>("BTreeMap"),
                None,
            ),
            // A struct missing fields in the sample refuses the value, not the type.
            (json!({"type": "object"}), of::<Limits>("Limits"), None),
            (
                json!({"type": "object"}),
                of::<u64>("u64"),
                Some("an object"),
            ),
            // A value the decoder refuses depends on the data: not reported.
            (
                json!({"type": "string", "enum": ["Fast"]}),
                of::<Mode>("Mode"),
                None,
            ),
            (json!({"type": "string"}), of::<Mode>("Mode"), None),
            (
                json!({"type": "string", "format": "date-time"}),
                of::<Time>("Time"),
                None,
            ),
            // Anything goes: nothing to check.
            (
                json!({"x-kubernetes-preserve-unknown-fields": true}),
                of::<u64>("u64"),
                None,
            ),
        ];
        for (schema, value_type, want) in table {
            let got = misfit(&field(&schema), "v1", &["spec", "f"], &value_type);
            assert_eq!(
                got.as_ref().map(|m| m.admitted),
                want,
                "{} against {schema}: {got:?}",
                value_type.name
            );
        }
    }

    #[test]
    fn int_or_string_needs_a_type_that_takes_both() {
        let crd = field(&json!({"x-kubernetes-int-or-string": true}));
        let misfit_of = |t: FieldType| misfit(&crd, "v1", &["spec", "f"], &t);
        assert_eq!(
            misfit_of(of::<u64>("u64")).map(|m| m.admitted),
            Some("a string")
        );
        assert_eq!(
            misfit_of(of::<String>("String")).map(|m| m.admitted),
            Some("an integer")
        );
        let fits = misfit_of(of::<String>("String")).map(|m| m.fits);
        assert!(fits.is_some_and(|f| f.ends_with("IntOrString")), "{fits:?}");
        assert_eq!(misfit_of(of::<IntOrString>("IntOrString")), None);
    }

    #[test]
    fn the_path_goes_through_properties_and_map_values() {
        let crd = crd(&json!({"type": "object", "properties": {
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        }}));
        let u64_type = of::<u64>("u64");
        let at = |path: &[&str]| misfit(&crd, "v1", path, &u64_type).map(|m| m.admitted);
        assert_eq!(at(&["spec", "labels", "app"]), Some("a string"));
        assert_eq!(at(&["spec", "labels"]), Some("an object"));
        // Undeclared, preserved, another version, no schema: nothing to say.
        assert_eq!(at(&["spec", "free", "n"]), None);
        assert_eq!(at(&["spec", "missing"]), None);
        assert_eq!(at(&["metadata", "name"]), None);
        let other = misfit(&crd, "v2", &["spec", "labels"], &u64_type);
        assert_eq!(other, None);
        assert_eq!(misfit(&json!({}), "v1", &["spec"], &u64_type), None);
    }

    #[test]
    fn the_misfit_carries_the_decoders_message_and_a_type_that_fits() {
        let m = misfit(
            &field(&json!({"type": "string"})),
            "v1",
            &["spec", "f"],
            &of::<u64>("u64"),
        );
        let m = m.expect("a string does not decode into u64");
        assert!(m.error.contains("expected u64"), "{}", m.error);
        assert_eq!(m.fits, "String");
    }
}
