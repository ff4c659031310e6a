//! Change handlers (`#[on_create]`, `#[on_update(field = "spec.field")]`, `#[on_delete]`)
//! against the real API server, through the fault-injecting proxy: the operator's writes (the
//! finalizer, each handler's progress and result) refused with 409/422/429/5xx while objects are
//! created, updated and deleted; the watch cut and answered 410 Gone during the same flow; and
//! objects deleted milliseconds after their creation. After each fault ends, invariants 1, 2
//! and 4 of `faults_common` are checked, and a fifth one of the change handlers:
//!
//! 5. Every created object's create handler completed at least once; every update the test made
//!    (each sets `spec.field` to a new value and waits for it to be handled before the next) was
//!    completed by the update handler at least once, with the previous value as its `old`; the
//!    delete handler completed at least once for every object deleted while our finalizer held
//!    it; and no two change handlers of one object ever ran at once, no update started before
//!    its object's create completed, and nothing but the delete handler started after it.
//!
//! A succeeded handler may run again for the same change only when a write of its progress
//! failed: under write faults the reruns are counted and printed (`--nocapture`); where the
//! design bounds them, they are asserted: with watch faults only, every handler runs exactly
//! once per change, and after a restart exactly the changes whose writes were lost (a 422 is
//! not retried) run again, once each, while those whose writes landed do not.

mod faults_common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use faults_common::*;
use http::Method;
use kopf_examples::crd::{KopfExample, KopfExampleSpec};
use kopf_runtime::{Data, FieldChange, HandlerError, Operator, on_create, on_delete, on_update};
use kopf_tests::proxy::{Fault, FaultProxy, Match, Rule};
use kopf_tests::{TestNamespace, try_wait_for, wait_until};
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};

const CREATE: &str = "fc-create";
const UPDATE: &str = "fc-update";
const DELETE: &str = "fc-delete";
/// The diff base's annotation (`kopf.dev/<operator>.last-handled`).
const BASE: &str = "kopf.dev/kopf-tests.last-handled";
/// The progress annotation of a change in flight.
const PROGRESS: &str = "kopf.dev/kopf-tests.progress";
/// How long a handler works, unless its object's `spec.duration` says `<n>ms`.
const WORK: Duration = Duration::from_millis(100);
/// The value of `spec.field` an object is created with.
const INITIAL: &str = "v0";
/// The `spec.duration` of an object whose create handler waits for the test's gate.
const GATED: &str = "gated";

// ----- the change handlers' own log -----

/// One invocation of a change handler, as the handler recorded it.
#[derive(Debug, Clone)]
struct Run {
    name: String,
    uid: String,
    handler: &'static str,
    /// `spec.field` as the handler saw it (for the update handler: `FieldChange::new`).
    value: String,
    /// The update handler's `FieldChange::old`.
    old: Option<String>,
    /// The handler returned (its work done); `false`: it was cancelled or still runs.
    completed: bool,
    /// It returned or was dropped.
    ended: bool,
}

#[derive(Debug, Default)]
struct Runs {
    runs: Vec<Run>,
    /// Invariant 5 violations, recorded when they happen.
    violations: Vec<String>,
}

/// What the change handlers did, per object, in order; and a gate the create handler of an
/// object with `spec.duration` = [`GATED`] waits for.
#[derive(Debug, Clone, Default)]
struct ChangeLog {
    runs: Arc<Mutex<Runs>>,
    gate: Arc<tokio::sync::watch::Sender<bool>>,
}

/// A running change handler; records its end when dropped (return or cancellation).
#[derive(Debug)]
struct Running {
    log: ChangeLog,
    index: usize,
}

impl Running {
    /// The handler's work is done: it returns now.
    fn complete(&self) {
        self.log.lock().runs[self.index].completed = true;
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.log.lock().runs[self.index].ended = true;
    }
}

impl ChangeLog {
    fn lock(&self) -> MutexGuard<'_, Runs> {
        self.runs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Lets the gated handlers go on, now and from now on.
    fn open_gate(&self) {
        self.gate.send_replace(true);
    }

