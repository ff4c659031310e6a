//! Kubernetes Events (`events.k8s.io/v1`): posted only when a handler asks, plus a Warning on a
//! handler failure or an object that cannot be used.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tokio::sync::Semaphore;

use crate::core::handler::Invocation;
use crate::core::object::{ObjectRef, ObjectState};
use crate::core::outcome::HandlerError;
use crate::core::resource::ResourceInfo;
use crate::handler::Inject;

/// The longest note the API accepts (1 kB); longer notes are cut.
const MAX_NOTE: usize = 1024;

/// Why an Event could not be posted.
///
/// ```
/// fn log(err: &kopf_runtime::EventError) {
///     eprintln!("{err}: {}", err.source); // "cannot post an event about ns/name: <API error>"
/// }
/// # let _ = log;
/// ```
#[derive(Debug, thiserror::Error)]
#[error("cannot post an event about {object}")]
pub struct EventError {
    /// The object, as `namespace/name`.
    pub object: String,
    /// The API error.
    #[source]
    pub source: kube::Error,
}

/// Posts Events through one shared recorder, within the limit on writes in flight.
pub(crate) struct EventPoster {
    recorder: Recorder,
    writes: Arc<Semaphore>,
}

impl std::fmt::Debug for EventPoster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EventPoster")
    }
}

fn cut(mut note: String) -> String {
    if note.len() > MAX_NOTE {
        let mut end = MAX_NOTE - 3;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push_str("...");
    }
    note
}

impl EventPoster {
    pub(crate) fn new(client: Client, controller: String, writes: Arc<Semaphore>) -> Self {
        let instance = std::env::var("POD_NAME").ok();
        Self {
            recorder: Recorder::new(
                client,
                Reporter {
                    controller,
                    instance,
                },
            ),
            writes,
        }
    }

    /// Posts one event.
    ///
    /// # Cancellation safety
    /// Dropping the future may or may not leave the event posted.
    pub(crate) async fn post(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) -> Result<(), kube::Error> {
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(cut(note)),
            action: action.to_owned(),
            secondary: None,
        };
        let _permit = self.writes.acquire().await;
        self.recorder.publish(&event, regarding).await
    }

    /// Posts a Warning, logging (not returning) a failure to post it.
    pub(crate) async fn warn(
        &self,
        regarding: &ObjectReference,
        reason: &str,
        action: &str,
        note: String,
    ) {
        if let Err(err) = self
            .post(regarding, EventType::Warning, reason, action, note)
            .await
        {
            tracing::warn!(object = ?regarding.name, error = %err, "cannot post a Warning event");
        }
    }
}

/// An object reference for Events from the object's identity and its resource kind.
pub(crate) fn reference(info: &ResourceInfo, object: &ObjectRef) -> ObjectReference {
    ObjectReference {
        api_version: Some(info.api_version()),
        kind: Some(info.kind.to_string()),
        name: Some(object.name.to_string()),
        namespace: object.namespace.as_deref().map(str::to_owned),
        uid: Some(object.uid.to_string()),
        ..ObjectReference::default()
    }
}

/// Posts Kubernetes Events (`events.k8s.io/v1`) about the handler's object. The operator posts
/// no events of its own except a Warning when a handler fails or an object cannot be used.
///
/// Events are created in the object's namespace (cluster-scoped objects: `default`); the
/// operator's service account needs `create` and `patch` on `events.k8s.io` `events`.
///
/// ```no_run
/// # async fn demo(events: kopf_runtime::Events) -> Result<(), kopf_runtime::EventError> {
/// events.info("Synced", "the backup is up to date").await?;
/// events.warning("BackupFailed", "the bucket is not reachable").await?;
/// # Ok(()) }
/// # let _ = demo;
/// ```
#[derive(Clone)]
pub struct Events {
    poster: Arc<EventPoster>,
    regarding: ObjectReference,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events")
            .field("regarding", &self.regarding.name)
            .finish_non_exhaustive()
    }
}

impl Events {
    /// Events about `object`, posted with the operator's recorder.
    pub(crate) fn for_object(poster: Arc<EventPoster>, object: &ObjectState) -> Self {
        let body = object.body();
        let reference = object.reference();
        let regarding = ObjectReference {
            api_version: body
                .get("apiVersion")
                .and_then(|v| v.as_str())
                .map(str::to_owned),
            kind: body.get("kind").and_then(|v| v.as_str()).map(str::to_owned),
            name: Some(reference.name.to_string()),
            namespace: reference.namespace.as_deref().map(str::to_owned),
            uid: Some(reference.uid.to_string()),
            ..ObjectReference::default()
        };
        Self { poster, regarding }
    }

    /// Posts a `Normal` event.
    ///
    /// ```no_run
    /// # async fn demo(events: kopf_runtime::Events) {
    /// if let Err(err) = events.info("Resized", "the volume has 10 GiB now").await {
    ///     tracing::warn!(error = %err, "no event");
    /// }
    /// # }
    /// # let _ = demo;
    /// ```
    ///
    /// # Errors
    /// [`EventError`] if the API server rejects the event.
    ///
    /// # Cancellation safety
    /// Dropping the future may or may not leave the event posted.
    pub async fn info(&self, reason: &str, note: impl Into<String>) -> Result<(), EventError> {
        self.post(EventType::Normal, reason, note.into()).await
    }

    /// Posts a `Warning` event.
    ///
    /// ```no_run
    /// # async fn demo(events: kopf_runtime::Events) -> Result<(), kopf_runtime::EventError> {
    /// events.warning("QuotaExceeded", "the backup needs 20 GiB, 10 GiB are left").await?;
    /// # Ok(()) }
    /// # let _ = demo;
    /// ```
    ///
    /// # Errors
    /// [`EventError`] if the API server rejects the event.
    ///
    /// # Cancellation safety
    /// Dropping the future may or may not leave the event posted.
    pub async fn warning(&self, reason: &str, note: impl Into<String>) -> Result<(), EventError> {
        self.post(EventType::Warning, reason, note.into()).await
    }

    async fn post(&self, type_: EventType, reason: &str, note: String) -> Result<(), EventError> {
        self.poster
            .post(&self.regarding, type_, reason, reason, note)
            .await
            .map_err(|source| EventError {
                object: match &self.regarding.namespace {
                    Some(ns) => format!(
                        "{ns}/{}",
                        self.regarding.name.as_deref().unwrap_or_default()
                    ),
                    None => self.regarding.name.clone().unwrap_or_default(),
                },
                source,
            })
    }
}

impl<K> Inject<K> for Events {
    fn inject(invocation: &Invocation) -> Result<Self, HandlerError> {
        let poster = invocation.services.get::<EventPoster>().ok_or_else(|| {
            HandlerError::permanent(
                "`Events` can only be injected into handlers run by an operator",
            )
        })?;
        Ok(Self::for_object(poster, &invocation.object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_notes_are_cut_at_a_char_boundary() {
        let note = cut("é".repeat(600));
        assert!(note.len() <= MAX_NOTE && note.ends_with("..."));
        assert_eq!(cut("short".into()), "short");
    }
}
