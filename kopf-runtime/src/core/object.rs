//! A Kubernetes-free snapshot of one object as the supervisor sees it.

use crate::core::sync::lock;
use std::any::{Any, TypeId};
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use serde::de::DeserializeOwned;
use serde_json::Value;

/// Identifies one object: by UID (a same-name recreation is a different object), with its
/// namespace and name for messages and API calls.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectRef {
    /// `metadata.uid`.
    pub uid: Arc<str>,
    /// `metadata.namespace`, `None` for cluster-scoped objects.
    pub namespace: Option<Arc<str>>,
    /// `metadata.name`.
    pub name: Arc<str>,
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// Why a JSON body could not be used as an object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ObjectError {
    /// The body is not a JSON object.
    #[error("the object body is not a JSON object")]
    NotAnObject,
    /// A required metadata field is missing or not a string.
    #[error("the object has no `metadata.{0}`")]
    MissingMetadata(&'static str),
}

type Decoded = Result<Arc<dyn Any + Send + Sync>, Arc<serde_json::Error>>;

/// Deeper bodies are never compacted: the text could not be read back (serde_json's reader
/// stops at 128 levels).
const COMPACT_DEPTH: usize = 100;

/// How a version keeps its JSON body.
enum Body {
    /// As a tree: what arrives, while the filters, the essence and the digests read it.
    Tree(Arc<Value>),
    /// As compact JSON text, once the supervisor has read the version
    /// ([`ObjectState::compacted`]). The tree is parsed back only when [`ObjectState::body`]
    /// (or a label, annotation or field) is asked for, and then kept with this version.
    Text {
        text: Box<str>,
        tree: OnceLock<Arc<Value>>,
    },
}

impl Body {
    /// Compact text, whose tree is parsed back when asked for.
    fn text(text: Box<str>) -> Self {
        Self::Text {
            text,
            tree: OnceLock::new(),
        }
    }

    /// `tree` as compact text, or the tree itself when the text could not be read back (nested
    /// deeper than [`COMPACT_DEPTH`]) or not written.
    fn compact(tree: &Arc<Value>) -> Self {
        match serde_json::to_string(&**tree) {
            Ok(text) if within_depth(tree, COMPACT_DEPTH) => Self::text(text.into_boxed_str()),
            _ => Self::Tree(Arc::clone(tree)),
        }
    }
}

/// One version of an object: its identity, whether it is being deleted, and its JSON body
/// (without `metadata.managedFields`). Typed views are decoded lazily and cached per type.
///
/// The supervisor keeps each version [compacted](ObjectState::compacted): the body as JSON
/// text (a few hundred bytes for a small object, whose tree takes a few KB) beside the
/// typed views its handlers decoded. Reading the body of such a version parses it again.
///
/// ```
/// use kopf_runtime::engine::ObjectState;
/// let obj = ObjectState::from_json(serde_json::json!({
///     "apiVersion": "v1", "kind": "ConfigMap",
///     "metadata": {"name": "a", "namespace": "ns", "uid": "u1", "labels": {"app": "x"}},
/// })).unwrap();
/// assert_eq!(obj.reference().to_string(), "ns/a");
/// assert_eq!(obj.label("app"), Some("x"));
/// assert!(!obj.is_deleting());
/// ```
pub struct ObjectState {
    reference: ObjectRef,
    deleting: bool,
    resource_version: Option<Box<str>>,
    body: Body,
    /// The first type decoded (nearly always the only one): read without a lock.
    first: OnceLock<(TypeId, Decoded)>,
    /// Any further types.
    decoded: Mutex<Vec<(TypeId, Decoded)>>,
    /// Whether the body was reduced to the identity (see [`ObjectState::identity_only`]).
    identity_only: bool,
}

impl fmt::Debug for ObjectState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectState")
            .field("reference", &self.reference)
            .field("deleting", &self.deleting)
            .finish_non_exhaustive()
    }
}

fn meta_str<'a>(body: &'a Value, key: &'static str) -> Option<&'a str> {
    body.get("metadata")?.get(key)?.as_str()
}