    /// Waits until the gate is open.
    async fn gate(&self) {
        let mut open = self.gate.subscribe();
        let _ = open.wait_for(|open| *open).await;
    }

    /// Records that `handler` starts for `obj`, and any violation of invariant 5 this start is.
    fn enter(
        &self,
        obj: &KopfExample,
        handler: &'static str,
        value: String,
        old: Option<String>,
    ) -> Running {
        let name = obj.name_any();
        let uid = obj.uid().unwrap_or_default();
        let mut state = self.lock();
        let mut violations = Vec::new();
        let of_object = || state.runs.iter().filter(|r| r.uid == uid);
        for other in of_object().filter(|r| !r.ended) {
            violations.push(format!(
                "{handler} ({value}) started for {name} while {} ({}) runs",
                other.handler, other.value
            ));
        }
        if handler != DELETE && of_object().any(|r| r.handler == DELETE) {
            violations.push(format!(
                "{handler} ({value}) started for {name} after its delete handler"
            ));
        }
        if handler == UPDATE && !of_object().any(|r| r.handler == CREATE && r.completed) {
            violations.push(format!(
                "{handler} ({value}) started for {name} before its create handler completed"
            ));
        }
        state.violations.extend(violations);
        state.runs.push(Run {
            name,
            uid,
            handler,
            value,
            old,
            completed: false,
            ended: false,
        });
        Running {
            log: self.clone(),
            index: state.runs.len() - 1,
        }
    }

    /// The runs of `handler` for `name` (with `spec.field` = `value`, if given).
    fn runs(&self, name: &str, handler: &str, value: Option<&str>) -> Vec<Run> {
        let state = self.lock();
        (state.runs.iter())
            .filter(|r| r.name == name && r.handler == handler)
            .filter(|r| value.is_none_or(|v| r.value == v))
            .cloned()
            .collect()
    }

    fn started(&self, name: &str, handler: &str, value: Option<&str>) -> usize {
        self.runs(name, handler, value).len()
    }

    fn completed(&self, name: &str, handler: &str, value: Option<&str>) -> usize {
        let runs = self.runs(name, handler, value);
        runs.iter().filter(|r| r.completed).count()
    }

    /// `name`'s runs as `handler(value)` and a mark: `+` completed, `x` ended without
    /// completing, `~` still running.
    fn history(&self, name: &str) -> Vec<String> {
        let state = self.lock();
        (state.runs.iter())
            .filter(|r| r.name == name)
            .map(|r| {
                let mark = match (r.completed, r.ended) {
                    (true, _) => '+',
                    (false, true) => 'x',
                    (false, false) => '~',
                };
                format!("{}({}){mark}", r.handler, r.value)
            })
            .collect()
    }

    fn violations(&self) -> Vec<String> {
        self.lock().violations.clone()
    }

    /// Waits until `handler` completed for every object in `names` (with `value`, if given).
    async fn wait_completed(&self, names: &[String], handler: &str, value: Option<&str>) {
        let what = format!("{handler} ({value:?}) completed for {names:?}");
        let waited = try_wait_for(what, PROMPTLY, || async {
            match names
                .iter()
                .find(|name| self.completed(name, handler, value) == 0)
            {
                None => Ok(()),
                Some(name) => Err(format!("not for {name}: {:?}", self.history(name))),
            }
        })
        .await;
        if let Err(timeout) = waited {
            panic!("{timeout}");
        }
    }

    /// Waits until `handler` started for `name`.
    async fn wait_started(&self, name: &str, handler: &str) {
        let what = format!("{handler} started for {name}");
        wait_until(what, PROMPTLY, || async {
            self.started(name, handler, None) > 0
        })
        .await;
    }

