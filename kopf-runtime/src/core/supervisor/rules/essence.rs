//! The essence of an object: what counts as a change for `idle` timers.
//!
//! The essence is the body without `status` and without system metadata (`resourceVersion`,
//! `generation`, `managedFields`, timestamps, `uid`, `selfLink`), without the framework's own
//! finalizer, without annotations under the framework's prefix and without any kopf-rs
//! operator's bookkeeping under another prefix (`core::keys::is_bookkeeping`). So a timer's
//! own status writes, result stores and the bookkeeping of this or another operator never reset
//! `idle`. Only a fingerprint
//! (a 64-bit hash with sorted keys) is kept per object.

use std::hash::{DefaultHasher, Hash, Hasher};

use serde_json::{Map, Value};

use crate::core::keys::is_bookkeeping;

/// Metadata fields the API server or the framework changes without any user intent.
const SYSTEM_METADATA: [&str; 8] = [
    "resourceVersion",
    "generation",
    "managedFields",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "uid",
    "selfLink",
];

/// The essence of `body` (see the module docs).
pub(crate) fn essence(body: &Value, finalizer: &str, annotation_prefix: &str) -> Value {
    let mut out = body.clone();
    let Some(map) = out.as_object_mut() else {
        return out;
    };
    map.remove("status");
    if let Some(Value::Object(meta)) = map.get_mut("metadata") {
        strip_metadata(meta, finalizer, annotation_prefix);
    }
    out
}

fn strip_metadata(meta: &mut Map<String, Value>, finalizer: &str, annotation_prefix: &str) {
    for key in SYSTEM_METADATA {
        meta.remove(key);
    }
    if let Some(Value::Array(finalizers)) = meta.get_mut("finalizers") {
        finalizers.retain(|f| f.as_str() != Some(finalizer));
        if finalizers.is_empty() {
            meta.remove("finalizers");
        }
    }
    if let Some(Value::Object(annotations)) = meta.get_mut("annotations") {
        annotations.retain(|key, value| {
            (annotation_prefix.is_empty() || !key.starts_with(annotation_prefix))
                && !is_bookkeeping(key, value)
        });
        if annotations.is_empty() {
            meta.remove("annotations");
        }
    }
}

/// A fingerprint of the essence of `body`.
pub(crate) fn fingerprint(body: &Value, finalizer: &str, annotation_prefix: &str) -> u64 {
    hash_value(&essence(body, finalizer, annotation_prefix))
}

/// A hash of a JSON value that does not depend on the order of object keys.
pub(crate) fn hash_value(value: &Value) -> u64 {
    let mut hasher = DefaultHasher::new();
    feed(value, &mut hasher);
    hasher.finish()
}

fn feed(value: &Value, h: &mut DefaultHasher) {
    match value {
        Value::Null => 0_u8.hash(h),
        Value::Bool(b) => (1_u8, b).hash(h),
        Value::Number(n) => (2_u8, n.to_string()).hash(h),
        Value::String(s) => (3_u8, s).hash(h),
        Value::Array(items) => {
            (4_u8, items.len()).hash(h);
            items.iter().for_each(|v| feed(v, h));
        }
        Value::Object(map) => {
            (5_u8, map.len()).hash(h);
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            for key in keys {
                key.hash(h);
                feed(&map[key.as_str()], h);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const FIN: &str = "kopf.dev/finalizer";
    const PREFIX: &str = "kopf.dev/";

    fn base() -> Value {
        json!({
            "apiVersion": "kopf.dev/v1", "kind": "KopfExample",
            "metadata": {
                "name": "a", "namespace": "ns", "uid": "u1", "resourceVersion": "1",
                "generation": 1, "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"app": "x"},
            },
            "spec": {"size": 1},
        })
    }

    fn fp(v: &Value) -> u64 {
        fingerprint(v, FIN, PREFIX)
    }

    #[test]
    fn status_and_system_metadata_are_not_part_of_the_essence() {
        let mut changed = base();
        changed["status"] = json!({"timer": {"count": 3}});
        let meta = &mut changed["metadata"];
        meta["resourceVersion"] = json!("2");
        meta["generation"] = json!(2);
        meta["managedFields"] = json!([{"manager": "x"}]);
        meta["deletionTimestamp"] = json!("2026-01-02T00:00:00Z");
        meta["selfLink"] = json!("/x");
        assert_eq!(fp(&base()), fp(&changed));
    }

    #[test]
    fn the_framework_finalizer_and_annotations_are_not_part_of_the_essence() {
        let mut changed = base();
        changed["metadata"]["finalizers"] = json!([FIN]);
        changed["metadata"]["annotations"] = json!({
            "kopf.dev/last-run": "5",
            // Another operator's bookkeeping, under its own prefix.
            "b.example.com/b.last-handled": r#"{"d":"0000000000000001","v":1}"#,
            "b.example.com/b.tick.cron": "2026-06-01T10:00:00Z",
        });
        assert_eq!(fp(&base()), fp(&changed));
        let e = essence(&changed, FIN, PREFIX);
        assert!(e["metadata"].get("finalizers").is_none());
        assert!(e["metadata"].get("annotations").is_none());
    }

    #[test]
    fn spec_labels_other_annotations_and_finalizers_are_part_of_it() {
        for (path, value) in [
            ("/spec/size", json!(2)),
            ("/metadata/labels/app", json!("y")),
            ("/metadata/annotations", json!({"team": "blue"})),
            ("/metadata/finalizers", json!(["other.io/keep"])),
        ] {
            let mut changed = base();
            if let Some(slot) = changed.pointer_mut(path) {
                *slot = value;
            } else {
                changed["metadata"][path.rsplit('/').next().unwrap()] = value;
            }
            assert_ne!(fp(&base()), fp(&changed), "{path}");
        }
    }

    #[test]
    fn key_order_does_not_matter_but_values_do() {
        let a: Value = serde_json::from_str(r#"{"x": 1, "y": [1, 2], "z": null}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"z": null, "y": [1, 2], "x": 1}"#).unwrap();
        let c: Value = serde_json::from_str(r#"{"z": null, "y": [2, 1], "x": 1}"#).unwrap();
        assert_eq!(hash_value(&a), hash_value(&b));
        assert_ne!(hash_value(&a), hash_value(&c));
        assert_ne!(hash_value(&json!(true)), hash_value(&json!("true")));
        assert_ne!(hash_value(&json!([])), hash_value(&json!({})));
    }

    #[test]
    fn an_empty_prefix_keeps_every_annotation_and_non_objects_are_kept() {
        let mut v = base();
        v["metadata"]["annotations"] = json!({"kopf.dev/x": "1"});
        assert!(
            essence(&v, FIN, "")["metadata"]
                .get("annotations")
                .is_some()
        );
        assert_eq!(essence(&json!(3), FIN, PREFIX), json!(3));
    }
}
