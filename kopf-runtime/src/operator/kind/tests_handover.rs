//! A shard member's kind hands an object over while its output waits for a slow write: the
//! object counts as busy (its range is not released) until the output is written, and it is
//! written though the object left the member's scope; after a lapse it is given up.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Method, Request, Response};
use kube::Client;
use kube::client::Body;
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::watch::{Observer, Selection};
use super::{KindState, Shared};
use crate::core::clearance::Clearance;
use crate::core::effects::Effect;
use crate::core::erased::{Call, ErasedHandler, Invocation, MatchError, Output, Services};
use crate::core::object::ObjectState;
use crate::core::outcome::HandlerError;
use crate::core::resource::ResourceInfo;
use crate::core::spec::{HandlerKind, HandlerSpec};
use crate::core::supervisor::{BlockingPool, Supervisor, SupervisorConfig};
use crate::operator::events::EventPoster;
use crate::operator::ha::ranges::{RangeSet, shard_of};
use crate::operator::ha::sharding::ShardWatch;
use crate::operator::scope::{Follower, Scope};
use crate::operator::watched::Watched;
use crate::operator::write::patch::KubePatchSink;
use crate::operator::write::{RetrySettings, Writer, api_resource};

/// The object every request is answered with.
const OBJECT: &str = r#"{"apiVersion": "kopf.dev/v1", "kind": "KopfExample",
    "metadata": {"name": "a", "namespace": "ns", "uid": "u1", "resourceVersion": "2"}}"#;

/// A fake API server whose PATCHes wait while its gate is closed; records their bodies.
#[derive(Clone)]
struct Gated {
    open: watch::Sender<bool>,
    patches: Arc<Mutex<Vec<String>>>,
}

impl Gated {
    fn closed() -> Self {
        Self {
            open: watch::Sender::new(false),
            patches: Arc::default(),
        }
    }

    /// The PATCHes that passed the gate with `needle` in their body.
    fn patched(&self, needle: &str) -> usize {
        let patches = self.patches.lock().expect("not poisoned");
        patches.iter().filter(|p| p.contains(needle)).count()
    }
}

impl tower::Service<Request<Body>> for Gated {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, kube::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), kube::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let (mut open, patches) = (self.open.subscribe(), Arc::clone(&self.patches));
        Box::pin(async move {
            let patch = request.method() == Method::PATCH;
            let body = request.into_body().collect_bytes().await?;
            if patch {
                let _open = open.wait_for(|open| *open).await;
                let text = String::from_utf8_lossy(&body).into_owned();
                patches.lock().expect("not poisoned").push(text);
            }
            let answer = Response::builder()
                .status(200)
                .body(Body::from(OBJECT.as_bytes().to_vec()));
            Ok(answer.expect("a valid response"))
        })
    }
}

/// A daemon that returns at once with a patch: an output to write. The two daemons' patches
/// do not compose (each sets an object where the other sets a number), so they are written
/// one after the other.
struct Once(&'static HandlerSpec);
static FIRST: HandlerSpec = HandlerSpec::new("first", HandlerKind::Daemon);
static SECOND: HandlerSpec = HandlerSpec::new("second", HandlerKind::Daemon);
impl ErasedHandler for Once {
    fn spec(&self) -> &'static HandlerSpec {
        self.0
    }
    fn matches(&self, _: &ObjectState) -> Result<bool, MatchError> {
        Ok(true)
    }
    fn invoke(&self, _: Invocation) -> Result<Call, HandlerError> {
        let patch = if self.0.id == "first" {
            serde_json::json!({"spec": {"a": 1, "b": {"x": 1}}})
        } else {
            serde_json::json!({"spec": {"a": {"y": 2}, "b": 1}})
        };
        Ok(Call::Async(Box::pin(async move {
            Ok(Output {
                result: None,
                patch: Some(patch),
            })
        })))
    }
}

/// What the effects relay passed on so far.
#[derive(Debug, Default)]
struct Relayed {
    /// The daemons' finalizer was released: both ended, after sending their outputs.
    released: bool,
    /// How many outputs.
    outputs: usize,
}

/// A sharded kind's state whose client is `server`, its effects relayed as `launch` does, and
/// the sender of its member's validity. `released`: set once the daemon's finalizer is
/// released (after its output was sent and its instance ended).
fn sharded_kind(
    server: &Gated,
) -> (
    Arc<KindState>,
    watch::Sender<Option<Instant>>,
    watch::Receiver<Relayed>,
) {
    let client = Client::new(server.clone(), "default");
    let info = ResourceInfo::new("kopf.dev", "v1", "KopfExample", "kopfexamples", true);
    let writes = Arc::new(Semaphore::new(8));
    let poster = EventPoster::new(client.clone(), ("kopf".into(), None), writes.clone(), false);
    let valid = watch::Sender::new(Some(Instant::now() + Duration::from_secs(3600)));
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
        clearance: Some(Clearance::new(valid.subscribe())),
        sharding: Some((ShardWatch::ClientSide, Arc::default())),
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
    let handlers: Vec<Arc<dyn ErasedHandler>> =
        vec![Arc::new(Once(&FIRST)), Arc::new(Once(&SECOND))];
    let (supervisor, mut effects) =
        Supervisor::new(handlers, Services::default(), shared.config.clone());
    let state = Arc::new(KindState::new(
        info,
        supervisor,
        sink,
        &shared,
        super::lockstep::Lockstep::default(),
    ));
    let (relayed, relayed_rx) = watch::channel(Relayed::default());
    let relay = Arc::clone(&state);
    tokio::spawn(async move {
        while let Some(effect) = effects.recv().await {
            let release = matches!(effect, Effect::Finalizer { hold: false, .. });
            let output = matches!(effect, Effect::Output { .. });
            relay.effect(effect);
            relayed.send_modify(|r| {
                r.released |= release;
                r.outputs += usize::from(output);
            });
        }
    });
    (state, valid, relayed_rx)
}

