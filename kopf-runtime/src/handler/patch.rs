//! `Patch`: the JSON merge-patch builder a handler gets to change its object.

use crate::core::sync::lock;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Map, Value};

use crate::core::erased::Invocation;
use crate::core::object::ObjectRef;
use crate::core::sink::{PatchError, PatchSinkHandle};

/// A JSON merge patch (RFC 7386) that a handler builds for its object.
///
/// Whatever is pending when the invocation returns is applied after the run, whether it
/// succeeded or failed (as kopf does; not after a panic, a cancellation or a timeout, which
/// drop the invocation). Long-running daemons call
/// [`Patch::flush`] to apply what they built so far without exiting. Clones share one patch.
///
/// ```
/// use kopf_runtime::Patch;
/// use serde_json::json;
/// # let object = kopf_runtime::engine::ObjectState::from_json(
/// #     json!({"metadata": {"name": "a", "uid": "u"}})).unwrap();
/// # let patch = Patch::detached(object.reference().clone());
/// patch.merge(json!({"metadata": {"labels": {"seen": "yes"}}}));
/// patch.status("phase", "Running");
/// patch.status("replicas", 3);
/// assert_eq!(patch.pending(), Some(json!({
///     "metadata": {"labels": {"seen": "yes"}},
///     "status": {"phase": "Running", "replicas": 3},
/// })));
/// ```
#[derive(Clone)]
pub struct Patch {
    inner: Arc<Mutex<PatchState>>,
}

struct PatchState {
    object: ObjectRef,
    pending: Map<String, Value>,
    invalid: Option<String>,
    sink: Option<PatchSinkHandle>,
    runtime: Option<tokio::runtime::Handle>,
}

impl fmt::Debug for Patch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = self.lock();
        f.debug_struct("Patch")
            .field("object", &inner.object)
            .field("pending", &inner.pending)
            .finish_non_exhaustive()
    }
}

/// Merges `patch` into `into` so that applying the result equals applying both in order.
fn merge_into(into: &mut Map<String, Value>, patch: Map<String, Value>) {
    for (key, value) in patch {
        match (into.get_mut(&key), value) {
            (Some(Value::Object(existing)), Value::Object(nested)) => merge_into(existing, nested),
            (_, value) => {
                into.insert(key, value);
            }
        }
    }
}

impl Patch {
    /// A patch for `object` that no operator applies; only [`Patch::pending`] shows what was
    /// built (for tests and examples). `flush` fails on it.
    ///
    /// ```
    /// # use kopf_runtime::{ObjectRef, Patch};
    /// let patch = Patch::detached(ObjectRef { uid: "u".into(), namespace: None, name: "a".into() });
    /// assert!(patch.is_empty());
    /// ```
    #[must_use]
    pub fn detached(object: ObjectRef) -> Self {
        Self::with_sink(object, None)
    }

    pub(crate) fn for_invocation(invocation: &Invocation) -> Self {
        let sink = invocation
            .services
            .get::<PatchSinkHandle>()
            .map(|h| (*h).clone());
        Self::with_sink(invocation.object.reference().clone(), sink)
    }

