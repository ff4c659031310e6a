//! Change handlers in the supervisor: the order of one change's handlers, what each step
//! persists, retries, resuming a change after a restart, updates by field, deletion with the
//! finalizer, and resume. Paused tokio time; the object store is an in-memory patch sink that
//! applies every merge patch, so a "restart" is a new supervisor observing the stored object.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use common::*;
use futures::future::BoxFuture;
use kopf_runtime::engine::{ChangeOptions, SupervisorConfig, WallClock};
use kopf_runtime::engine::{
    HandlerKind, ObjectState, PatchSink, PatchSinkHandle, Services, WatchedField,
};
use kopf_runtime::{HandlerError, ObjectRef};
use serde_json::{Value, json};

const PROGRESS: &str = "kopf.dev/finalizer.progress";
const BASE: &str = "kopf.dev/finalizer.last-handled";

/// The objects as stored, and every patch applied to them.
#[derive(Default)]
struct Store {
    bodies: Mutex<HashMap<String, Value>>,
    patches: Mutex<Vec<(String, Value)>>,
}

impl PatchSink for Store {
    fn apply(
        &self,
        object: &ObjectRef,
        patch: Value,
    ) -> BoxFuture<'static, Result<(), kopf_runtime::PatchError>> {
        let uid = object.uid.to_string();
        let mut bodies = self.bodies.lock().expect("the store is never poisoned");
        if let Some(body) = bodies.get_mut(&uid) {
            json_patch::merge(body, &patch);
            let rv: u64 = body["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            body["metadata"]["resourceVersion"] = json!((rv + 1).to_string());
        }
        self.patches
            .lock()
            .expect("the store is never poisoned")
            .push((uid, patch));
        Box::pin(async { Ok(()) })
    }
}

impl Store {
    fn put(&self, obj: &Obj) -> ObjectState {
        let state = obj.build();
        let uid = state.reference().uid.to_string();
        self.bodies
            .lock()
            .expect("the store is never poisoned")
            .insert(uid, (**state.body()).clone());
        state
    }

    fn get(&self, uid: &str) -> ObjectState {
        ObjectState::from_json(
            self.bodies.lock().expect("the store is never poisoned")[uid].clone(),
        )
        .expect("a valid object")
    }

