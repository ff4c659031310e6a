//! The change view of the essence ([`View::Change`]: what counts as a change for
//! `#[on_update]`), streamed into its stable digest; the rules are `crate::core::essence`'s.
//!
//! The view is every top-level key except `apiVersion`, `kind`, `metadata` and `status`, plus
//! `metadata.labels`, plus the `metadata.annotations` the view keeps, plus the watched fields
//! under `status`. Its digest is FNV-1a-64 over the compact JSON of a borrowed view with object
//! keys in sorted order: the same across builds and processes (it is persisted), and computed
//! without cloning the body. Empty labels or annotations count as absent.

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};

use super::field::FieldPath;
use crate::core::essence::View;
use crate::core::hash::{Canon, Filtered, entries, hash_of};

/// What the essence of a kind's objects is made of.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EssenceCfg<'a> {
    /// The operator's annotation prefix (`kopf.dev/`); empty: no annotation is its own.
    pub(crate) own_prefix: &'a str,
    /// The watched fields ([`super::ChangeHandlers::watched`]); those under `status` are in
    /// the essence.
    pub(crate) watched: &'a [FieldPath],
}

#[cfg(test)]
/// The digest of the essence of `body` and its watched fields.
#[must_use]
pub(crate) fn observe<'b>(body: &'b Value, cfg: &EssenceCfg<'_>) -> super::field::Observed<'b> {
    let fields = cfg
        .watched
        .iter()
        .map(|field| (field.path, lookup(body, field)))
        .collect();
    super::field::Observed {
        digest: digest(body, cfg),
        fields,
    }
}

/// The digest of the essence of `body` (see the module docs).
#[must_use]
pub(crate) fn digest(body: &Value, cfg: &EssenceCfg<'_>) -> u64 {
    match body {
        Value::Object(body) => hash_of(&Borrowed { body, cfg }).finish(),
        other => hash_of(&Canon(other)).finish(),
    }
}

/// The value at `field` in `body` (`None`: absent, `null`, or under a non-object).
#[must_use]
pub(crate) fn lookup<'b>(body: &'b Value, field: &FieldPath) -> Option<&'b Value> {
    let mut value = body;
    for segment in field.segments {
        value = value.as_object()?.get(*segment)?;
    }
    (!value.is_null()).then_some(value)
}

/// Whether an annotation belongs to the change view.
fn kept(key: &str, value: &Value, own_prefix: &str) -> bool {
    View::Change.keeps_annotation(key, value, own_prefix)
}

/// The change view of an object body, borrowed.
struct Borrowed<'a> {
    /// The body.
    body: &'a Map<String, Value>,
    /// What the essence is made of.
    cfg: &'a EssenceCfg<'a>,
}

impl Serialize for Borrowed<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut out = serializer.serialize_map(None)?;
        let whole = |key: &str| View::Change.keeps_top_level(key);
        for (key, value) in entries(self.body).filter(|(key, _)| whole(key)) {
            out.serialize_entry(key, &Canon(value))?;
        }
        let meta = self.body.get("metadata").and_then(Value::as_object);
        let owned = |key: &str| meta.filter(|_| View::Change.keeps_metadata(key))?.get(key);
        let labels = owned("labels").filter(|v| !is_empty(v));
        let own = self.cfg.own_prefix;
        let annotations = owned("annotations")
            .and_then(Value::as_object)
            .filter(|a| a.iter().any(|(key, value)| kept(key, value, own)));
        if labels.is_some() || annotations.is_some() {
            out.serialize_entry(
                "metadata",
                &Meta {
                    labels,
                    annotations,
                    own,
                },
            )?;
        }
        let status = Status {
            body: self.body,
            watched: self.cfg.watched,
        };
        if status.fields().next().is_some() {
            out.serialize_entry("status", &status)?;
        }
        out.end()
    }
}

/// Whether a labels value counts as absent.
fn is_empty(value: &Value) -> bool {
    value.is_null() || value.as_object().is_some_and(Map::is_empty)
}

/// The labels and the kept annotations.
struct Meta<'a> {
    /// `metadata.labels`, unless empty.
    labels: Option<&'a Value>,
    /// `metadata.annotations`, unless none is kept.
    annotations: Option<&'a Map<String, Value>>,
    /// The operator's annotation prefix.
    own: &'a str,
}

impl Serialize for Meta<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut out = serializer.serialize_map(None)?;
        if let Some(map) = self.annotations {
            let own = self.own;
            let keep = move |key: &str, value: &Value| kept(key, value, own);
            out.serialize_entry("annotations", &Filtered { map, keep })?;
        }
        if let Some(labels) = self.labels {
            out.serialize_entry("labels", &Canon(labels))?;
        }
        out.end()
    }
}

/// The watched fields under `status`, by path.
struct Status<'a> {
    /// The body.
    body: &'a Map<String, Value>,
    /// The watched fields (those under `status` are taken).
    watched: &'a [FieldPath],
}

impl<'a> Status<'a> {
    /// The present watched values under `status`, by path.
    fn fields(&self) -> impl Iterator<Item = (&'static str, &'a Value)> + '_ {
        let status = self.body.get("status");
        self.watched
            .iter()
            .filter(|field| field.segments.first() == Some(&"status"))
            .filter_map(move |field| {
                let rest = FieldPath {
                    path: field.path,
                    segments: field.segments.get(1..).unwrap_or_default(),
                };
                Some((field.path, lookup(status?, &rest)?))
            })
    }
}

