//! The essence of an object: the part of it that its owner changes. One set of rules, read
//! through three named views, each for one use:
//!
//! ```text
//!                                   View::Change         View::Diff         View::Idle
//!                                   (on_update starts)   (the `Diff`)       (`idle` resets)
//!  apiVersion, kind                 out                  out                in
//!  other top-level keys (spec, …)   in                   in                 in
//!  status                           watched fields only  out                out
//!  metadata.labels                  in (empty: absent)   in                 in
//!  metadata.annotations             kept ones            kept ones          kept ones
//!  metadata.finalizers              out                  out                in, but our own
//!  metadata: system fields          out                  out                out
//!  metadata: name, namespace, …     out                  out                in
//!
//!  annotations (kept: in)           Change and Diff      Idle
//!  under the operator's prefix      out                  out
//!  any kopf-rs bookkeeping          out                  out     (`core::bookkeeping`)
//!  kopf's (`kopf.zalando.org/…`)    out                  in
//!  kubectl's last-applied copy      out                  in
//!  any other                        in                   in
//!  (an annotations map left empty counts as absent)
//! ```
//!
//! `View::Change` is streamed into a persisted digest without cloning the body
//! (`changes::essence`); the other two are built here as JSON values ([`essence`]). The idle view
//! keeps the object's identity and the copies of other tools as they always were: only the
//! operator's own writes never reset `idle`.

use std::hash::{DefaultHasher, Hash, Hasher};

use serde_json::{Map, Value};

use crate::core::bookkeeping::is_bookkeeping;

/// What the essence is read for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum View {
    /// What counts as a change for `#[on_update]` (the digest in the diff base).
    Change,
    /// What the `Diff` given to `#[on_update]` is computed between.
    Diff,
    /// What counts as a change for `idle` timers.
    Idle,
}

/// Whose essence it is: the operator's annotation prefix and finalizer are its own writes.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Owner<'a> {
    /// The operator's annotation prefix (`kopf.dev/`); empty: no annotation is its own.
    pub(crate) prefix: &'a str,
    /// The operator's finalizer (empty: none).
    pub(crate) finalizer: &'a str,
}

/// Top-level keys outside the essence of the change and diff views (`metadata` and `status`
/// contribute parts of theirs).
const OUTSIDE: [&str; 4] = ["apiVersion", "kind", "metadata", "status"];
/// The metadata of the change and diff views.
const OWNED_METADATA: [&str; 2] = ["labels", "annotations"];
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
/// Annotation prefixes of other tools' bookkeeping (kopf's progress and diff base).
const FOREIGN_PREFIXES: [&str; 1] = ["kopf.zalando.org/"];
/// Annotations that copy the object (a change of the object changes them too).
const FOREIGN_KEYS: [&str; 1] = ["kubectl.kubernetes.io/last-applied-configuration"];

impl View {
    /// Whether the top-level key `key` is in the essence (whole; `metadata` and `status` are
    /// filtered by [`Self::keeps_metadata`] and the view's own rule).
    #[must_use]
    pub(crate) fn keeps_top_level(self, key: &str) -> bool {
        match self {
            Self::Change | Self::Diff => !OUTSIDE.contains(&key),
            Self::Idle => key != "status",
        }
    }

    /// Whether the metadata field `key` is in the essence (annotations and finalizers are then
    /// filtered).
    #[must_use]
    pub(crate) fn keeps_metadata(self, key: &str) -> bool {
        match self {
            Self::Change | Self::Diff => OWNED_METADATA.contains(&key),
            Self::Idle => !SYSTEM_METADATA.contains(&key),
        }
    }

    /// Whether the annotation `key` with `value` is in the essence.
    #[must_use]
    pub(crate) fn keeps_annotation(self, key: &str, value: &Value, own_prefix: &str) -> bool {
        let own = !own_prefix.is_empty() && key.starts_with(own_prefix);
        let foreign =
            FOREIGN_PREFIXES.iter().any(|p| key.starts_with(p)) || FOREIGN_KEYS.contains(&key);
        !own && !is_bookkeeping(key, value)
            && match self {
                Self::Change | Self::Diff => !foreign,
                Self::Idle => true,
            }
    }
}

/// The essence of `body` in the diff or idle view (see the module docs), as a JSON value. A
/// body that is not an object has itself as its idle essence and an empty diff essence. (The
/// change view is only ever digested: `changes::essence::digest`.)
#[must_use]
pub(crate) fn essence(body: &Value, view: View, owner: Owner<'_>) -> Value {
    let Some(object) = body.as_object() else {
        return match view {
            View::Idle => body.clone(),
            View::Change | View::Diff => Value::Object(Map::new()),
        };
    };
    let meta = object.get("metadata").and_then(Value::as_object);
    // Metadata that is an object is filtered below; anything else is kept whole if its key is.
    let whole = |key: &str| view.keeps_top_level(key) && (key != "metadata" || meta.is_none());
    let mut out: Map<String, Value> = (object.iter())
        .filter(|(key, _)| whole(key))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    if let Some(meta) = meta.map(|meta| metadata(meta, view, owner)) {
        // The change and diff views have no metadata of their own: none if nothing is kept.
        if view == View::Idle || !meta.is_empty() {
            out.insert("metadata".to_owned(), Value::Object(meta));
        }
    }
    Value::Object(out)
}

/// The metadata of the essence: the view's fields, our finalizer and the annotations it does not
/// keep left out (an annotations or finalizers list left empty is left out too).
fn metadata(meta: &Map<String, Value>, view: View, owner: Owner<'_>) -> Map<String, Value> {
    let mut out = Map::new();
    for (key, value) in meta.iter().filter(|(key, _)| view.keeps_metadata(key)) {
        let value = match (key.as_str(), value) {
            ("annotations", Value::Object(annotations)) => {
                let kept = annotations
                    .iter()
                    .filter(|(k, v)| view.keeps_annotation(k, v, owner.prefix));
                let kept: Map<String, Value> = kept.map(|(k, v)| (k.clone(), v.clone())).collect();
                if kept.is_empty() {
                    continue;
                }
                Value::Object(kept)
            }
            ("finalizers", Value::Array(finalizers)) => {
                let kept = finalizers
                    .iter()
                    .filter(|f| f.as_str() != Some(owner.finalizer));
                let kept: Vec<Value> = kept.cloned().collect();
                if kept.is_empty() {
                    continue;
                }
                Value::Array(kept)
            }
            _ => value.clone(),
        };
        out.insert(key.clone(), value);
    }
    out
}

/// A fingerprint of the idle essence of `body` (what `idle` timers compare).
#[must_use]
pub(crate) fn idle_fingerprint(body: &Value, owner: Owner<'_>) -> u64 {
    hash_value(&essence(body, View::Idle, owner))
}

/// A hash of a JSON value that does not depend on the order of object keys (within one
/// process: it is never persisted).
#[must_use]
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
#[path = "essence_tests.rs"]
mod tests;