impl ObjectState {
    /// Builds a snapshot from a JSON body; drops `metadata.managedFields`.
    ///
    /// # Errors
    /// [`ObjectError`] if the body is not an object or lacks `metadata.name` / `metadata.uid`.
    pub fn from_json(mut body: Value) -> Result<Self, ObjectError> {
        let map = body.as_object_mut().ok_or(ObjectError::NotAnObject)?;
        if let Some(Value::Object(meta)) = map.get_mut("metadata") {
            meta.remove("managedFields");
        }
        let uid = meta_str(&body, "uid").ok_or(ObjectError::MissingMetadata("uid"))?;
        let name = meta_str(&body, "name").ok_or(ObjectError::MissingMetadata("name"))?;
        let reference = ObjectRef {
            uid: uid.into(),
            name: name.into(),
            namespace: meta_str(&body, "namespace").map(Into::into),
        };
        let deleting = body
            .get("metadata")
            .and_then(|m| m.get("deletionTimestamp"))
            .is_some_and(|t| !t.is_null());
        Ok(Self {
            reference,
            deleting,
            resource_version: meta_str(&body, "resourceVersion").map(Into::into),
            body: Body::Tree(Arc::new(body)),
            first: OnceLock::new(),
            decoded: Mutex::new(Vec::new()),
            identity_only: false,
        })
    }

    /// The object's identity.
    #[must_use]
    pub fn reference(&self) -> &ObjectRef {
        &self.reference
    }

    /// Whether `metadata.deletionTimestamp` is set.
    #[must_use]
    pub fn is_deleting(&self) -> bool {
        self.deleting
    }

    /// The JSON body. A [compacted](ObjectState::compacted) version parses its text on the
    /// first call and keeps the tree from then on.
    #[must_use]
    pub fn body(&self) -> &Arc<Value> {
        match &self.body {
            Body::Tree(tree) => tree,
            Body::Text { text, tree } => tree.get_or_init(|| Arc::new(parse_own(text))),
        }
    }

    /// The JSON body, without keeping a tree parsed from a compacted version's text: for the
    /// supervisor's own occasional readers, so that reading does not undo the compaction.
    pub(crate) fn body_value(&self) -> Arc<Value> {
        match &self.body {
            Body::Tree(tree) => Arc::clone(tree),
            Body::Text { text, tree } => tree
                .get()
                .map_or_else(|| Arc::new(parse_own(text)), Arc::clone),
        }
    }

    /// Whether this version keeps its body as text (see [`ObjectState::compacted`]).
    #[must_use]
    pub fn is_compacted(&self) -> bool {
        matches!(self.body, Body::Text { .. })
    }

    /// This version as the supervisor keeps it once it has read it: the body as compact JSON
    /// text instead of a tree, and the typed views already decoded. Nothing is lost: the body
    /// reads back the same, and a type not yet decoded is decoded from the text. A body nested
    /// deeper than 100 levels stays a tree.
    ///
    /// ```
    /// # use kopf_runtime::engine::ObjectState;
    /// let obj = ObjectState::from_json(serde_json::json!({
    ///     "metadata": {"name": "a", "uid": "u"}, "spec": {"size": 3}})).unwrap();
    /// let kept = obj.compacted();
    /// assert!(kept.is_compacted());
    /// assert_eq!(kept.body(), obj.body());
    /// assert_eq!(kept.decode::<serde_json::Value>().unwrap()["spec"]["size"], 3);
    /// ```
    #[must_use]
    pub fn compacted(&self) -> Self {
        let body = match &self.body {
            Body::Text { text, .. } => Body::text(text.clone()),
            Body::Tree(tree) => Body::compact(tree),
        };
        let first = OnceLock::new();
        if let Some(decoded) = self.first.get() {
            let _ = first.set(decoded.clone());
        }
        Self {
            reference: self.reference.clone(),
            deleting: self.deleting,
            resource_version: self.resource_version.clone(),
            body,
            first,
            decoded: Mutex::new(lock(&self.decoded).clone()),
            identity_only: self.identity_only,
        }
    }

    /// `metadata.resourceVersion`, if the body has one.
    ///
    /// ```
    /// # use kopf_runtime::engine::ObjectState;
    /// let meta = serde_json::json!({"name": "a", "uid": "u", "resourceVersion": "42"});
    /// let obj = ObjectState::from_json(serde_json::json!({"metadata": meta})).unwrap();
    /// assert_eq!(obj.resource_version(), Some("42"));
    /// ```
    #[must_use]
    pub fn resource_version(&self) -> Option<&str> {
        self.resource_version.as_deref()
    }