impl Serialize for Status<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut out = serializer.serialize_map(None)?;
        for (path, value) in self.fields() {
            out.serialize_entry(path, &Canon(value))?;
        }
        out.end()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::super::json::json_str_len;
    use super::super::tests::SIZE;
    use super::*;
    use crate::core::hash::measure;

    const PHASE: FieldPath = FieldPath {
        path: "status.phase",
        segments: &["status", "phase"],
    };
    const WATCHED: [FieldPath; 2] = [SIZE, PHASE];
    const CFG: EssenceCfg<'static> = EssenceCfg {
        own_prefix: "kopf.dev/",
        watched: &WATCHED,
    };

    fn body() -> Value {
        json!({
            "apiVersion": "kopf.dev/v1", "kind": "KopfExample",
            "metadata": {"name": "a", "uid": "u1", "resourceVersion": "1", "labels": {"app": "x"}},
            "spec": {"size": 3, "list": [1, {"b": 2, "a": 1}]},
            "status": {"phase": "Ready", "other": 1},
        })
    }

    fn d(v: &Value) -> u64 {
        digest(v, &CFG)
    }

    #[test]
    fn golden_digests_are_stable_across_builds() {
        // The digest is persisted: these values may never change within format version 1.
        assert_eq!(d(&json!({})), crate::core::hash::fnv64(b"{}"));
        assert_eq!(
            d(&body()),
            crate::core::hash::fnv64(
                br#"{"spec":{"list":[1,{"a":1,"b":2}],"size":3},"metadata":{"labels":{"app":"x"}},"status":{"status.phase":"Ready"}}"#
            )
        );
        assert_eq!(d(&body()), 0xe333_b113_0188_3866);
        assert_eq!(measure(&json!({"b": [true, null], "a": "é"})).0, 26);
    }

    #[test]
    fn status_metadata_and_tool_annotations_are_outside() {
        let mut changed = body();
        changed["status"]["other"] = json!(2);
        changed["status"]["handler"] = json!({"ok": true});
        changed["apiVersion"] = json!("kopf.dev/v2");
        let meta = &mut changed["metadata"];
        meta["resourceVersion"] = json!("9");
        meta["finalizers"] = json!(["kopf.dev/op"]);
        meta["annotations"] = json!({
            "kopf.dev/op.progress": "{}", "kopf.zalando.org/last-handled-configuration": "{}",
            "kubectl.kubernetes.io/last-applied-configuration": "{}",
            // Other kopf-rs operators' bookkeeping, under their own prefixes.
            "b.example.com/b.last-handled": r#"{"d":"0000000000000001","u":"u1","v":1}"#,
            "b.example.com/b.progress": r#"{"c":"update","h":{},"v":1}"#,
            "b.example.com/b.tick.cron": "2026-06-01T10:00:00Z",
        });
        assert_eq!(d(&body()), d(&changed));
        changed["metadata"]["labels"] = json!({});
        let mut unlabelled = body();
        unlabelled["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("labels");
        assert_eq!(d(&unlabelled), d(&changed));
    }

    #[test]
    fn spec_labels_other_annotations_and_watched_status_are_inside() {
        let base = d(&body());
        for (path, value) in [
            ("/spec/size", json!(4)),
            ("/spec/list/0", json!(1.0)),
            ("/metadata/labels/app", json!("y")),
            ("/status/phase", json!("Failed")),
        ] {
            let mut changed = body();
            *changed.pointer_mut(path).unwrap() = value;
            assert_ne!(base, d(&changed), "{path}");
        }
        let mut annotated = body();
        annotated["metadata"]["annotations"] = json!({"team": "blue", "kopf.dev/x": "1"});
        assert_ne!(base, d(&annotated));
        // Users' annotations that only share a suffix with the bookkeeping are inside.
        for (key, value) in [("x.io/job.progress", "50%"), ("x.io/job.cron", "@daily")] {
            let mut annotated = body();
            annotated["metadata"]["annotations"] = json!({ key: value });
            assert_ne!(base, d(&annotated), "{key}");
        }
        let own = EssenceCfg {
            own_prefix: "",
            ..CFG
        };
        let mut ours = body();
        ours["metadata"]["annotations"] = json!({"kopf.dev/x": "1"});
        assert_eq!(digest(&ours, &CFG), base);
        assert_ne!(digest(&ours, &own), digest(&body(), &own));
        let mut data = body();
        data["data"] = json!({"k": "v"});
        assert_ne!(base, d(&data));
        assert_ne!(d(&json!(1)), d(&json!("1")));
    }

    #[test]
    fn watched_fields_are_looked_up_with_null_as_absent() {
        let body = body();
        let seen = observe(&body, &CFG);
        assert_eq!(seen.digest, d(&body));
        assert_eq!(seen.fields["spec.size"], Some(&json!(3)));
        assert_eq!(seen.fields["status.phase"], Some(&json!("Ready")));
        let deep = FieldPath {
            path: "spec.size.x",
            segments: &["spec", "size", "x"],
        };
        assert_eq!(lookup(&body, &deep), None);
        assert_eq!(lookup(&json!({"spec": {"size": null}}), &SIZE), None);
        assert_eq!(lookup(&json!([1]), &SIZE), None);
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            "\\PC{0,8}".prop_map(Value::from),
            "[\"\\\\\u{0}-\u{1f}a\u{e9}]{0,6}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                prop::collection::btree_map("[a-c\"]{0,2}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn measure_agrees_with_serde_json(value in arb_json()) {
            let text = serde_json::to_string(&value).unwrap();
            prop_assert_eq!(measure(&value), (text.len(), crate::core::hash::fnv64(text.as_bytes())));
            if let Value::String(s) = &value {
                prop_assert_eq!(json_str_len(s), text.len());
            }
        }
    }
}
