//! The [`PatchSink`] of one resource kind: handlers' results and patches, written as
//! UID-guarded merge patches through the write loop.

use std::collections::HashSet;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use serde_json::{Map, Value};
use tracing::{debug, warn};

use super::records::{FinalizerView, Records};
use super::{Failure, Next, Retrying, Writer, classify, describe};
use crate::core::object::ObjectRef;
use crate::core::sink::{PatchError, PatchSink};
use crate::core::sync::lock;

/// Whether the resource has a status subresource, as API discovery reported it (until then:
/// no, so that `status` goes to the main resource).
#[derive(Debug, Default)]
pub(crate) struct StatusMode(AtomicBool);

impl StatusMode {
    /// Records what discovery found.
    pub(crate) fn set(&self, subresource: bool) {
        self.0.store(subresource, Ordering::Relaxed);
    }

    /// Whether `status` goes through the subresource.
    pub(crate) fn subresource(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// The parts of a merge patch: for the main resource and for the status subresource.
#[derive(Debug, PartialEq)]
pub(crate) struct SplitPatch {
    pub(crate) main: Option<Value>,
    pub(crate) status: Option<Value>,
}

/// Splits a merge patch into a main and a status part (when the resource has a status
/// subresource) and adds the UID precondition (`metadata.uid`) to each part.
pub(crate) fn split_patch(
    patch: Value,
    uid: &str,
    subresource: bool,
) -> Result<SplitPatch, String> {
    let Value::Object(mut map) = patch else {
        return Err(format!(
            "a merge patch must be a JSON object, not `{patch}`"
        ));
    };
    let status = if subresource {
        map.remove("status")
    } else {
        None
    };
    let main = (!map.is_empty()).then(|| guarded(map, uid));
    let status = status.map(|s| {
        let mut m = Map::new();
        m.insert("status".into(), s);
        guarded(m, uid)
    });
    Ok(SplitPatch { main, status })
}

fn guarded(mut map: Map<String, Value>, uid: &str) -> Value {
    let meta = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(meta) = meta {
        meta.insert("uid".into(), Value::String(uid.to_owned()));
    } else {
        *meta = serde_json::json!({ "uid": uid });
    }
    Value::Object(map)
}

/// Applies merge patches to objects of one kind.
#[derive(Debug, Clone)]
pub(crate) struct KubePatchSink {
    pub(crate) writer: Writer,
    pub(crate) status: Arc<StatusMode>,
    pub(crate) records: Arc<Records>,
    /// The `status` keys the API server was seen to drop (warned about once each).
    pub(crate) dropped: Arc<Mutex<HashSet<String>>>,
}

/// The keys of `patch`'s `status` that `written` (the object as the API server returned it)
/// does not have: the server dropped them, because the kind's status has a fixed schema (a
/// built-in kind) or a schema that prunes them. A key patched to `null` is a deletion, not a
/// drop.
pub(crate) fn dropped_status_keys(patch: &Value, written: &Value) -> Vec<String> {
    let Some(Value::Object(patched)) = patch.get("status") else {
        return Vec::new();
    };
    let stored = written.get("status");
    patched
        .iter()
        .filter(|(key, value)| {
            !value.is_null() && stored.and_then(|s| s.get(key.as_str())).is_none()
        })
        .map(|(key, _)| key.clone())
        .collect()
}

impl PatchSink for KubePatchSink {
    fn apply(
        &self,
        object: &ObjectRef,
        patch: Value,
    ) -> BoxFuture<'static, Result<(), PatchError>> {
        let this = self.clone();
        let object = object.clone();
        Box::pin(async move { this.apply_now(&object, patch).await })
    }
}

impl KubePatchSink {
    /// Applies `patch` to `object`, retrying transient failures.
    ///
    /// # Cancellation safety
    /// Dropping the future may leave a part of the patch applied.
    pub(crate) async fn apply_now(
        &self,
        object: &ObjectRef,
        patch: Value,
    ) -> Result<(), PatchError> {
        let split =
            split_patch(patch, &object.uid, self.status.subresource()).map_err(|message| {
                PatchError {
                    object: object.to_string(),
                    message,
                    gone: false,
                }
            })?;
        // The status first: a process killed between the two writes has stored a handler's
        // result but not the progress that says the handler is done, so the handler runs
        // again (at least once) instead of counting as done without its result.
        if let Some(status) = split.status {
            self.write(object, &status, true).await?;
        }
        if let Some(main) = split.main {
            self.write(object, &main, false).await?;
        }
        Ok(())
    }

    /// Warns, once per key and kind, when the API server dropped a `status` key of a patch: a
    /// handler's result (`status.<id>`) that cannot be stored on this kind.
    fn warn_if_dropped(&self, object: &ObjectRef, patch: &Value, written: &Value) {
        for key in dropped_status_keys(patch, written) {
            if lock(&self.dropped).insert(key.clone()) {
                warn!(object = %object, resource = %self.writer.info, key = %key,
                    "the API server dropped `status.{key}` from a patch: this kind's status has no \
                     place for it (a built-in kind, or a schema that prunes it), so a handler \
                     result stored there is lost; return nothing and write an annotation instead, \
                     or give the resource's schema `x-kubernetes-preserve-unknown-fields` under \
                     status (warned once per key)");
            }
        }
    }

