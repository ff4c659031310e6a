//! A watched object as decoded from a list page or a watch event, one item at a time: its body
//! when it is usable, or — for one that is not, such as JSON nested deeper than serde_json's
//! limit of 128 that the API server accepts in any schemaless field — its identity and why.
//!
//! Decoded as a whole, one such object fails every list page that contains it, so after a
//! relist the kind is never served again (and kube's client logs the whole page, other
//! objects included). Decoded per item, only that object is skipped (and reported, without
//! its body), and every other object of the page is served.

use std::borrow::Cow;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::ApiResource;
use kube::core::DynamicResourceScope;
use serde::de::DeserializeSeed as _;
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use serde_json::value::RawValue;

/// One object of a kind, as the API server sent it.
#[derive(Clone)]
pub(crate) struct Watched {
    /// The essential metadata, read on its own (so that it is known for an unusable body too).
    meta: ObjectMeta,
    /// The whole object, or why it cannot be used.
    pub(crate) body: Result<Value, Arc<str>>,
}

impl std::fmt::Debug for Watched {
    // Never the body: it may be huge, and not the operator's to log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watched")
            .field("name", &self.meta.name)
            .field("namespace", &self.meta.namespace)
            .field("uid", &self.meta.uid)
            .field("resource_version", &self.meta.resource_version)
            .field("usable", &self.body.is_ok())
            .finish()
    }
}

/// The metadata fields the operator needs even of an unusable object. Every other field is
/// skipped without a depth limit (serde_json skips values iteratively).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct Essentials {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Envelope {
    metadata: Essentials,
}

impl From<Essentials> for ObjectMeta {
    fn from(id: Essentials) -> Self {
        Self {
            name: id.name,
            namespace: id.namespace,
            uid: id.uid,
            resource_version: id.resource_version,
            deletion_timestamp: id.deletion_timestamp,
            finalizers: id.finalizers,
            ..Self::default()
        }
    }
}

impl Watched {
    /// Decodes one item from its raw JSON text.
    pub(crate) fn from_raw(raw: &str) -> Self {
        // Without `metadata.managedFields` (never kept, and often most of a small object); a
        // body that is not an object with an object `metadata` is read as it is.
        let parsed = parse_without_managed_fields(raw).or_else(|_| serde_json::from_str(raw));
        match parsed {
            Ok(body) => {
                let meta = body
                    .get("metadata")
                    .map(|m| Essentials::deserialize(m).unwrap_or_default())
                    .unwrap_or_default();
                Self {
                    meta: meta.into(),
                    body: Ok(body),
                }
            }
            Err(err) => {
                let meta = serde_json::from_str::<Envelope>(raw)
                    .map(|e| e.metadata)
                    .unwrap_or_default();
                Self {
                    meta: meta.into(),
                    body: Err(Arc::from(err.to_string())),
                }
            }
        }
    }

    /// A body with just the essential metadata (see [`Watched::meta`]), also of an unusable
    /// object.
    pub(crate) fn metadata_body(&self) -> Value {
        let meta = serde_json::to_value(&self.meta).unwrap_or_default();
        serde_json::json!({ "metadata": meta })
    }

    /// The object's essential metadata (name, namespace, UID, resource version, deletion,
    /// finalizers), also of an unusable object.
    pub(crate) fn meta(&self) -> &ObjectMeta {
        &self.meta
    }
}

/// Parses an object's body, skipping `metadata.managedFields` without building it. Fails
/// (for the caller to parse it as it is) unless the body and its `metadata` are objects.
fn parse_without_managed_fields(raw: &str) -> serde_json::Result<Value> {
    let mut deserializer = serde_json::Deserializer::from_str(raw);
    let value = Fields { metadata: true }.deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(value)
}

/// A JSON object read key by key: the root (whose `metadata` is read as a [`Fields`] that
/// skips `managedFields`), or `metadata`.
#[derive(Clone, Copy)]
struct Fields {
    /// The root: `metadata` is read without its `managedFields`.
    metadata: bool,
}

impl<'de> serde::de::DeserializeSeed<'de> for Fields {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Fields {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let mut map = serde_json::Map::new();
        while let Some(key) = access.next_key::<String>()? {
            let value = match key.as_str() {
                "metadata" if self.metadata => access.next_value_seed(Self { metadata: false })?,
                "managedFields" if !self.metadata => {
                    access.next_value::<serde::de::IgnoredAny>()?;
                    continue;
                }
                _ => access.next_value::<Value>()?,
            };
            map.insert(key, value);
        }
        Ok(Value::Object(map))
    }
}

