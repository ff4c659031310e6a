//! The [`PatchSink`] of one resource kind: UID-guarded merge patches with retries.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::future::BoxFuture;
use kube::api::{DynamicObject, Patch, PatchParams};
use serde_json::{Map, Value};
use tracing::{debug, warn};

use super::api::{Failure, Writer, classify, describe, pause};
use super::finalizer::FinalizerView;
use super::records::Records;
use crate::core::object::ObjectRef;
use crate::core::sink::{PatchError, PatchSink};

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
        if let Some(main) = split.main {
            self.write(object, &main, false).await?;
        }
        if let Some(status) = split.status {
            self.write(object, &status, true).await?;
        }
        Ok(())
    }

    /// One part of a patch, retried. The main resource is guarded by `metadata.uid` in the
    /// patch (the API server rejects a changed UID as invalid). The status subresource ignores
    /// metadata in patches, so status writes are guarded by the `metadata.resourceVersion` last
    /// seen for this UID (a conflict re-reads the object by name and checks its UID).
    async fn write(
        &self,
        object: &ObjectRef,
        body: &Value,
        status: bool,
    ) -> Result<(), PatchError> {
        let error = |message: String, gone: bool| PatchError {
            object: object.to_string(),
            message,
            gone,
        };
        let gone = || {
            error(
                "the object is gone (deleted, or replaced by another of the same name)".into(),
                true,
            )
        };
        let mut delays = self.writer.retry.delays();
        let mut version = if status {
            self.records.resource_version(&object.uid)
        } else {
            None
        };
        let mut conflicts = 0;
        loop {
            if status && version.is_none() {
                match self.writer.read(object).await {
                    Ok(Some(fresh)) => version = fresh.metadata.resource_version,
                    Ok(None) => return Err(gone()),
                    Err(err) => {
                        let min = match classify(&err) {
                            Failure::NotFound => return Err(gone()),
                            Failure::Transient(after) => after,
                            _ => return Err(error(describe(&err), false)),
                        };
                        if !pause(&mut delays, min).await {
                            return Err(error(describe(&err), false));
                        }
                        continue;
                    }
                }
            }
            let err = match self.send(object, body, version.as_deref()).await {
                Ok(updated) => {
                    self.records
                        .update(&object.uid, FinalizerView::from_object(&updated));
                    return Ok(());
                }
                Err(err) => err,
            };
            let min = match classify(&err) {
                Failure::NotFound => return Err(gone()),
                Failure::Conflict if status => {
                    // Most likely a newer version than the one we saw: read it and try again.
                    version = None;
                    conflicts += 1;
                    if conflicts <= 3 {
                        continue;
                    }
                    None
                }
                Failure::Conflict | Failure::Invalid => match self.writer.read(object).await {
                    Ok(None) => return Err(gone()),
                    Ok(Some(_)) if classify(&err) == Failure::Invalid => {
                        return Err(error(describe(&err), false));
                    }
                    Ok(Some(_)) | Err(_) => None,
                },
                Failure::Transient(after) => after,
                Failure::Forbidden | Failure::Fatal => return Err(error(describe(&err), false)),
            };
            debug!(object = %object, error = %describe(&err), "retrying a patch");
            if !pause(&mut delays, min).await {
                warn!(object = %object, error = %describe(&err), "giving up on a patch after retries");
                return Err(error(describe(&err), false));
            }
        }
    }

    /// Sends one merge patch: to the status subresource when `version` is given (guarded by it).
    async fn send(
        &self,
        object: &ObjectRef,
        body: &Value,
        version: Option<&str>,
    ) -> Result<DynamicObject, kube::Error> {
        let api = self.writer.api_for(object);
        let params = PatchParams {
            field_manager: Some(self.writer.field_manager.to_string()),
            ..Default::default()
        };
        let _permit = self.writer.writes.acquire().await;
        // Boxed after the permit (see `finalizer::send`).
        match version {
            Some(version) => {
                let mut body = body.clone();
                body["metadata"]["resourceVersion"] = Value::String(version.to_owned());
                Box::pin(api.patch_status(&object.name, &params, &Patch::Merge(&body))).await
            }
            None => Box::pin(api.patch(&object.name, &params, &Patch::Merge(body))).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