    /// This version reduced to its identity: a body with only `metadata.name`, `namespace`,
    /// `uid` and `resourceVersion`, kept as text. What the supervisor keeps of an object that no
    /// handler matches and none runs for: the next version brings the whole body again.
    pub(crate) fn identity_only(&self) -> Self {
        let ObjectRef {
            uid,
            namespace,
            name,
        } = &self.reference;
        let mut meta = serde_json::Map::new();
        meta.insert("name".to_owned(), Value::from(&**name));
        if let Some(namespace) = namespace {
            meta.insert("namespace".to_owned(), Value::from(&**namespace));
        }
        meta.insert("uid".to_owned(), Value::from(&**uid));
        if let Some(version) = &self.resource_version {
            meta.insert("resourceVersion".to_owned(), Value::from(&**version));
        }
        let body = Body::compact(&Arc::new(serde_json::json!({ "metadata": meta })));
        Self {
            reference: self.reference.clone(),
            deleting: self.deleting,
            resource_version: self.resource_version.clone(),
            body,
            first: OnceLock::new(),
            decoded: Mutex::new(Vec::new()),
            identity_only: true,
        }
    }

    /// Whether `metadata.finalizers` lists `name`.
    pub(crate) fn has_finalizer(&self, name: &str) -> bool {
        self.body_value()
            .get("metadata")
            .and_then(|m| m.get("finalizers"))
            .and_then(Value::as_array)
            .is_some_and(|fs| fs.iter().any(|f| f.as_str() == Some(name)))
    }

    /// Whether this is an [`ObjectState::identity_only`] view.
    pub(crate) fn is_identity_only(&self) -> bool {
        self.identity_only
    }

    /// The resource version as a number, where it is one. Kubernetes calls resource versions
    /// opaque, but every API server backed by etcd uses etcd's revision, which only grows; the
    /// supervisor compares them only to tell a stale event about a gone object from a later one.
    pub(crate) fn resource_version_number(&self) -> Option<u64> {
        self.resource_version()?.parse().ok()
    }

    /// A label's value.
    #[must_use]
    pub fn label(&self, key: &str) -> Option<&str> {
        self.body()
            .get("metadata")?
            .get("labels")?
            .get(key)?
            .as_str()
    }

    /// An annotation's value.
    #[must_use]
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.body()
            .get("metadata")?
            .get("annotations")?
            .get(key)?
            .as_str()
    }

    /// The value at a path of object keys (`null` counts as absent).
    ///
    /// ```
    /// # use kopf_runtime::engine::ObjectState;
    /// let obj = ObjectState::from_json(serde_json::json!({
    ///     "metadata": {"name": "a", "uid": "u"}, "spec": {"size": 3}})).unwrap();
    /// assert_eq!(obj.field(&["spec", "size"]), Some(&serde_json::json!(3)));
    /// assert_eq!(obj.field(&["spec", "nope"]), None);
    /// ```
    #[must_use]
    pub fn field(&self, path: &[&str]) -> Option<&Value> {
        let mut v: &Value = self.body();
        for seg in path {
            v = v.get(seg)?;
        }
        (!v.is_null()).then_some(v)
    }

    /// The body decoded as `K`, decoded once per type and cached.
    ///
    /// # Errors
    /// The deserialization error (shared, also cached) if the body does not fit `K`.
    ///
    /// ```
    /// # use kopf_runtime::engine::ObjectState;
    /// #[derive(serde::Deserialize)]
    /// struct Named { metadata: Meta }
    /// #[derive(serde::Deserialize)]
    /// struct Meta { name: String }
    /// let obj = ObjectState::from_json(serde_json::json!({"metadata": {"name": "a", "uid": "u"}})).unwrap();
    /// assert_eq!(obj.decode::<Named>().unwrap().metadata.name, "a");
    /// ```
    pub fn decode<K>(&self) -> Result<Arc<K>, Arc<serde_json::Error>>
    where
        K: DeserializeOwned + Send + Sync + 'static,
    {
        let tid = TypeId::of::<K>();
        let decode = || -> Decoded {
            let decoded = match &self.body {
                Body::Tree(tree) => K::deserialize(&**tree),
                Body::Text { text, tree } => match tree.get() {
                    Some(tree) => K::deserialize(&**tree),
                    None => serde_json::from_str(text),
                },
            };
            decoded
                .map(|k| Arc::new(k) as Arc<dyn Any + Send + Sync>)
                .map_err(Arc::new)
        };
        let (first_tid, first) = self.first.get_or_init(|| (tid, decode()));
        let entry = if *first_tid == tid {
            first.clone()
        } else {
            let mut cache = lock(&self.decoded);
            if let Some((_, d)) = cache.iter().find(|(t, _)| *t == tid) {
                d.clone()
            } else {
                let d = decode();
                cache.push((tid, d.clone()));
                d
            }
        };
        entry.map(|any| {
            // The entry under TypeId::of::<K>() always holds a K.
            any.downcast::<K>()
                .unwrap_or_else(|_| unreachable!("decoded cache holds a K"))
        })
    }
}