impl<'de> Deserialize<'de> for Watched {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Captured as text without a depth limit; decoded with the limit on its own.
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        Ok(Self::from_raw(raw.get()))
    }
}

impl kube::Resource for Watched {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.meta
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.meta
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `{"a": {"a": … 1 …}}`, `depth` objects deep.
    fn nested(depth: usize) -> String {
        format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth))
    }

    fn object(name: &str, status: &str) -> String {
        format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"ns","uid":"u-{name}","resourceVersion":"7",
            "finalizers":["kopf.dev/x"],"deletionTimestamp":"2026-01-01T00:00:00Z"}},"status":{status}}}"#
        )
    }

    #[test]
    fn a_too_deep_object_is_one_bad_item_of_a_page_that_decodes() {
        let page = format!(
            r#"{{"metadata":{{"resourceVersion":"9"}},"items":[{},{},{}]}}"#,
            object("a", "{}"),
            object("deep", &nested(150)),
            object("b", "{\"x\":1}"),
        );
        let list: kube::core::ObjectList<Watched> = serde_json::from_str(&page).unwrap();
        let usable: Vec<_> = list.items.iter().map(|w| w.body.is_ok()).collect();
        assert_eq!(usable, [true, false, true]);
        let deep = &list.items[1];
        assert!(
            deep.body.as_ref().unwrap_err().contains("recursion limit"),
            "{deep:?}"
        );
        let meta = deep.meta();
        assert_eq!(meta.name.as_deref(), Some("deep"));
        assert_eq!(meta.uid.as_deref(), Some("u-deep"));
        assert_eq!(meta.resource_version.as_deref(), Some("7"));
        assert_eq!(
            meta.finalizers.as_deref(),
            Some(&["kopf.dev/x".to_owned()][..])
        );
        assert!(meta.deletion_timestamp.is_some());
        assert_eq!(list.items[2].body.as_ref().unwrap()["status"]["x"], 1);
        assert!(
            !format!("{deep:?}").contains("\"a\""),
            "the body is never printed"
        );
    }

    #[test]
    fn managed_fields_are_skipped_while_parsing_and_other_bodies_read_as_they_are() {
        let raw = r#"{"kind":"X","metadata":{"name":"a","uid":"u","managedFields":[{"manager":"m",
            "fieldsV1":{"f:spec":{}}}],"labels":{"l":"1"}},"spec":{"managedFields":1}}"#;
        let body = Watched::from_raw(raw).body.unwrap();
        let expected = serde_json::json!({"kind": "X", "metadata": {"name": "a", "uid": "u",
            "labels": {"l": "1"}}, "spec": {"managedFields": 1}});
        assert_eq!(body, expected);
        // Positive control: the same text parsed as it is keeps them.
        let full: Value = serde_json::from_str(raw).unwrap();
        assert!(full["metadata"].get("managedFields").is_some());
        // Not an object, or a `metadata` that is not one: read as it is (reported later).
        assert_eq!(
            Watched::from_raw("[1]").body.unwrap(),
            serde_json::json!([1])
        );
        let odd = Watched::from_raw(r#"{"metadata":7,"a":1}"#).body.unwrap();
        assert_eq!(odd, serde_json::json!({"metadata": 7, "a": 1}));
        assert!(
            Watched::from_raw(r#"{"a":1} x"#).body.is_err(),
            "trailing text"
        );
    }

    #[test]
    fn the_identity_of_an_unusable_object_is_a_body_of_its_own() {
        let deep = Watched::from_raw(&object("deep", &nested(200)));
        let body = deep.metadata_body();
        assert_eq!(body["metadata"]["uid"], "u-deep");
        assert_eq!(body["metadata"]["resourceVersion"], "7");
        assert_eq!(body["metadata"]["finalizers"][0], "kopf.dev/x");
        assert!(body.get("status").is_none());
        let event: kube::core::WatchEvent<Watched> = serde_json::from_str(&format!(
            r#"{{"type":"MODIFIED","object":{}}}"#,
            object("d", &nested(1000))
        ))
        .unwrap();
        assert!(matches!(event, kube::core::WatchEvent::Modified(w) if w.body.is_err()));
    }
}