    /// One part of a patch, retried. The main resource is guarded by `metadata.uid` in the
    /// patch (the API server rejects a changed UID as invalid). The status subresource ignores
    /// metadata in patches, so status writes are guarded by the `metadata.resourceVersion` last
    /// seen for this UID (a conflict re-reads the object by name and checks its UID, at once up
    /// to three times).
    async fn write(
        &self,
        object: &ObjectRef,
        body: &Value,
        status: bool,
    ) -> Result<(), PatchError> {
        let mut version = if status {
            self.records.resource_version(&object.uid)
        } else {
            None
        };
        let mut retrying = Retrying::new(&self.writer.retry, if status { 3 } else { 0 });
        let written = loop {
            let next = self.attempt(object, body, status, &mut version).await;
            if let ControlFlow::Break(result) = retrying.after(next).await {
                break result;
            }
        };
        written.map_err(|gave_up| {
            if gave_up.exhausted {
                warn!(object = %object, error = %gave_up.error.message, "giving up on a patch after retries");
            }
            gave_up.error
        })
    }
    /// One attempt of [`KubePatchSink::write`]; `version` is the status guard (`None`: read it).
    async fn attempt(
        &self,
        object: &ObjectRef,
        body: &Value,
        status: bool,
        version: &mut Option<String>,
    ) -> Next<(), PatchError> {
        let error = |message: String| PatchError {
            object: object.to_string(),
            message,
            gone: false,
        };
        if status && version.is_none() {
            match self.writer.read(object).await {
                Ok(Some(fresh)) => *version = fresh.metadata.resource_version,
                Ok(None) => return Next::Fail(gone(object)),
                Err(err) => {
                    return match classify(&err) {
                        Failure::NotFound => Next::Fail(gone(object)),
                        Failure::Transient(min) => Next::Later {
                            min,
                            error: error(describe(&err)),
                        },
                        _ => Next::Fail(error(describe(&err))),
                    };
                }
            }
        }
        let err = match self
            .writer
            .merge_patch(object, body, version.as_deref())
            .await
        {
            Ok(updated) => {
                self.records
                    .update(&object.uid, FinalizerView::from_object(&updated));
                self.warn_if_dropped(object, body, &updated.data);
                return Next::Done(());
            }
            Err(err) => err,
        };
        let failure = classify(&err);
        let min = match failure {
            Failure::NotFound => return Next::Fail(gone(object)),
            // Most likely a newer version than the one we saw: read it and try again.
            Failure::Conflict if status => {
                *version = None;
                return Next::Stale(error(describe(&err)));
            }
            Failure::Conflict | Failure::Invalid => match self.writer.read(object).await {
                Ok(None) => return Next::Fail(gone(object)),
                Ok(Some(_)) if failure == Failure::Invalid => {
                    return Next::Fail(error(describe(&err)));
                }
                Ok(Some(_)) | Err(_) => None,
            },
            Failure::Transient(min) => min,
            Failure::Forbidden | Failure::Fatal => return Next::Fail(error(describe(&err))),
        };
        debug!(object = %object, error = %describe(&err), "retrying a patch");
        Next::Later {
            min,
            error: error(describe(&err)),
        }
    }
}

/// The error of a write to an object that is gone.
fn gone(object: &ObjectRef) -> PatchError {
    PatchError {
        object: object.to_string(),
        message: "the object is gone (deleted, or replaced by another of the same name)".into(),
        gone: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_the_status_keys_the_server_dropped() {
        let patch = json!({"status": {"kept": 1, "dropped": {"a": 1}, "deleted": null}});
        let written = json!({"metadata": {}, "status": {"kept": 1}});
        assert_eq!(dropped_status_keys(&patch, &written), ["dropped"]);
        assert!(dropped_status_keys(&patch, &json!({})).contains(&"kept".to_owned()));
        assert!(dropped_status_keys(&json!({"spec": {}}), &json!({})).is_empty());
    }

    #[test]
    fn splits_status_into_the_subresource() {
        let split = split_patch(json!({"status": {"t": 1}, "spec": {"a": 2}}), "u1", true).unwrap();
        assert_eq!(
            split.main,
            Some(json!({"spec": {"a": 2}, "metadata": {"uid": "u1"}}))
        );
        assert_eq!(
            split.status,
            Some(json!({"status": {"t": 1}, "metadata": {"uid": "u1"}}))
        );
    }

    #[test]
    fn keeps_status_in_the_main_resource_without_a_subresource() {
        let split = split_patch(json!({"status": {"t": 1}}), "u1", false).unwrap();
        assert_eq!(
            split.main,
            Some(json!({"status": {"t": 1}, "metadata": {"uid": "u1"}}))
        );
        assert_eq!(split.status, None);
    }

    #[test]
    fn merges_the_uid_into_user_metadata() {
        let split = split_patch(json!({"metadata": {"labels": {"a": "b"}}}), "u1", true).unwrap();
        assert_eq!(
            split.main,
            Some(json!({"metadata": {"labels": {"a": "b"}, "uid": "u1"}}))
        );
        assert_eq!(split.status, None);
    }

    #[test]
    fn rejects_a_non_object_patch() {
        assert!(
            split_patch(json!([1]), "u1", true)
                .unwrap_err()
                .contains("JSON object")
        );
    }

    #[test]
    fn status_mode_starts_without_subresource() {
        let mode = StatusMode::default();
        assert!(!mode.subresource());
        mode.set(true);
        assert!(mode.subresource());
        mode.set(false);
        assert!(!mode.subresource());
    }
}
