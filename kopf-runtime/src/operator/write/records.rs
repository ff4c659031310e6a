//! What the operator last saw of each object of a kind: its identity, finalizers, deletion
//! state and resource version. Written by the watch and by every write's response; read by the
//! finalizer sync and the patch sink (which guards status writes with the last seen resource
//! version of the object's UID).

use crate::core::sync::lock;
use crate::core::teardown;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use kube::api::DynamicObject;
use serde_json::Value;

use crate::core::object::ObjectRef;

/// The finalizer-related state of an object as last seen.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FinalizerView {
    /// `metadata.finalizers` (`None`: the field is absent).
    pub(crate) finalizers: Option<Vec<String>>,
    /// `metadata.deletionTimestamp` is set.
    pub(crate) deleting: bool,
    /// `metadata.resourceVersion`.
    pub(crate) resource_version: Option<String>,
}

impl FinalizerView {
    /// Reads the view from an object body.
    pub(crate) fn from_body(body: &Value) -> Self {
        let meta = body.get("metadata");
        let finalizers = meta
            .and_then(|m| m.get("finalizers"))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            });
        let deleting = meta
            .and_then(|m| m.get("deletionTimestamp"))
            .is_some_and(|t| !t.is_null());
        let resource_version = meta
            .and_then(|m| m.get("resourceVersion"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        Self {
            finalizers,
            deleting,
            resource_version,
        }
    }

    /// Reads the view from a typed dynamic object.
    pub(crate) fn from_object(obj: &DynamicObject) -> Self {
        Self {
            finalizers: obj.metadata.finalizers.clone(),
            deleting: obj.metadata.deletion_timestamp.is_some(),
            resource_version: obj.metadata.resource_version.clone(),
        }
    }

    /// Whether `name` is among the finalizers.
    pub(crate) fn has(&self, name: &str) -> bool {
        self.finalizers
            .as_deref()
            .is_some_and(|f| f.iter().any(|x| x == name))
    }

    /// Whether `self` is not older than `other` (resource versions compared as numbers when both
    /// are numbers, as the API server issues them; otherwise assumed newer).
    pub(crate) fn is_newer_or_same(&self, other: &Self) -> bool {
        match (self.rv_number(), other.rv_number()) {
            (Some(a), Some(b)) => a >= b,
            _ => true,
        }
    }

    fn rv_number(&self) -> Option<u64> {
        self.resource_version.as_deref()?.parse().ok()
    }
}

/// What the operator last saw of one object.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    pub(crate) object: ObjectRef,
    pub(crate) view: FinalizerView,
    /// Deleted, or no longer listed/selected: the supervisor was told it is gone.
    pub(crate) gone: bool,
    /// A write found it gone (404, or another UID under its name) before the watch said so:
    /// nothing more is written for it, and the record stays until the watch's report, which
    /// still needs the object's name (the kind's indexes take it out by name).
    pub(crate) vanished: bool,
}

/// The records of one kind, by UID. Boxed: a hash table has room for up to twice as many
/// entries as it holds, and while it grows it is there twice, so a record's 112 bytes inside
/// the table would cost up to 4× that at the peak; a box's pointer costs 8.
#[derive(Debug, Default)]
pub(crate) struct Records(Mutex<HashMap<Arc<str>, Box<Record>>>);

impl Drop for Records {
    /// Many records are freed on a thread of their own (see `core::teardown`): the last
    /// reference usually goes as the operator's process exits, which need not wait for it.
    fn drop(&mut self) {
        let records = self.0.get_mut().unwrap_or_else(PoisonError::into_inner);
        if records.len() >= teardown::IN_BACKGROUND_FROM {
            teardown::drop_in_background(std::mem::take(records));
        }
    }
}