    fn with_sink(object: ObjectRef, sink: Option<PatchSinkHandle>) -> Self {
        let runtime = tokio::runtime::Handle::try_current().ok();
        let inner = PatchState {
            object,
            pending: Map::new(),
            invalid: None,
            sink,
            runtime,
        };
        Self {
            inner: Arc::new(Mutex::new(inner)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, PatchState> {
        // Plain data: a panic while holding the lock cannot leave it inconsistent.
        lock(&self.inner)
    }

    /// Merges a JSON merge patch into the pending one (objects merge key by key, any other
    /// value replaces, `null` deletes the key when applied).
    ///
    /// A patch that is not a JSON object cannot apply to a Kubernetes object: it is recorded as
    /// a mistake, and the invocation (or the next `flush`) fails with an error saying so.
    ///
    /// ```
    /// # use kopf_runtime::{ObjectRef, Patch}; use serde_json::json;
    /// # let patch = Patch::detached(ObjectRef { uid: "u".into(), namespace: None, name: "a".into() });
    /// patch.merge(json!({"spec": {"a": 1, "b": 2}}));
    /// patch.merge(json!({"spec": {"b": null}}));
    /// assert_eq!(patch.pending(), Some(json!({"spec": {"a": 1, "b": null}})));
    /// ```
    pub fn merge(&self, patch: Value) -> &Self {
        let mut inner = self.lock();
        match patch {
            Value::Object(map) => merge_into(&mut inner.pending, map),
            other => {
                let found = match other {
                    Value::Null => "null",
                    Value::Bool(_) => "a boolean",
                    Value::Number(_) => "a number",
                    Value::String(_) => "a string",
                    Value::Array(_) => "an array",
                    Value::Object(_) => unreachable!("handled above"),
                };
                inner.invalid.get_or_insert_with(|| {
                    format!("a merge patch must be a JSON object, but the handler passed {found}")
                });
            }
        }
        drop(inner);
        self
    }

    /// Sets `status.<key>` to `value`.
    ///
    /// ```
    /// # use kopf_runtime::{ObjectRef, Patch}; use serde_json::json;
    /// # let patch = Patch::detached(ObjectRef { uid: "u".into(), namespace: None, name: "a".into() });
    /// patch.status("ready", true);
    /// assert_eq!(patch.pending(), Some(json!({"status": {"ready": true}})));
    /// ```
    pub fn status(&self, key: &str, value: impl Into<Value>) -> &Self {
        let mut status = Map::new();
        status.insert(key.to_owned(), value.into());
        let mut patch = Map::new();
        patch.insert("status".to_owned(), Value::Object(status));
        merge_into(&mut self.lock().pending, patch);
        self
    }

    /// Whether nothing is pending.
    ///
    /// ```
    /// # use kopf_runtime::{ObjectRef, Patch};
    /// # let patch = Patch::detached(ObjectRef { uid: "u".into(), namespace: None, name: "a".into() });
    /// assert!(patch.is_empty());
    /// patch.status("x", 1);
    /// assert!(!patch.is_empty());
    /// ```
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.lock().pending.is_empty()
    }

    /// A copy of the pending patch (`None` if empty).
    ///
    /// ```
    /// # use kopf_runtime::{ObjectRef, Patch};
    /// # let patch = Patch::detached(ObjectRef { uid: "u".into(), namespace: None, name: "a".into() });
    /// assert_eq!(patch.pending(), None);
    /// ```
    #[must_use]
    pub fn pending(&self) -> Option<Value> {
        let inner = self.lock();
        (!inner.pending.is_empty()).then(|| Value::Object(inner.pending.clone()))
    }

    /// Takes the pending patch for applying; `Err` if the handler passed an invalid patch.
    pub(crate) fn take(&self) -> Result<Option<Value>, String> {
        let mut inner = self.lock();
        if let Some(invalid) = inner.invalid.take() {
            return Err(invalid);
        }
        let pending = std::mem::take(&mut inner.pending);
        Ok((!pending.is_empty()).then_some(Value::Object(pending)))
    }

    /// Puts back a patch that failed to apply, under anything merged since.
    fn restore(&self, failed: Value) {
        let mut inner = self.lock();
        if let Value::Object(mut restored) = failed {
            merge_into(&mut restored, std::mem::take(&mut inner.pending));
            inner.pending = restored;
        }
    }

    /// Applies the pending patch now, through the operator's patch sink. On success nothing is
    /// pending any more; on failure the patch stays pending (and is retried by the next flush or
    /// after the run).
    ///
    /// # Errors
    /// [`PatchError`] if the API request fails, the handler passed an invalid patch, or the
    /// patch is not attached to an operator (e.g. [`Patch::detached`]).
    ///
    /// # Cancellation safety
    /// If the future is dropped while the request is in flight, the patch may or may not have
    /// been applied, and it is no longer pending.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// # use kopf_runtime::{ObjectRef, Patch};
    /// # let patch = Patch::detached(ObjectRef { uid: "u".into(), namespace: None, name: "a".into() });
    /// patch.status("x", 1);
    /// let err = patch.flush().await.unwrap_err();
    /// assert!(err.message.contains("not attached"));
    /// assert!(!patch.is_empty()); // still pending
    /// # }
    /// ```
    pub async fn flush(&self) -> Result<(), PatchError> {
        let (object, sink, taken) = {
            let mut inner = self.lock();
            let error = |message: String| PatchError {
                object: inner.object.to_string(),
                message,
                gone: false,
            };
            if let Some(invalid) = inner.invalid.clone() {
                return Err(error(invalid));
            }
            let Some(sink) = inner.sink.clone() else {
                return Err(error("the patch is not attached to an operator".to_owned()));
            };
            if inner.pending.is_empty() {
                return Ok(());
            }
            let pending = Value::Object(std::mem::take(&mut inner.pending));
            (inner.object.clone(), sink, pending)
        };
        let result = sink.0.apply(&object, taken.clone()).await;
        if result.is_err() {
            self.restore(taken);
        }
        result
    }

    /// [`Patch::flush`] for blocking (`fn`) handlers: blocks the current thread until the patch
    /// is applied. Never call it from async code (it panics there, as any `block_on` does).
    ///
    /// # Errors
    /// As [`Patch::flush`]; also when the patch was created outside a tokio runtime.
    ///
    /// ```
    /// # use kopf_runtime::{ObjectRef, Patch};
    /// # let patch = Patch::detached(ObjectRef { uid: "u".into(), namespace: None, name: "a".into() });
    /// assert!(patch.flush_blocking().is_ok()); // nothing pending: nothing to do
    /// ```
    pub fn flush_blocking(&self) -> Result<(), PatchError> {
        let runtime = {
            let inner = self.lock();
            if inner.pending.is_empty() && inner.invalid.is_none() {
                return Ok(());
            }
            match inner.runtime.clone() {
                Some(runtime) => runtime,
                None => {
                    return Err(PatchError {
                        object: inner.object.to_string(),
                        message: "the patch was created outside a tokio runtime".to_owned(),
                        gone: false,
                    });
                }
            }
        };
        runtime.block_on(self.flush())
    }
}

#[cfg(test)]
mod tests {
    use futures::future::BoxFuture;
    use serde_json::json;

    use super::*;
    use crate::core::sink::PatchSink;

    struct Recorder(Mutex<Vec<Value>>, bool);

    impl PatchSink for Recorder {
        fn apply(
            &self,
            object: &ObjectRef,
            patch: Value,
        ) -> BoxFuture<'static, Result<(), PatchError>> {
            self.0.lock().unwrap().push(patch);
            let result = if self.1 {
                Err(PatchError {
                    object: object.to_string(),
                    message: "409".into(),
                    gone: false,
                })
            } else {
                Ok(())
            };
            Box::pin(async move { result })
        }
    }

    fn reference() -> ObjectRef {
        ObjectRef {
            uid: "u".into(),
            namespace: Some("ns".into()),
            name: "a".into(),
        }
    }

    #[tokio::test]
    async fn flush_applies_and_clears() {
        let sink = Arc::new(Recorder(Mutex::new(Vec::new()), false));
        let patch = Patch::with_sink(reference(), Some(PatchSinkHandle(sink.clone())));
        patch.status("a", 1);
        patch.flush().await.unwrap();
        assert!(patch.is_empty());
        patch.flush().await.unwrap(); // nothing pending: no request
        assert_eq!(*sink.0.lock().unwrap(), vec![json!({"status": {"a": 1}})]);
    }

    #[tokio::test]
    async fn failed_flush_keeps_the_patch_under_newer_changes() {
        let sink = Arc::new(Recorder(Mutex::new(Vec::new()), true));
        let patch = Patch::with_sink(reference(), Some(PatchSinkHandle(sink)));
        patch.status("a", 1).status("b", 1);
        assert_eq!(patch.flush().await.unwrap_err().message, "409");
        patch.status("b", 2);
        patch.restore(json!({"status": {"c": 3}}));
        assert_eq!(
            patch.pending(),
            Some(json!({"status": {"a": 1, "b": 2, "c": 3}}))
        );
    }

    #[test]
    fn non_object_patch_is_reported() {
        let patch = Patch::detached(reference());
        patch.merge(json!([1, 2]));
        assert_eq!(
            patch.take().unwrap_err(),
            "a merge patch must be a JSON object, but the handler passed an array"
        );
        assert_eq!(patch.take(), Ok(None));
    }
}
