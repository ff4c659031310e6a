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

/// One version of an object: its identity, whether it is being deleted, and its JSON body
/// (without `metadata.managedFields`). Typed views are decoded lazily and cached per type.
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
    body: Arc<Value>,
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
            body: Arc::new(body),
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

    /// The JSON body.
    #[must_use]
    pub fn body(&self) -> &Arc<Value> {
        &self.body
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
        meta_str(&self.body, "resourceVersion")
    }

    /// This version reduced to its identity: a body with only `metadata.name`, `namespace`,
    /// `uid` and `resourceVersion`. What the supervisor keeps of an object that no handler
    /// matches and none runs for: the next version brings the whole body again.
    pub(crate) fn identity_only(&self) -> Self {
        let mut meta = serde_json::Map::new();
        for key in ["name", "namespace", "uid", "resourceVersion"] {
            if let Some(value) = self.body.get("metadata").and_then(|m| m.get(key)) {
                meta.insert(key.to_owned(), value.clone());
            }
        }
        Self {
            reference: self.reference.clone(),
            deleting: self.deleting,
            body: Arc::new(serde_json::json!({ "metadata": meta })),
            first: OnceLock::new(),
            decoded: Mutex::new(Vec::new()),
            identity_only: true,
        }
    }

    /// Whether `metadata.finalizers` lists `name`.
    pub(crate) fn has_finalizer(&self, name: &str) -> bool {
        self.body
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
        self.body.get("metadata")?.get("labels")?.get(key)?.as_str()
    }

    /// An annotation's value.
    #[must_use]
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.body
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
        let mut v: &Value = &self.body;
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
            K::deserialize(&*self.body)
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