    fn edit(&self, uid: &str, f: impl FnOnce(&mut Value)) -> ObjectState {
        let mut bodies = self.bodies.lock().expect("the store is never poisoned");
        let body = bodies.get_mut(uid).expect("a stored object");
        f(body);
        let rv: u64 = body["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        body["metadata"]["resourceVersion"] = json!((rv + 1).to_string());
        ObjectState::from_json(body.clone()).expect("a valid object")
    }

    fn patches(&self) -> Vec<Value> {
        let patches = self.patches.lock().expect("the store is never poisoned");
        patches.iter().map(|(_, p)| p.clone()).collect()
    }

    fn annotation(&self, uid: &str, key: &str) -> Option<String> {
        let bodies = self.bodies.lock().expect("the store is never poisoned");
        bodies[uid]["metadata"]["annotations"][key]
            .as_str()
            .map(str::to_owned)
    }
}

fn harness(handlers: Vec<H>, store: &Arc<Store>, log: Log) -> Harness {
    let sink = PatchSinkHandle(Arc::clone(store) as Arc<dyn PatchSink>);
    // The handlers' own `Patch::flush` finds the sink among the services; the supervisor stores
    // the steps of change handlers through the one given in its config.
    let mut services = Services::default();
    services.insert(sink.clone());
    // Retries wait for wall-clock times (they are persisted): the wall clock follows tokio's.
    let start = "2026-06-01T00:00:00Z".parse().expect("a timestamp");
    let config = SupervisorConfig {
        wall_clock: WallClock::following_tokio(start),
        sink: Some(sink),
        ..config()
    };
    Harness::with_services(handlers, config, services, log)
}

fn noting(kind: HandlerKind, id: &'static str) -> H {
    change(kind, id).run(|_ctx| async move { ok() })
}

#[tokio::test(start_paused = true)]
async fn a_create_runs_its_handlers_in_order_once_with_one_write_each() {
    let store = Arc::<Store>::default();
    let h = harness(
        vec![
            noting(HandlerKind::Create, "b"),
            noting(HandlerKind::Create, "a"),
        ],
        &store,
        Log::new(),
    );
    h.sup.observe(store.put(&Obj::new("u1")));
    h.at(1000).await;
    assert_eq!(h.log.calls("a"), vec![(0, 0)]);
    assert_eq!(h.log.calls("b"), vec![(0, 0)]);
    let order: Vec<_> = (h.log.events("a").into_iter())
        .chain(h.log.events("b"))
        .collect();
    assert_eq!(order.len(), 2, "{order:?}");
    let patches = store.patches();
    assert_eq!(patches.len(), 2, "{patches:#?}");
    let first = &patches[0]["metadata"]["annotations"];
    assert!(first[PROGRESS].is_string(), "{first}");
    let last = &patches[1]["metadata"]["annotations"];
    assert!(last[PROGRESS].is_null() && last[BASE].is_string(), "{last}");
    // The stored version and later ones without a change: nothing runs, nothing is written.
    h.sup.observe(store.get("u1"));
    h.sup
        .observe(store.edit("u1", |b| b["status"] = json!({"x": 1})));
    h.at(2000).await;
    assert_eq!(h.log.calls("a").len() + h.log.calls("b").len(), 2);
    assert_eq!(store.patches().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn handlers_run_one_after_another_never_together() {
    let store = Arc::<Store>::default();
    let slow = change(HandlerKind::Create, "a").run(|ctx| async move {
        ctx.note("begin");
        tokio::time::sleep(std::time::Duration::from_secs(5)).await;
        ctx.note("end");
        ok()
    });
    let h = harness(
        vec![slow, noting(HandlerKind::Create, "b")],
        &store,
        Log::new(),
    );
    h.sup.observe(store.put(&Obj::new("u1")));
    h.at(10_000).await;
    assert_eq!(
        h.log.events("a"),
        vec![
            (0, "call r0".into()),
            (0, "begin".into()),
            (5000, "end".into())
        ]
    );
    assert_eq!(h.log.calls("b"), vec![(5000, 0)]);
}

#[tokio::test(start_paused = true)]
async fn a_failed_handler_is_retried_after_its_backoff_and_blocks_the_next() {
    let store = Arc::<Store>::default();
    let flaky = change(HandlerKind::Create, "a")
        .with(|s| (s.backoff, s.backoff_set) = (std::time::Duration::from_secs(7), true))
        .run(|ctx| async move {
            if ctx.call == 0 {
                Err(HandlerError::msg("not yet"))
            } else {
                ok()
            }
        });
    let h = harness(
        vec![flaky, noting(HandlerKind::Create, "b")],
        &store,
        Log::new(),
    );
    h.sup.observe(store.put(&Obj::new("u1")));
    h.at(3000).await;
    assert_eq!(h.log.calls("b"), vec![], "b waits for a's retry");
    let waiting = store
        .annotation("u1", PROGRESS)
        .expect("the progress is stored");
    assert!(waiting.contains("\"a\""), "{waiting}");
    h.at(20_000).await;
    assert_eq!(h.log.calls("a"), vec![(0, 0), (7000, 1)]);
    assert_eq!(h.log.calls("b"), vec![(7000, 0)]);
    assert_eq!(h.failures("a"), vec![(0, false)]);
}

#[tokio::test(start_paused = true)]
async fn after_a_restart_a_succeeded_handler_is_not_run_again() {
    let store = Arc::<Store>::default();
    let log = Log::new();
    let stuck = change(HandlerKind::Create, "b").run(|ctx| async move {
        ctx.until_stopped().await;
        Err(HandlerError::msg("stopped"))
    });
    let first = harness(
        vec![noting(HandlerKind::Create, "a"), stuck],
        &store,
        log.clone(),
    );
    first.sup.observe(store.put(&Obj::new("u1")));
    first.at(1000).await;
    assert_eq!(first.log.calls("a"), vec![(0, 0)]);
    assert_eq!(first.log.calls("b"), vec![(0, 0)]);
    let report = first.sup.shutdown().await;
    assert_eq!(report.exited.len(), 1, "{report:?}");
    // A new process sees the stored object: `a` succeeded for this change, `b` did not.
    let second = harness(
        vec![
            noting(HandlerKind::Create, "a"),
            noting(HandlerKind::Create, "b"),
        ],
        &store,
        log,
    );
    second.sup.observe(store.get("u1"));
    second.at(2000).await;
    assert_eq!(second.log.calls("a"), vec![(0, 0)], "not rerun");
    assert_eq!(second.log.calls("b"), vec![(0, 0), (1000, 0)]);
    assert!(store.annotation("u1", PROGRESS).is_none());
    assert!(store.annotation("u1", BASE).is_some());
}

#[tokio::test(start_paused = true)]
async fn an_update_runs_on_a_change_and_a_field_handler_only_on_its_field() {
    let store = Arc::<Store>::default();
    let sized = change(HandlerKind::Update, "sized")
        .with(|s| {
            s.change = ChangeOptions::watching(WatchedField {
                path: "spec.size",
                segments: &["spec", "size"],
            });
        })
        .run(|ctx| async move {
            let field = ctx.inv.change.as_ref().and_then(|c| c.field.clone());
            let field = field.expect("a field handler has its field");
            ctx.note(format!("{:?} -> {:?}", field.old, field.new));
            ok()
        });
    let h = harness(
        vec![noting(HandlerKind::Update, "any"), sized],
        &store,
        Log::new(),
    );
    h.sup
        .observe(store.put(&Obj::new("u1").spec(json!({"size": 1, "x": 1}))));
    h.at(1000).await;
    assert!(h.log.calls("any").is_empty(), "no update on creation");
    assert_eq!(store.patches().len(), 1, "the base is written once");
    h.sup
        .observe(store.edit("u1", |b| b["spec"]["x"] = json!(2)));
    h.at(2000).await;
    assert_eq!(h.log.calls("any"), vec![(1000, 0)]);
    assert!(h.log.calls("sized").is_empty());
    h.sup
        .observe(store.edit("u1", |b| b["spec"]["size"] = json!(3)));
    h.at(3000).await;
    assert_eq!(h.log.calls("any"), vec![(1000, 0), (2000, 0)]);
    assert_eq!(
        h.log.events("sized"),
        vec![
            (2000, "call r0".into()),
            (2000, "Some(Number(1)) -> Some(Number(3))".into())
        ]
    );
    // Labels of the framework and status changes are not changes.
    h.sup.observe(store.edit("u1", |b| {
        b["status"] = json!({"any": "done"});
        b["metadata"]["annotations"]["kopf.dev/other"] = json!("x");
    }));
    h.at(4000).await;
    assert_eq!(h.log.calls("any").len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_delete_handler_holds_the_finalizer_until_it_succeeds() {
    let store = Arc::<Store>::default();
    let flaky = change(HandlerKind::Delete, "cleanup")
        .with(|s| (s.backoff, s.backoff_set) = (std::time::Duration::from_secs(3), true))
        .run(|ctx| async move {
            if ctx.call == 0 {
                Err(HandlerError::msg("busy"))
            } else {
                ok()
            }
        });
    let h = harness(vec![flaky], &store, Log::new());
    h.sup.observe(store.put(&Obj::new("u1")));
    h.at(1000).await;
    assert_eq!(h.finalizer("u1"), vec![(0, true)]);
    assert!(h.log.calls("cleanup").is_empty(), "not before deletion");
    h.sup.observe(store.edit("u1", |b| {
        b["metadata"]["finalizers"] = json!(["kopf.dev/finalizer"]);
        b["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    }));
    h.at(2000).await;
    assert_eq!(h.log.calls("cleanup"), vec![(1000, 0)]);
    assert!(
        h.sup.holds_finalizer("u1"),
        "held while the delete handler retries"
    );
    h.at(10_000).await;
    assert_eq!(h.log.calls("cleanup"), vec![(1000, 0), (4000, 1)]);
    assert_eq!(h.finalizer("u1"), vec![(0, true), (4000, false)]);
}

#[tokio::test(start_paused = true)]
async fn resume_handlers_run_once_for_objects_created_before() {
    let store = Arc::<Store>::default();
    let log = Log::new();
    let first = harness(
        vec![
            noting(HandlerKind::Create, "made"),
            noting(HandlerKind::Resume, "again"),
        ],
        &store,
        log.clone(),
    );
    first.sup.observe(store.put(&Obj::new("u1")));
    first.at(1000).await;
    assert_eq!(first.log.calls("made"), vec![(0, 0)]);
    assert!(first.log.calls("again").is_empty(), "not for a new object");
    first.sup.shutdown().await;
    let second = harness(
        vec![
            noting(HandlerKind::Create, "made"),
            noting(HandlerKind::Resume, "again"),
        ],
        &store,
        log,
    );
    second.sup.observe(store.get("u1"));
    second
        .sup
        .observe(store.edit("u1", |b| b["status"] = json!({"n": 1})));
    second.at(2000).await;
    assert_eq!(second.log.calls("made"), vec![(0, 0)]);
    assert_eq!(second.log.calls("again"), vec![(1000, 0)]);
}

#[tokio::test(start_paused = true)]
async fn an_object_no_change_handler_matches_costs_no_write() {
    let store = Arc::<Store>::default();
    let labelled = change(HandlerKind::Create, "made")
        .when(|obj| obj.label("run") == Some("yes"))
        .run(|_ctx| async move { ok() });
    let h = harness(vec![labelled], &store, Log::new());
    h.sup.observe(store.put(&Obj::new("other")));
    h.sup
        .observe(store.put(&Obj::new("mine").label("run", "yes")));
    h.at(1000).await;
    assert_eq!(
        h.log.calls("made"),
        vec![(0, 0)],
        "the matching one: the control"
    );
    assert!(store.annotation("mine", BASE).is_some());
    assert!(
        store.annotation("other", BASE).is_none(),
        "{:?}",
        store.patches()
    );
    assert_eq!(store.patches().len(), 1, "{:?}", store.patches());
    // Once it matches, it is created.
    h.sup
        .observe(store.edit("other", |b| b["metadata"]["labels"] = json!({"run": "yes"})));
    h.at(2000).await;
    assert_eq!(h.log.calls("made"), vec![(0, 0), (1000, 0)]);
}