    /// The reruns so far: per handler, the completions beyond the first for one change of one
    /// object (a create, an update to one value, a delete), and the invocations that ended
    /// without completing (cancelled: a delete stopped a create, or the operator stopped).
    fn reruns(&self) -> BTreeMap<&'static str, (usize, usize)> {
        let state = self.lock();
        let mut completions: BTreeMap<(&'static str, &str, &str), usize> = BTreeMap::new();
        let mut counts: BTreeMap<&'static str, (usize, usize)> = BTreeMap::new();
        for run in &state.runs {
            let change = if run.handler == UPDATE {
                &*run.value
            } else {
                ""
            };
            let entry = counts.entry(run.handler).or_default();
            if run.completed {
                let n = completions
                    .entry((run.handler, &run.name, change))
                    .or_default();
                *n += 1;
                if *n > 1 {
                    entry.0 += 1;
                }
            } else if run.ended {
                entry.1 += 1;
            }
        }
        counts
    }
}

// ----- the handlers -----

/// How long a handler works for `obj` (`spec.duration` as `<n>ms`, else [`WORK`]).
fn work(obj: &KopfExample) -> Duration {
    (obj.spec.duration.as_deref())
        .and_then(|d| d.strip_suffix("ms"))
        .and_then(|ms| ms.parse().ok())
        .map_or(WORK, Duration::from_millis)
}

fn field(obj: &KopfExample) -> String {
    obj.spec.field.clone().unwrap_or_default()
}

/// Stored under `status.fc-create`.
#[on_create(id = "fc-create")]
async fn fc_create(
    obj: Arc<KopfExample>,
    changes: Data<ChangeLog>,
    log: Data<InstanceLog>,
) -> Result<String, HandlerError> {
    let _instance = log.enter(&obj, CREATE);
    let run = changes.enter(&obj, CREATE, field(&obj), None);
    if obj.spec.duration.as_deref() == Some(GATED) {
        changes.gate().await;
    }
    tokio::time::sleep(work(&obj)).await;
    run.complete();
    Ok(format!("created with {}", field(&obj)))
}

/// Stored under `status.fc-update`.
#[on_update(id = "fc-update", field = "spec.field")]
async fn fc_update(
    obj: Arc<KopfExample>,
    change: FieldChange<String>,
    changes: Data<ChangeLog>,
    log: Data<InstanceLog>,
) -> Result<String, HandlerError> {
    let _instance = log.enter(&obj, UPDATE);
    let new = change.new.unwrap_or_default();
    let run = changes.enter(&obj, UPDATE, new.clone(), change.old);
    tokio::time::sleep(work(&obj)).await;
    run.complete();
    Ok(format!("updated to {new}"))
}

#[on_delete(id = "fc-delete")]
async fn fc_delete(obj: Arc<KopfExample>, changes: Data<ChangeLog>, log: Data<InstanceLog>) {
    let _instance = log.enter(&obj, DELETE);
    let run = changes.enter(&obj, DELETE, field(&obj), None);
    tokio::time::sleep(WORK).await;
    run.complete();
}

// ----- helpers -----

/// Logs to stderr when `KOPF_TEST_LOG` is set (e.g. `KOPF_TEST_LOG=kopf_runtime=debug`).
fn init_test_logging() {
    if let Ok(filter) = std::env::var("KOPF_TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_test_writer()
            .try_init();
    }
}

/// The operator with the three change handlers, connected through `proxy`.
async fn start(
    proxy: &FaultProxy,
    ns: &TestNamespace,
    instances: &InstanceLog,
    changes: &ChangeLog,
) -> anyhow::Result<Operator> {
    init_test_logging();
    let op = operator_via(proxy, ns, &[CREATE, UPDATE, DELETE], instances)?
        .data(changes.clone())
        .start()
        .await?;
    Ok(op)
}

/// An example object with `spec.field` = [`INITIAL`] and `spec.duration` = `duration`.
fn object(name: &str, duration: Option<&str>) -> KopfExample {
    let spec = KopfExampleSpec {
        field: Some(INITIAL.to_owned()),
        duration: duration.map(str::to_owned),
        ..KopfExampleSpec::default()
    };
    KopfExample::new(name, spec)
}

