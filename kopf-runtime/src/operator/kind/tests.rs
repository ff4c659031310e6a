//! A kind's state against a fake API server that records every request: which replica posts
//! the operator's own Warnings.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;

use super::watch::{Observer, Selection};
use super::{KindState, Shared};
use crate::core::clearance::Clearance;
use crate::core::erased::Services;
use crate::core::resource::ResourceInfo;
use crate::core::supervisor::{BlockingPool, Supervisor, SupervisorConfig};
use crate::operator::events::EventPoster;
use crate::operator::scope::{Follower, Scope};
use crate::operator::watched::Watched;
use crate::operator::write::patch::KubePatchSink;
use crate::operator::write::{RetrySettings, Writer, api_resource};

/// A fake API server: records the path of every request, answers `201` with the request body.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<String>>>);

impl Capture {
    /// The Events posted so far.
    fn events(&self) -> usize {
        let paths = self.0.lock().expect("not poisoned");
        paths.iter().filter(|p| p.contains("/events")).count()
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
        let paths = Arc::clone(&self.0);
        Box::pin(async move {
            let path = request.uri().path().to_owned();
            paths.lock().expect("not poisoned").push(path);
            let body = request.into_body().collect_bytes().await?;
            let created = Response::builder()
                .status(201)
                .body(Body::from(body.to_vec()));
            Ok(created.expect("a valid response"))
        })
    }
}

/// A kind's state whose client is `capture`; `elected`: it starts as a standby.
fn kind_state(capture: &Capture, elected: bool) -> Arc<KindState> {
    let client = Client::new(capture.clone(), "default");
    let info = ResourceInfo::new("kopf.dev", "v1", "KopfExample", "kopfexamples", true);
    let writes = Arc::new(Semaphore::new(8));
    let poster = EventPoster::new(client.clone(), ("kopf".into(), None), writes.clone(), false);
    let clearance = elected.then(|| Clearance::new(watch::channel(None).1));
    let shared = Shared {
        client: client.clone(),
        services: Services::default(),
        poster: Arc::new(poster),
        blocking: BlockingPool::default(),
        writes: writes.clone(),
        cap: None,
        finalizer: "kopf.dev/test".into(),
        field_manager: "kopf".into(),
        config: SupervisorConfig::default(),
        selection: Selection {
            namespaces: Vec::new(),
            label_selector: None,
        },
        watch_stop: CancellationToken::new(),
        outcomes: None,
        clearance,
        sharding: None,
        metrics: false,
    };
    let writer = Writer {
        client,
        resource: Arc::new(api_resource(&info)),
        info: info.clone(),
        field_manager: shared.field_manager.clone(),
        writes,
        retry: RetrySettings::default(),
    };
    let sink = KubePatchSink {
        writer,
        status: Arc::default(),
        records: Arc::default(),
        dropped: Arc::default(),
    };
    let (supervisor, _effects) =
        Supervisor::new(Vec::new(), Services::default(), shared.config.clone());
    Arc::new(KindState::new(
        info,
        supervisor,
        sink,
        &shared,
        super::lockstep::Lockstep::default(),
    ))
}

/// A version of object `u1` nested deeper than the decoder's limit.
fn unreadable() -> Watched {
    let deep = (0..150).fold(
        serde_json::json!(1),
        |inner, _| serde_json::json!({ "a": inner }),
    );
    let body = serde_json::json!({
        "apiVersion": "kopf.dev/v1", "kind": "KopfExample",
        "metadata": {"name": "a", "namespace": "ns", "uid": "u1", "resourceVersion": "1"},
        "spec": {"deep": deep},
    });
    let watched = Watched::from_raw(&body.to_string());
    assert!(watched.body.is_err(), "the version is unreadable");
    watched
}

/// Lets the spawned posts run (the runtime is single-threaded).
async fn spin() {
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn a_standby_posts_no_warning_about_an_unreadable_object() {
    let capture = Capture::default();
    let state = kind_state(&capture, true);
    assert!(state.observe(unreadable()).is_some());
    spin().await;
    assert_eq!(capture.events(), 0, "a standby posted a Warning");
    // Positive control: once it leads, the same version is warned about, once.
    Arc::clone(&state).serve(Scope::All);
    assert!(state.observe(unreadable()).is_some());
    spin().await;
    assert_eq!(capture.events(), 1);
}

#[tokio::test]
async fn a_replica_serving_everything_posts_its_warning() {
    let capture = Capture::default();
    let state = kind_state(&capture, false);
    assert!(state.observe(unreadable()).is_some());
    spin().await;
    assert_eq!(capture.events(), 1);
}