/// Reads back a body's text made by [`ObjectState::compacted`], which only compacts what reads
/// back (serde_json's output, not too deep).
fn parse_own(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|error| {
        tracing::error!(%error, "a compacted object body does not read back");
        Value::Null
    })
}

/// Whether `value` nests at most `limit` arrays and objects deep.
fn within_depth(value: &Value, limit: usize) -> bool {
    match value {
        Value::Array(items) => limit > 0 && items.iter().all(|v| within_depth(v, limit - 1)),
        Value::Object(map) => limit > 0 && map.values().all(|v| within_depth(v, limit - 1)),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    impl ObjectState {
        /// Whether a tree of the body is held (always, unless compacted and not read back).
        fn holds_tree(&self) -> bool {
            match &self.body {
                Body::Tree(_) => true,
                Body::Text { tree, .. } => tree.get().is_some(),
            }
        }
    }

    fn sample() -> ObjectState {
        ObjectState::from_json(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {
                "name": "a", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                "deletionTimestamp": "2026-12-07T00:00:00Z",
                "labels": {"app": "x"}, "annotations": {"note": "n"},
                "finalizers": ["f"], "managedFields": [{"manager": "m"}],
            },
            "data": {"k": "v", "n": 1.5, "big": 18_446_744_073_709_551_615_u64},
        }))
        .expect("a valid object")
    }

    /// Nested `levels` objects deep.
    fn nested(levels: usize) -> ObjectState {
        let mut value = json!(1);
        for _ in 1..levels {
            value = json!({ "x": value });
        }
        ObjectState::from_json(json!({"metadata": {"name": "a", "uid": "u"}, "spec": value}))
            .expect("a valid object")
    }

    #[test]
    fn a_compacted_version_reads_the_same() {
        let full = sample();
        let kept = full.compacted();
        assert!(kept.is_compacted() && !full.is_compacted());
        assert_eq!(kept.reference(), full.reference());
        assert_eq!(kept.is_deleting(), full.is_deleting());
        assert_eq!(kept.resource_version(), Some("7"));
        assert!(kept.has_finalizer("f") && !kept.has_finalizer("g"));
        assert_eq!(kept.label("app"), Some("x"));
        assert_eq!(kept.annotation("note"), Some("n"));
        assert_eq!(kept.field(&["data", "big"]), full.field(&["data", "big"]));
        assert_eq!(kept.body(), full.body());
        assert_eq!(kept.compacted().body(), full.body());
        assert!(
            kept.body()
                .get("metadata")
                .and_then(|m| m.get("managedFields"))
                .is_none()
        );
    }

    #[test]
    fn decoding_a_compacted_version_decodes_its_text() {
        let full = sample();
        let decoded = full.decode::<Value>().expect("decodes");
        let kept = full.compacted();
        // A type decoded before is carried over, not decoded again.
        let again = kept.decode::<Value>().expect("decodes");
        assert!(Arc::ptr_eq(&decoded, &again));
        // A type not decoded before is decoded from the text, without a tree.
        let data = kept.decode::<Data>().expect("decodes");
        assert_eq!(data.data.get("k"), Some(&json!("v")));
        assert!(!kept.holds_tree());
        assert!(kept.decode::<u32>().is_err() && full.decode::<u32>().is_err());
    }

    #[derive(serde::Deserialize)]
    struct Data {
        data: std::collections::BTreeMap<String, Value>,
    }

    #[test]
    fn only_the_public_body_keeps_the_tree_it_reads_back() {
        let kept = sample().compacted();
        assert!(!kept.holds_tree());
        assert_eq!(kept.body_value()["data"]["k"], "v");
        assert!(kept.has_finalizer("f"));
        assert!(
            !kept.holds_tree(),
            "the supervisor's own reads keep no tree"
        );
        assert_eq!(kept.label("app"), Some("x"));
        assert!(
            kept.holds_tree(),
            "a borrowed read keeps it for the version's life"
        );
        assert!(Arc::ptr_eq(&kept.body_value(), kept.body()));
    }

    #[test]
    fn a_body_too_deep_to_read_back_stays_a_tree() {
        assert!(nested(COMPACT_DEPTH - 1).compacted().is_compacted());
        let deep = nested(200);
        let kept = deep.compacted();
        assert!(!kept.is_compacted());
        assert_eq!(kept.body(), deep.body());
    }
}