impl Records {
    fn lock(&self) -> MutexGuard<'_, HashMap<Arc<str>, Box<Record>>> {
        lock(&self.0)
    }

    /// The number of records.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    /// The objects not gone, and how many of them carry `finalizer` (for `/metrics`).
    pub(crate) fn census(&self, finalizer: &str) -> (usize, usize) {
        let records = self.lock();
        let live = records.values().filter(|r| !r.gone && !r.vanished);
        live.fold((0, 0), |(objects, held), r| {
            (objects + 1, held + usize::from(r.view.has(finalizer)))
        })
    }

    /// The UIDs of every record.
    pub(crate) fn uids(&self) -> Vec<Arc<str>> {
        self.lock().keys().cloned().collect()
    }

    /// A copy of the record of `uid`.
    pub(crate) fn get(&self, uid: &str) -> Option<Record> {
        self.lock().get(uid).map(|r| Record::clone(r))
    }

    /// A version of the object was seen (it exists).
    pub(crate) fn seen(&self, object: ObjectRef, view: FinalizerView) {
        match self.lock().entry(object.uid.clone()) {
            Entry::Occupied(mut e) => {
                let r = e.get_mut();
                if view.is_newer_or_same(&r.view) {
                    r.view = view;
                }
                r.gone = false;
            }
            Entry::Vacant(e) => {
                e.insert(Box::new(Record {
                    object,
                    view,
                    gone: false,
                    vanished: false,
                }));
            }
        }
    }

    /// The object is gone (with its last state, if known). `false` if there is no record.
    pub(crate) fn mark_gone(&self, uid: &str, last: Option<FinalizerView>) -> bool {
        let mut records = self.lock();
        let Some(r) = records.get_mut(uid) else {
            return false;
        };
        if let Some(view) = last
            && view.is_newer_or_same(&r.view)
        {
            r.view = view;
        }
        r.gone = true;
        true
    }

    /// Updates the view from a response or a fresh read (unless it is older).
    pub(crate) fn update(&self, uid: &str, view: FinalizerView) {
        if let Some(r) = self.lock().get_mut(uid)
            && view.is_newer_or_same(&r.view)
        {
            r.view = view;
        }
    }

    /// The last seen resource version of `uid`.
    pub(crate) fn resource_version(&self, uid: &str) -> Option<String> {
        self.lock()
            .get(uid)
            .and_then(|r| r.view.resource_version.clone())
    }

    /// A write found the object gone: the record is dropped if the watch reported it gone
    /// already, and otherwise kept (marked) until the watch does.
    pub(crate) fn vanished(&self, uid: &str) {
        let mut records = self.lock();
        match records.get_mut(uid) {
            Some(r) if r.gone => {
                records.remove(uid);
            }
            Some(r) => r.vanished = true,
            None => {}
        }
    }

    /// Drops the record if it is marked gone.
    pub(crate) fn remove_if_gone(&self, uid: &str) {
        let mut records = self.lock();
        if records.get(uid).is_some_and(|r| r.gone) {
            records.remove(uid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(rv: &str, finalizers: &[&str]) -> FinalizerView {
        FinalizerView {
            finalizers: Some(finalizers.iter().map(|f| (*f).to_owned()).collect()),
            deleting: false,
            resource_version: Some(rv.to_owned()),
        }
    }

    fn object() -> ObjectRef {
        ObjectRef {
            uid: "u".into(),
            namespace: None,
            name: "a".into(),
        }
    }

    #[test]
    fn older_versions_never_overwrite_newer_ones() {
        let records = Records::default();
        records.seen(object(), view("5", &["x"]));
        records.seen(object(), view("4", &[]));
        assert_eq!(records.resource_version("u").as_deref(), Some("5"));
        records.update("u", view("7", &["x"]));
        assert_eq!(records.get("u").unwrap().view, view("7", &["x"]));
        records.update("u", view("6", &[]));
        assert_eq!(records.resource_version("u").as_deref(), Some("7"));
    }

    #[test]
    fn gone_records_are_dropped_only_when_marked() {
        let records = Records::default();
        assert!(!records.mark_gone("u", None));
        records.seen(object(), view("1", &[]));
        records.remove_if_gone("u");
        assert_eq!(records.len(), 1);
        assert!(records.mark_gone("u", Some(view("2", &[]))));
        assert!(records.get("u").unwrap().gone);
        records.remove_if_gone("u");
        assert_eq!(records.len(), 0);
    }

    #[test]
    fn a_vanished_record_waits_for_the_watch() {
        let records = Records::default();
        records.seen(object(), view("1", &["x"]));
        records.vanished("u");
        records.remove_if_gone("u");
        assert!(records.get("u").is_some_and(|r| r.vanished && !r.gone));
        assert_eq!(records.census("x"), (0, 0));
        // The watch's report: its sync drops the record.
        assert!(records.mark_gone("u", None));
        records.remove_if_gone("u");
        assert_eq!(records.len(), 0);
        // Reported first, then found gone by a write: dropped at once.
        records.seen(object(), view("2", &["x"]));
        assert!(records.mark_gone("u", None));
        records.vanished("u");
        assert_eq!(records.len(), 0);
    }

    #[test]
    fn reads_the_view_from_a_body() {
        let v = FinalizerView::from_body(&serde_json::json!({"metadata": {
            "finalizers": ["x"], "deletionTimestamp": "2026-01-01T00:00:00Z", "resourceVersion": "12"}}));
        assert_eq!(
            v,
            FinalizerView {
                finalizers: Some(vec!["x".into()]),
                deleting: true,
                resource_version: Some("12".into())
            }
        );
        let older = FinalizerView {
            resource_version: Some("9".into()),
            ..v.clone()
        };
        assert!(v.is_newer_or_same(&older) && !older.is_newer_or_same(&v));
    }
}
