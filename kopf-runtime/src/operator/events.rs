//! Kubernetes Events (`events.k8s.io/v1`): posted only when a handler asks, plus a Warning on a
//! handler failure or an object that cannot be used.
//!
//! Events are readable by everyone with `view` in the namespace, so the operator's own Warnings
//! carry an error's message without its causes unless the operator opts in
//! ([`OperatorBuilder::error_causes_in_events`](crate::OperatorBuilder::error_causes_in_events)).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::core::erased::Invocation;
use crate::core::object::{ObjectRef, ObjectState};
use crate::core::outcome::HandlerError;
use crate::core::resource::ResourceInfo;
use crate::core::sync::lock;
use crate::handler::{BlockingSafe, Inject};

/// The longest note the API accepts (1 kB); longer notes are cut.
const MAX_NOTE: usize = 1024;
/// Appended to a Warning's note whose causes were left out.
const CAUSES_OMITTED: &str = " (the causes are in the operator's log)";
/// How long a note's recorder is kept after its last event: as long as kube's recorder keeps
/// a series open.
const SERIES_TTL: Duration = Duration::from_secs(6 * 60);

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

/// Posts Events through recorders, within the limit on writes in flight.
///
/// One recorder per note: kube's recorder counts every event with the same object, type,
/// reason and action as a repeat of the first one (a `series` on it) and keeps the first note,
/// so a handler that fails differently (a 422 after a 429, another invalid value) would go on
/// showing its first error. Kubernetes' own recorder (client-go) counts the note in; so does
/// this: the same note again is a repeat, another note is a new Event.
pub(crate) struct EventPoster {
    client: Client,
    reporter: Reporter,
    /// The recorder of each note, and when it was last used.
    recorders: Mutex<HashMap<String, (Recorder, Instant)>>,
    writes: Arc<Semaphore>,
    /// Whether the operator's Warnings keep the causes of an error.
    error_causes: bool,
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

/// The text of one of the operator's own Warnings: what failed, and the error with and without
/// its causes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WarningNote {
    /// What failed, e.g. "handler `sync` failed permanently".
    pub(crate) what: String,
    /// The error's own message.
    pub(crate) summary: String,
    /// The error with its causes (which may quote the object's values, e.g. serde errors).
    pub(crate) message: String,
}

impl WarningNote {
    /// The note to post: with the causes only when `causes` (the operator opted in).
    fn text(self, causes: bool) -> String {
        let Self {
            what,
            summary,
            message,
        } = self;
        if causes || summary == message {
            format!("{what}: {message}")
        } else {
            format!("{what}: {summary}{CAUSES_OMITTED}")
        }
    }
}