/// Every range but the one of `u1`.
fn without_u1() -> Scope {
    let mut u1 = RangeSet::default();
    u1.insert(shard_of("u1"));
    Scope::Ranges(Arc::new(RangeSet::full().minus(&u1)))
}

/// Waits until `done`, for at most 10 s.
async fn wait(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A member serving everything sees `u1`: one daemon's output is being written (held at the
/// gate), the other's waits behind it, and both daemons have ended; then the member stops
/// serving `u1`; `server_side`: its watch, filtered by the API server, then loses `u1` too.
async fn handed_over_with_a_queued_output(
    server: &Gated,
    server_side: bool,
) -> (Arc<KindState>, watch::Sender<Option<Instant>>) {
    let (state, valid, mut released) = sharded_kind(server);
    Arc::clone(&state).serve(Scope::Ranges(Arc::new(RangeSet::full())));
    let object = r#"{"apiVersion": "kopf.dev/v1", "kind": "KopfExample",
        "metadata": {"name": "a", "namespace": "ns", "uid": "u1", "resourceVersion": "1"}}"#;
    assert!(state.observe(Watched::from_raw(object)).is_some());
    let ended =
        tokio::time::timeout(Duration::from_secs(10), released.wait_for(|r| r.released)).await;
    assert!(ended.is_ok(), "the daemon ended");
    Arc::clone(&state).serve(without_u1());
    if server_side {
        state.release(&Arc::from("u1"));
    }
    (state, valid)
}

#[tokio::test]
async fn a_member_writes_the_output_of_an_object_it_hands_over_and_holds_it_until_then() {
    writes_the_output_of_a_handed_over_object(false).await;
}

#[tokio::test]
async fn so_does_a_member_whose_watch_no_longer_sees_the_object() {
    writes_the_output_of_a_handed_over_object(true).await;
}

async fn writes_the_output_of_a_handed_over_object(server_side: bool) {
    let server = Gated::closed();
    let (state, _valid) = handed_over_with_a_queued_output(&server, server_side).await;
    // The daemons are over, their outputs are not written: the object still holds its range.
    assert_eq!(state.busy_uids(), vec![Arc::<str>::from("u1")]);
    server.open.send_replace(true);
    wait("both outputs are written", || server.patched("spec") == 2).await;
    wait("the object is quiet", || state.busy_uids().is_empty()).await;
}

#[tokio::test]
async fn after_a_lapse_the_output_of_a_handed_over_object_is_given_up() {
    let server = Gated::closed();
    let (state, valid) = handed_over_with_a_queued_output(&server, false).await;
    assert_eq!(state.busy_uids(), vec![Arc::<str>::from("u1")]);
    // The member's validity lapses: it serves nothing, and may hand nothing over in order.
    valid.send_replace(None);
    Arc::clone(&state).serve(Scope::Nothing);
    server.open.send_replace(true);
    wait("the output is settled", || state.busy_uids().is_empty()).await;
    // The output on its way when the member lapsed was sent before (writes after a lapse are
    // fenced); the one queued behind it is given up.
    assert_eq!(
        server.patched("spec"),
        1,
        "a lapsed member wrote a queued output"
    );
}

/// Hunts for a moment at which a member would see an object quiet (and release its range)
/// while an output of it is still in the effects channel or its queue: the scope narrows at
/// a different point of the daemons' runs in each round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_over_object_never_looks_quiet_before_its_outputs_are_written() {
    let object = r#"{"apiVersion": "kopf.dev/v1", "kind": "KopfExample",
        "metadata": {"name": "a", "namespace": "ns", "uid": "u1", "resourceVersion": "1"}}"#;
    let mut sent = 0;
    for round in 0..300 {
        let server = Gated::closed();
        server.open.send_replace(true);
        let (state, _valid, relayed) = sharded_kind(&server);
        Arc::clone(&state).serve(Scope::Ranges(Arc::new(RangeSet::full())));
        assert!(state.observe(Watched::from_raw(object)).is_some());
        for _ in 0..round % 30 {
            tokio::task::yield_now().await;
        }
        Arc::clone(&state).serve(without_u1());
        wait("quiet", || state.busy_uids().is_empty()).await;
        let written = server.patched("spec");
        // Whatever was still on its way arrives now.
        tokio::time::sleep(Duration::from_millis(10)).await;
        let outputs = relayed.borrow().outputs;
        assert_eq!(
            written, outputs,
            "round {round}: quiet before its outputs were written"
        );
        sent += outputs;
    }
    // Positive control: outputs were sent (and written) in many rounds.
    assert!(sent >= 20, "{sent} outputs in 300 rounds");
}