/// Creates `prefix-0` … `prefix-{n-1}` and returns their names.
async fn create_objects(
    api: &Api<KopfExample>,
    prefix: &str,
    n: usize,
    duration: Option<&str>,
) -> anyhow::Result<Vec<String>> {
    let mut names = Vec::with_capacity(n);
    for i in 0..n {
        let name = format!("{prefix}-{i}");
        api.create(&PostParams::default(), &object(&name, duration))
            .await?;
        names.push(name);
    }
    Ok(names)
}

/// Sets `spec.field` of every object in `names` to `value`.
async fn update_all(api: &Api<KopfExample>, names: &[String], value: &str) -> anyhow::Result<()> {
    let patch = serde_json::json!({ "spec": { "field": value } });
    for name in names {
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(())
}

/// The operator's writes to the examples.
fn writes() -> Match {
    Match::method(Method::PATCH).path("/kopfexamples/")
}

/// The objects whose writes (by the operator, through `proxy`) were refused since `since`: a
/// fault answered with a status (a delay is not a refusal).
fn refused_since(proxy: &FaultProxy, since: Instant) -> BTreeSet<String> {
    (proxy.handle().log().iter())
        .filter(|r| r.method == Method::PATCH && r.at >= since)
        .filter(|r| matches!(r.fault, Some(Fault::Status { .. })))
        .filter_map(|r| {
            let (_, rest) = r.path.split_once("/kopfexamples/")?;
            let name = rest.split(['/', '?']).next()?;
            Some(name.to_owned())
        })
        .collect()
}

/// How many writes were refused since `since`.
fn refusals_since(proxy: &FaultProxy, since: Instant) -> usize {
    (proxy.handle().log().iter())
        .filter(|r| r.method == Method::PATCH && r.at >= since)
        .filter(|r| matches!(r.fault, Some(Fault::Status { .. })))
        .count()
}

/// Waits until a write of each object in `names` was refused since `since`: the positive
/// control that a fault hit the writes it was meant for (it stays until then).
async fn wait_refused(proxy: &FaultProxy, since: Instant, names: &[String]) {
    let what = format!("a write of each of {names:?} refused");
    let waited = try_wait_for(what, PROMPTLY, || async {
        let refused = refused_since(proxy, since);
        match names.iter().find(|name| !refused.contains(*name)) {
            None => Ok(()),
            Some(name) => Err(format!("none of {name}; refused: {refused:?}")),
        }
    })
    .await;
    if let Err(timeout) = waited {
        panic!("{timeout}");
    }
}

/// Invariant 5 for objects created with [`INITIAL`], updated to `updates` in order (each one
/// handled before the next was made), and, for `deleted`, deleted while our finalizer held
/// them.
fn assert_changes(changes: &ChangeLog, created: &[String], updates: &[&str], deleted: &[String]) {
    let violations = changes.violations();
    assert!(
        violations.is_empty(),
        "invariant 5 violated: {violations:?}"
    );
    for name in created {
        let history = changes.history(name);
        assert!(
            changes.completed(name, CREATE, None) >= 1,
            "invariant 5: {name} was never created: {history:?}"
        );
        let mut previous = INITIAL;
        for value in updates {
            let runs = changes.runs(name, UPDATE, Some(value));
            assert!(
                runs.iter().any(|r| r.completed),
                "invariant 5: the update of {name} to {value} was never handled: {history:?}"
            );
            for run in runs {
                assert_eq!(
                    run.old.as_deref(),
                    Some(previous),
                    "invariant 5: the update of {name} to {value} saw a wrong old value: \
                     {history:?}"
                );
            }
            previous = value;
        }
    }
    for name in deleted {
        assert!(
            changes.completed(name, DELETE, None) >= 1,
            "invariant 5: {name} is gone without its delete handler: {:?}",
            changes.history(name)
        );
    }
}

/// The stored change state of the live objects in `names`: `(name, spec.field in the stored
/// diff base, the progress annotation)`.
async fn stored(
    api: &Api<KopfExample>,
    names: &[String],
) -> anyhow::Result<Vec<(String, Option<String>, Option<String>)>> {
    let mut found = Vec::new();
    for name in names {
        let Some(obj) = api.get_opt(name).await? else {
            continue;
        };
        let annotations = obj.annotations();
        let base = (annotations.get(BASE))
            .and_then(|text| serde_json::from_str::<serde_json::Value>(text).ok())
            .and_then(|base| base["f"]["spec.field"].as_str().map(str::to_owned));
        found.push((name.clone(), base, annotations.get(PROGRESS).cloned()));
    }
    Ok(found)
}

/// Waits until every object in `names` stores `value` as its diff base and no progress: its
/// last change's writes have landed (a change's writes are retried before the next change of
/// its object starts, so a fault on the next one would delay this one's too).
async fn wait_stored(api: &Api<KopfExample>, names: &[String], value: &str) {
    let what = format!("the stored diff bases at {value}, without progress");
    let waited = try_wait_for(what, PROMPTLY, || async {
        let found = stored(api, names).await.map_err(|e| e.to_string())?;
        let right = (found.iter())
            .all(|(_, base, progress)| base.as_deref() == Some(value) && progress.is_none());
        if right && found.len() == names.len() {
            Ok(())
        } else {
            Err(format!("{found:?}"))
        }
    })
    .await;
    if let Err(timeout) = waited {
        panic!("{timeout}");
    }
}

/// Whether our finalizer is on `obj`.
fn finalized(obj: &KopfExample) -> bool {
    obj.finalizers().iter().any(|f| f == FINALIZER)
}

/// Prints the reruns of a scenario (shown with `--nocapture`).
fn report(scenario: &str, changes: &ChangeLog) {
    for (handler, (reruns, cancelled)) in changes.reruns() {
        eprintln!(
            "{scenario}: {handler}: {reruns} reruns after a completion, {cancelled} runs ended \
             without completing"
        );
    }
}

// ----- the scenarios -----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_writes_delay_the_changes_but_lose_none() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let proxy = start_proxy().await?;
    let (instances, changes) = (InstanceLog::default(), ChangeLog::default());
    let mut op = start(&proxy, &ns, &instances, &changes).await?;
    let handle = proxy.handle();

    // Creates: the finalizer writes are refused (409, 422, then 503 until each object's
    // was). Once the finalizers are on, the create handlers start and wait at the gate; the
    // writes are throttled (429), the gate opens, and the creates' writes are throttled until
    // each object's was.
    let since = Instant::now();
    let refusals = [
        handle.inject(Rule::new(writes(), Fault::conflict()).times(2)),
        handle.inject(Rule::new(writes(), Fault::failed_test_guard()).times(2)),
        handle.inject(Rule::new(writes(), Fault::unavailable())),
    ];
    let names = create_objects(&api, "wf", 4, Some(GATED)).await?;
    wait_refused(&proxy, since, &names).await;
    for id in refusals {
        handle.remove(id);
    }
    for name in &names {
        changes.wait_started(name, CREATE).await;
    }
    let since = Instant::now();
    let throttle = handle.inject(Rule::new(writes(), Fault::too_many_requests(1)));
    changes.open_gate();
    changes.wait_completed(&names, CREATE, None).await;
    wait_refused(&proxy, since, &names).await;
    handle.remove(throttle);
    wait_stored(&api, &names, INITIAL).await;

    // v1: the updates' writes are refused (409 twice, then 500) until each object's was;
    // they are retried and land.
    let since = Instant::now();
    let errors = [
        handle.inject(Rule::new(writes(), Fault::conflict()).times(2)),
        handle.inject(Rule::new(writes(), Fault::internal_error())),
    ];
    update_all(&api, &names, "v1").await?;
    changes.wait_completed(&names, UPDATE, Some("v1")).await;
    wait_refused(&proxy, since, &names).await;
    for id in errors {
        handle.remove(id);
    }
    wait_stored(&api, &names, "v1").await;

    // v2: the updates' writes are rejected with 422, which is not retried: they are lost.
    let since = Instant::now();
    let rejections = handle.inject(Rule::new(writes(), Fault::failed_test_guard()));
    update_all(&api, &names, "v2").await?;
    changes.wait_completed(&names, UPDATE, Some("v2")).await;
    wait_refused(&proxy, since, &names).await;
    handle.remove(rejections);
    let found = stored(&api, &names).await?;
    eprintln!(
        "refused writes: stored after the rejected v2 writes (name, base, progress): {found:?}"
    );
    let lost: Vec<String> = (found.iter())
        .filter(|(_, base, _)| base.as_deref() != Some("v2"))
        .map(|(name, _, _)| name.clone())
        .collect();
    assert!(!lost.is_empty(), "positive control: no v2 write was lost");

    // A restart: what was stored is not run again; the update to v2, whose write was lost, is
    // (once), from the stored base.
    op.shutdown().await;
    op = start(&proxy, &ns, &instances, &changes).await?;
    let what = format!("the lost updates of {lost:?} to v2 run again");
    wait_until(what, PROMPTLY, || async {
        (lost.iter()).all(|name| changes.completed(name, UPDATE, Some("v2")) >= 2)
    })
    .await;
    wait_stored(&api, &names, "v2").await;
    for name in &names {
        let history = changes.history(name);
        let again = usize::from(lost.contains(name));
        assert_eq!(
            changes.started(name, CREATE, None),
            1,
            "{name}: {history:?}"
        );
        let v1 = changes.started(name, UPDATE, Some("v1"));
        assert_eq!(v1, 1, "{name}: {history:?}");
        let v2 = changes.started(name, UPDATE, Some("v2"));
        assert_eq!(v2, 1 + again, "{name}: {history:?}");
    }

    // v3 without faults: handled, and the stored state is right again.
    update_all(&api, &names, "v3").await?;
    changes.wait_completed(&names, UPDATE, Some("v3")).await;
    wait_stored(&api, &names, "v3").await;

    // Deletes: the delete handlers' and the finalizer removals' writes are refused (409, 422,
    // 429, then 503) until each object's was.
    let (deleted, kept) = names.split_at(2);
    let since = Instant::now();
    let refusals = [
        handle.inject(Rule::new(writes(), Fault::conflict()).times(1)),
        handle.inject(Rule::new(writes(), Fault::failed_test_guard()).times(1)),
        handle.inject(Rule::new(writes(), Fault::too_many_requests(1)).times(1)),
        handle.inject(Rule::new(writes(), Fault::unavailable())),
    ];
    delete_all(&api, deleted).await?;
    changes.wait_completed(deleted, DELETE, None).await;
    wait_refused(&proxy, since, deleted).await;
    for id in refusals {
        handle.remove(id);
    }
    assert_gone(&api, deleted).await;

    // The rest is deleted without faults; invariants 1, 2, 4, then 5.
    finish(&op, &api, &instances, kept).await?;
    assert_changes(&changes, &names, &["v1", "v2", "v3"], &names);
    report("refused writes", &changes);
    for name in &names {
        eprintln!("refused writes: {name}: {:?}", changes.history(name));
    }
    op.shutdown().await;
    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_watches_and_relists_neither_lose_nor_repeat_a_change() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let proxy = start_proxy().await?;
    let (instances, changes) = (InstanceLog::default(), ChangeLog::default());
    let op = start(&proxy, &ns, &instances, &changes).await?;
    let handle = proxy.handle();

    // Creates while the next three watches are cut inside their second event.
    handle.inject(Rule::new(Match::watches(), Fault::CutWatch { after_events: 1 }).times(3));
    handle.drop_connections();
    let names = create_objects(&api, "ww", 4, None).await?;
    changes.wait_completed(&names, CREATE, None).await;
    wait_until("three cut watches", PROMPTLY, || async {
        handle.rules() == 0
    })
    .await;

    // The watch goes down; meanwhile three objects are updated and one is deleted.
    let (updated, deleted) = names.split_at(3);
    let stall = handle.inject(Rule::new(Match::watches(), Fault::Stall));
    let watches = handle.count(&Match::watches());
    handle.drop_connections();
    wait_until("a new, stalled watch", PROMPTLY, || async {
        handle.count(&Match::watches()) > watches
    })
    .await;
    update_all(&api, updated, "v1").await?;
    delete_all(&api, deleted).await?;
    // Positive control that the watch is down: neither change is seen for 2 s.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        changes.started(&updated[0], UPDATE, None),
        0,
        "the watch was not down"
    );
    assert_eq!(changes.started(&deleted[0], DELETE, None), 0);
    assert!(api.get_opt(&deleted[0]).await?.is_some(), "deleted unheld");

    // It comes back with 410 Gone: the relist finds both changes.
    handle.remove(stall);
    handle.inject(Rule::new(Match::watches(), Fault::WatchGone).times(1));
    handle.drop_connections();
    changes.wait_completed(updated, UPDATE, Some("v1")).await;
    changes.wait_completed(deleted, DELETE, None).await;
    assert_gone(&api, deleted).await;
    assert_eq!(handle.rules(), 0, "the 410 was answered");

    // v2 while the next two watches are cut inside their first event.
    handle.inject(Rule::new(Match::watches(), Fault::CutWatch { after_events: 0 }).times(2));
    handle.drop_connections();
    update_all(&api, updated, "v2").await?;
    changes.wait_completed(updated, UPDATE, Some("v2")).await;
    wait_until("two cut watches", PROMPTLY, || async {
        handle.rules() == 0
    })
    .await;

    finish(&op, &api, &instances, updated).await?;
    assert_changes(&changes, deleted, &[], deleted);
    assert_changes(&changes, updated, &["v1", "v2"], updated);
    // No write failed: every handler ran exactly once per change. The counts are taken when
    // every object's changes are over (its delete completed, it is gone): a rerun of any of
    // them would have been recorded in the same log by now.
    for name in &names {
        let history = changes.history(name);
        let updates: &[&str] = if updated.contains(name) {
            &["v1", "v2"]
        } else {
            &[]
        };
        assert_eq!(
            changes.started(name, CREATE, None),
            1,
            "{name}: {history:?}"
        );
        for value in updates {
            let n = changes.started(name, UPDATE, Some(value));
            assert_eq!(n, 1, "{name} to {value}: {history:?}");
        }
        let n = changes.started(name, UPDATE, None);
        assert_eq!(n, updates.len(), "{name}: {history:?}");
        assert_eq!(
            changes.started(name, DELETE, None),
            1,
            "{name}: {history:?}"
        );
    }
    report("watch faults", &changes);
    op.shutdown().await;
    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_deleted_right_after_their_creation_leak_nothing() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let proxy = start_proxy().await?;
    let (instances, changes) = (InstanceLog::default(), ChangeLog::default());
    let op = start(&proxy, &ns, &instances, &changes).await?;
    let handle = proxy.handle();

    // Faults on: the first writes refused (503, 409), the result writes (`/status`, after a
    // handler's progress) delayed by 300 ms, and the next two watches cut after three events.
    let since = Instant::now();
    let faults = [
        handle.inject(Rule::new(writes(), Fault::unavailable()).times(3)),
        handle.inject(Rule::new(writes(), Fault::conflict()).times(3)),
        handle.inject(Rule::new(
            writes().path("/status"),
            Fault::Delay(Duration::from_millis(300)),
        )),
        handle.inject(Rule::new(Match::watches(), Fault::CutWatch { after_events: 3 }).times(2)),
    ];
    handle.drop_connections();

    // Each object is deleted right after its creation: at once, or 5, 10 or 15 ms later (the
    // operator's finalizer may or may not be on by then).
    let mut held = BTreeMap::new();
    for i in 0..12 {
        let name = format!("quick-{i}");
        api.create(&PostParams::default(), &object(&name, None))
            .await?;
        let gap = Duration::from_millis((i % 4) * 5);
        if !gap.is_zero() {
            tokio::time::sleep(gap).await;
        }
        let deleted = api.delete(&name, &DeleteParams::default()).await?;
        held.insert(name, deleted.left().is_some_and(|o| finalized(&o)));
    }
    // Each object is deleted the moment its (slow) create handler started.
    for i in 0..3 {
        let name = format!("started-{i}");
        api.create(&PostParams::default(), &object(&name, Some("3000ms")))
            .await?;
        changes.wait_started(&name, CREATE).await;
        let deleted = api.delete(&name, &DeleteParams::default()).await?;
        let finalized = deleted.left().is_some_and(|o| finalized(&o));
        assert!(
            finalized,
            "{name}: its create handler ran without the finalizer"
        );
        held.insert(name, finalized);
    }
    // Each object is deleted the moment its create handler completed, while its result is
    // being written.
    let mut unstored = 0;
    for i in 0..3 {
        let name = format!("created-{i}");
        api.create(&PostParams::default(), &object(&name, None))
            .await?;
        changes
            .wait_completed(std::slice::from_ref(&name), CREATE, None)
            .await;
        let deleted = api.delete(&name, &DeleteParams::default()).await?;
        let deleted = deleted.left();
        let finalized = deleted.as_ref().is_some_and(finalized);
        assert!(
            finalized,
            "{name}: its create handler ran without the finalizer"
        );
        let status = deleted.and_then(|o| o.status).unwrap_or_default();
        unstored += usize::from(!status.0.contains_key(CREATE));
        held.insert(name, finalized);
    }
    wait_until("six writes refused", PROMPTLY, || async {
        refusals_since(&proxy, since) >= 6
    })
    .await;
    for id in faults {
        handle.remove(id);
    }

    let names: Vec<String> = held.keys().cloned().collect();
    assert_gone(&api, &names).await;
    for (name, held) in &held {
        let history = changes.history(name);
        eprintln!("quick deletes: {name}: held when deleted: {held}; {history:?}");
    }
    // Held by our finalizer when deleted (the API server's answer to the deletion shows it):
    // the delete handler must have run. Not so for an object deleted at once: its create
    // handler may have started nonetheless, when the API server deleted it although our
    // finalizer had been added concurrently (kubernetes/kubernetes#77988): counted below.
    let must_delete: Vec<String> = (held.iter())
        .filter(|(_, held)| **held)
        .map(|(name, _)| name.clone())
        .collect();
    assert!(
        must_delete.len() >= 6,
        "positive control: only {must_delete:?} held"
    );
    assert_changes(&changes, &[], &[], &must_delete);
    let raced: Vec<&String> = (held.iter())
        .filter(|(name, held)| !**held && changes.started(name, CREATE, None) > 0)
        .map(|(name, _)| name)
        .collect();
    // Positive control of the overlap check: a delete came while a create handler ran.
    let interrupted = (0..3)
        .map(|i| format!("started-{i}"))
        .filter(|name| changes.completed(name, CREATE, None) == 0)
        .count();
    assert!(
        interrupted >= 1,
        "positive control: no create handler was running when its object was deleted"
    );

    assert_baseline(&op).await;
    assert_eq!(instances.running(), 0, "handlers still running");
    assert_no_overlap(&instances);
    let quick_held = (held.iter())
        .filter(|(name, held)| name.starts_with("quick-") && **held)
        .count();
    eprintln!(
        "quick deletes: {quick_held} of 12 held by the finalizer when deleted; \
         {interrupted} of 3 creates interrupted by their deletion; \
         {unstored} of 3 deleted before their create's result was stored; \
         deleted at once with our finalizer added concurrently (kubernetes#77988): {raced:?}"
    );
    report("quick deletes", &changes);
    op.shutdown().await;
    ns.cleanup().await
}