impl EventPoster {
    /// A poster for `controller`'s Events, reported by `instance` (`None`: the `POD_NAME`
    /// variable, if set).
    pub(crate) fn new(
        client: Client,
        (controller, instance): (String, Option<String>),
        writes: Arc<Semaphore>,
        error_causes: bool,
    ) -> Self {
        let instance = instance.or_else(|| std::env::var("POD_NAME").ok());
        Self {
            client,
            reporter: Reporter {
                controller,
                instance,
            },
            recorders: Mutex::default(),
            writes,
            error_causes,
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
        let recorder = self.recorder(event.note.as_deref().unwrap_or_default());
        let _permit = self.writes.acquire().await;
        recorder.publish(&event, regarding).await
    }

    /// The recorder of `note` (forgetting those unused for longer than a series lasts).
    fn recorder(&self, note: &str) -> Recorder {
        let now = Instant::now();
        let mut recorders = lock(&self.recorders);
        recorders.retain(|_, (_, used)| now.duration_since(*used) < SERIES_TTL);
        let (recorder, used) = recorders.entry(note.to_owned()).or_insert_with(|| {
            let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
            (recorder, now)
        });
        *used = now;
        recorder.clone()
    }

    /// Posts one of the operator's own Warnings about a failure, logging (not returning) a
    /// failure to post it. The error's causes are left out unless the operator opted in.
    pub(crate) async fn warn(
        &self,
        regarding: &ObjectReference,
        reason: &str,
        action: &str,
        note: WarningNote,
    ) {
        let note = note.text(self.error_causes);
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
    /// The operator's runtime, for the blocking variants.
    runtime: Option<tokio::runtime::Handle>,
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
        let body = object.body_value();
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
        Self {
            poster,
            regarding,
            runtime: tokio::runtime::Handle::try_current().ok(),
        }
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

    /// [`Events::info`] for blocking (`fn`) handlers: posts and waits for the answer on the
    /// handler's own thread.
    ///
    /// ```no_run
    /// fn demo(events: kopf_runtime::Events) -> Result<(), kopf_runtime::EventError> {
    ///     events.info_blocking("Copied", "42 files")
    /// }
    /// # let _ = demo;
    /// ```
    ///
    /// # Errors
    /// [`EventError`] if the API server rejects the event.
    ///
    /// # Panics
    /// When called from async code (a task of a tokio runtime): use [`Events::info`] there.
    pub fn info_blocking(&self, reason: &str, note: impl Into<String>) -> Result<(), EventError> {
        self.post_blocking(EventType::Normal, reason, note.into())
    }

    /// [`Events::warning`] for blocking (`fn`) handlers (see [`Events::info_blocking`]).
    ///
    /// ```no_run
    /// fn demo(events: kopf_runtime::Events) -> Result<(), kopf_runtime::EventError> {
    ///     events.warning_blocking("CopyFailed", "the disk is full")
    /// }
    /// # let _ = demo;
    /// ```
    ///
    /// # Errors
    /// [`EventError`] if the API server rejects the event.
    ///
    /// # Panics
    /// When called from async code (a task of a tokio runtime): use [`Events::warning`] there.
    pub fn warning_blocking(
        &self,
        reason: &str,
        note: impl Into<String>,
    ) -> Result<(), EventError> {
        self.post_blocking(EventType::Warning, reason, note.into())
    }

    fn post_blocking(
        &self,
        type_: EventType,
        reason: &str,
        note: String,
    ) -> Result<(), EventError> {
        match &self.runtime {
            Some(runtime) => runtime.block_on(self.post(type_, reason, note)),
            None => Err(self.error(kube::Error::Service(
                "these Events were made outside the operator's runtime".into(),
            ))),
        }
    }

    fn error(&self, source: kube::Error) -> EventError {
        let name = self.regarding.name.clone().unwrap_or_default();
        EventError {
            object: match &self.regarding.namespace {
                Some(ns) => format!("{ns}/{name}"),
                None => name,
            },
            source,
        }
    }

    async fn post(&self, type_: EventType, reason: &str, note: String) -> Result<(), EventError> {
        self.poster
            .post(&self.regarding, type_, reason, reason, note)
            .await
            .map_err(|source| self.error(source))
    }
}

/// Blocking handlers post with [`Events::info_blocking`] and [`Events::warning_blocking`].
impl BlockingSafe for Events {}

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

    #[test]
    fn a_note_has_the_causes_only_when_asked_for() {
        let note = |summary: &str, message: &str| WarningNote {
            what: "handler `sync` failed permanently".into(),
            summary: summary.into(),
            message: message.into(),
        };
        let chained = note(
            "cannot sync: a colon",
            "cannot sync: a colon: refused: os error 111",
        );
        assert_eq!(
            chained.clone().text(false),
            "handler `sync` failed permanently: cannot sync: a colon \
             (the causes are in the operator's log)"
        );
        assert_eq!(
            chained.text(true),
            "handler `sync` failed permanently: cannot sync: a colon: refused: os error 111"
        );
        let plain = note("the bucket is gone", "the bucket is gone");
        assert_eq!(
            plain.text(false),
            "handler `sync` failed permanently: the bucket is gone"
        );
    }

    use std::future::Future;
    use std::pin::Pin;
    use std::sync::Mutex;
    use std::task::{Context, Poll};

    use crate::core::outcome::HandlerError;
    use http::{Request, Response};
    use kube::client::Body;

    /// A fake API server that records the method and the note of the events posted to it.
    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<(String, String)>>>);

    impl Capture {
        fn notes(&self) -> Vec<String> {
            let requests = self.0.lock().expect("not poisoned");
            requests.iter().map(|(_, note)| note.clone()).collect()
        }
    }

    impl tower::Service<Request<Body>> for Capture {
        type Response = Response<Body>;
        type Error = kube::Error;
        type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, kube::Error>> + Send>>;

        fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), kube::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: Request<Body>) -> Self::Future {
            let notes = Arc::clone(&self.0);
            let method = request.method().to_string();
            Box::pin(async move {
                let body = request.into_body().collect_bytes().await?;
                let event: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                let note = event["note"].as_str().unwrap_or_default().to_owned();
                notes.lock().expect("not poisoned").push((method, note));
                let created = Response::builder()
                    .status(201)
                    .body(Body::from(body.to_vec()));
                Ok(created.expect("a valid response"))
            })
        }
    }

    fn poster(capture: &Capture, error_causes: bool) -> EventPoster {
        let client = Client::new(capture.clone(), "default");
        let writes = Arc::new(Semaphore::new(1));
        EventPoster::new(client, ("kopf".into(), None), writes, error_causes)
    }

    fn example() -> ObjectReference {
        ObjectReference {
            name: Some("example".into()),
            namespace: Some("default".into()),
            ..ObjectReference::default()
        }
    }

    /// The note of the Warning the operator posts about this failure.
    async fn posted_warning(error_causes: bool, note: WarningNote) -> String {
        let capture = Capture::default();
        let poster = poster(&capture, error_causes);
        poster.warn(&example(), "HandlerFailed", "sync", note).await;
        let notes = capture.notes();
        assert_eq!(notes.len(), 1, "{notes:?}");
        notes.into_iter().next().unwrap_or_default()
    }

    #[tokio::test]
    async fn the_given_identity_reports_the_events() {
        let client = Client::new(Capture::default(), "default");
        let writes = Arc::new(Semaphore::new(1));
        let named = EventPoster::new(client, ("kopf".into(), Some("pod-7".into())), writes, false);
        assert_eq!(named.reporter.instance.as_deref(), Some("pod-7"));
        assert_eq!(named.reporter.controller, "kopf");
    }

    /// What the operator posts when a handler fails with a cause that quotes the object.
    fn failure_note() -> WarningNote {
        let serde = serde_json::from_str::<u32>("\"hunter2\"").expect_err("not a number");
        let error = HandlerError::msg("cannot read spec.port").with_source(serde);
        WarningNote {
            what: "handler `sync` failed and will be retried".into(),
            summary: error.to_string(),
            message: error.report(),
        }
    }

    #[tokio::test]
    async fn a_failure_warning_leaves_the_causes_out_by_default() {
        let note = posted_warning(false, failure_note()).await;
        assert_eq!(
            note,
            "handler `sync` failed and will be retried: cannot read spec.port \
             (the causes are in the operator's log)"
        );
        assert!(!note.contains("hunter2"), "{note}");
    }

    #[tokio::test]
    async fn a_failure_warning_has_the_whole_chain_when_the_operator_opts_in() {
        let note = posted_warning(true, failure_note()).await;
        assert!(note.ends_with("cannot read spec.port: invalid type: string \"hunter2\", expected u32 at line 1 column 9"), "{note}");
    }

    /// Posts a Warning with `note` about the example object.
    async fn warn(poster: &EventPoster, note: &str) {
        let (regarding, warning) = (example(), EventType::Warning);
        let posted = poster.post(&regarding, warning, "HandlerFailed", "sync", note.into());
        posted.await.expect("posted");
    }

    #[tokio::test(start_paused = true)]
    async fn the_same_note_again_is_a_repeat_and_another_note_a_new_event() {
        let capture = Capture::default();
        let poster = poster(&capture, false);
        let (first, second) = (
            "422: `not a key!` is invalid",
            "422: `still bad!` is invalid",
        );
        for note in [first, first, second, second] {
            warn(&poster, note).await;
        }
        // Forgotten once a series would have ended: the same note is a new Event again.
        tokio::time::advance(SERIES_TTL + Duration::from_secs(1)).await;
        warn(&poster, first).await;
        assert_eq!(lock(&poster.recorders).len(), 1);
        let requests = capture.0.lock().expect("not poisoned").clone();
        let expected = [
            ("POST", first),
            ("PATCH", first),
            ("POST", second),
            ("PATCH", second),
            ("POST", first),
        ];
        let expected: Vec<_> = (expected.iter())
            .map(|(m, n)| ((*m).to_owned(), (*n).to_owned()))
            .collect();
        assert_eq!(requests, expected);
    }
}
