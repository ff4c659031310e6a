//! Shared support of the fault tests: the instance log the test handlers write themselves, an
//! operator behind a fault-injecting proxy, and the four invariants checked after every fault.
//!
//! 1. At most one instance of each (object, handler) runs at once — the handlers record their
//!    own start and stop here; an overlap is recorded as a violation when it happens.
//! 2. Every object the test deleted is gone within [`GRACE`] (no leaked finalizer).
//! 3. Every timer of a live object fires again within its interval + 35 s after the fault ends.
//! 4. The operator still runs, and once the test's objects are gone its `stats()` counts are
//!    back exactly to their baseline (no object, no running or stopping instance).
#![allow(dead_code, unreachable_pub)] // each test binary uses a different subset

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use kopf_examples::crd::{KopfExample, KopfExampleSpec};
use kopf_runtime::{Operator, OperatorBuilder, Registry};
use kopf_tests::proxy::FaultProxy;
use kopf_tests::{TestNamespace, install_crd, is_not_found, test_client, test_config, wait_until};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{CustomResourceExt as _, ResourceExt as _};

/// Deadline for things that should happen promptly (the machine is slow and noisy).
pub const PROMPTLY: Duration = Duration::from_secs(30);
/// Invariant 2: how long a deleted object may take to be gone after the fault ends.
pub const GRACE: Duration = Duration::from_secs(60);
/// Invariant 3: the slack on top of a timer's interval.
pub const TIMER_SLACK: Duration = Duration::from_secs(35);
/// The operator's finalizer.
pub const FINALIZER: &str = "kopf.dev/kopf-tests";

#[derive(Debug, Default)]
struct LogState {
    /// Instances running now per (object uid, handler).
    running: BTreeMap<(String, &'static str), u32>,
    /// Instances started per (object name, handler).
    starts: BTreeMap<(String, &'static str), u64>,
    /// Timer runs per object name.
    fires: BTreeMap<String, Vec<Instant>>,
    /// Overlaps seen: invariant 1 violations.
    violations: Vec<String>,
}

/// The handlers' own record of their instances (invariant 1) and timer runs (invariant 3).
#[derive(Debug, Clone, Default)]
pub struct InstanceLog(Arc<Mutex<LogState>>);

/// A running instance; records its stop when dropped (return, panic or cancellation).
#[derive(Debug)]
pub struct Instance {
    log: InstanceLog,
    key: (String, &'static str),
}

impl Drop for Instance {
    fn drop(&mut self) {
        let mut state = self.log.lock();
        if let Some(n) = state.running.get_mut(&self.key) {
            *n = n.saturating_sub(1);
        }
    }
}

impl InstanceLog {
    fn lock(&self) -> MutexGuard<'_, LogState> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records that an instance of `handler` for `obj` starts; keep the guard while it runs.
    pub fn enter<K: kube::Resource>(&self, obj: &Arc<K>, handler: &'static str) -> Instance {
        let uid = obj.meta().uid.clone().unwrap_or_default();
        let name = obj.name_any();
        let key = (format!("{name}/{uid}"), handler);
        let mut state = self.lock();
        let running = state.running.entry(key.clone()).or_default();
        *running += 1;
        if *running > 1 {
            let seen = *running;
            state.violations.push(format!(
                "{handler} runs {seen} times at once for {name} ({uid})"
            ));
        }
        *state.starts.entry((name, handler)).or_default() += 1;
        Instance {
            log: self.clone(),
            key,
        }
    }

    /// Records a timer run of `obj`.
    pub fn fire<K: kube::Resource>(&self, obj: &Arc<K>) {
        let now = Instant::now();
        self.lock()
            .fires
            .entry(obj.name_any())
            .or_default()
            .push(now);
    }

    /// How many instances of `handler` for `name` have started so far.
    pub fn starts(&self, name: &str, handler: &'static str) -> u64 {
        let key = (name.to_owned(), handler);
        self.lock().starts.get(&key).copied().unwrap_or(0)
    }

    /// The number of instances running now, over all objects and handlers.
    pub fn running(&self) -> u32 {
        self.lock().running.values().sum()
    }

    /// How many times `name`'s timer has run.
    pub fn fires(&self, name: &str) -> usize {
        self.lock().fires.get(name).map_or(0, Vec::len)
    }

    /// Whether `name`'s timer has run after `since`.
    pub fn fired_since(&self, name: &str, since: Instant) -> bool {
        self.lock()
            .fires
            .get(name)
            .is_some_and(|runs| runs.iter().any(|t| *t > since))
    }

    /// How many times `name`'s timer has run after `since`.
    pub fn fires_since(&self, name: &str, since: Instant) -> usize {
        self.lock()
            .fires
            .get(name)
            .map_or(0, |runs| runs.iter().filter(|t| **t > since).count())
    }

    /// Invariant 1: the overlaps seen so far (must be empty).
    pub fn violations(&self) -> Vec<String> {
        self.lock().violations.clone()
    }

    /// Waits until `handler` has started for `name` at least `times` times.
    pub async fn wait_started(&self, name: &str, handler: &'static str, times: u64) {
        let what = format!("{handler} started x{times} for {name}");
        wait_until(what, PROMPTLY, || async {
            self.starts(name, handler) >= times
        })
        .await;
    }
}

/// A test namespace with the KopfExample CRD installed, and the API of its examples (through
/// the test server directly, not through any proxy).
pub async fn example_namespace() -> anyhow::Result<(TestNamespace, Api<KopfExample>)> {
    install_crd(&test_client().await, &KopfExample::crd()).await?;
    let mut ns = TestNamespace::create().await?;
    ns.strip_finalizers_of::<KopfExample>();
    let api = ns.api::<KopfExample>();
    Ok((ns, api))
}

/// A proxy in front of the test server.
pub async fn start_proxy() -> anyhow::Result<FaultProxy> {
    Ok(FaultProxy::start(&test_config().await?).await?)
}

/// Like [`example_namespace`], on the server of `config` (e.g. an independent `TestEnv`).
pub async fn example_namespace_in(
    config: kube::Config,
) -> anyhow::Result<(TestNamespace, Api<KopfExample>)> {
    let client = kopf_tests::connect(config.clone()).await?;
    install_crd(&client, &KopfExample::crd()).await?;
    let mut ns = TestNamespace::create_with(config).await?;
    ns.strip_finalizers_of::<KopfExample>();
    let api = ns.api::<KopfExample>();
    Ok((ns, api))
}

/// An operator builder for `ns` and the handlers `ids`, connected through `proxy`, with the
/// instance log as handler data.
pub fn operator_via(
    proxy: &FaultProxy,
    ns: &TestNamespace,
    ids: &[&str],
    log: &InstanceLog,
) -> anyhow::Result<OperatorBuilder> {
    let registry = Registry::from_inventory()?.select(ids)?;
    Ok(Operator::builder()
        .name("kopf-tests")
        .kube_config(proxy.config())
        .namespaces([ns.name()])
        .registry(&registry)
        .data(log.clone())
        .shutdown_timeout(Duration::from_secs(10)))
}

/// An example object named `name`.
pub fn example(name: &str) -> KopfExample {
    let spec = KopfExampleSpec {
        field: Some("x".to_owned()),
        ..KopfExampleSpec::default()
    };
    KopfExample::new(name, spec)
}

/// Creates `prefix-0` … `prefix-{n-1}` and returns their names.
pub async fn create_many(
    api: &Api<KopfExample>,
    prefix: &str,
    n: usize,
) -> anyhow::Result<Vec<String>> {
    let mut names = Vec::with_capacity(n);
    for i in 0..n {
        let name = format!("{prefix}-{i}");
        api.create(&PostParams::default(), &example(&name)).await?;
        names.push(name);
    }
    Ok(names)
}

/// Deletes the objects (without waiting for them to go).
pub async fn delete_all(api: &Api<KopfExample>, names: &[String]) -> anyhow::Result<()> {
    for name in names {
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(err) if is_not_found(&err) => {}
            Err(err) => return Err(err.into()),
        }
    }
    Ok(())
}

/// Waits until the objects hold the operator's finalizer.
pub async fn wait_finalized(api: &Api<KopfExample>, names: &[String]) {
    let what = format!("the finalizer on {} objects", names.len());
    wait_until(what, PROMPTLY, || async {
        let Ok(list) = api.list(&ListParams::default()).await else {
            return false;
        };
        names.iter().all(|name| {
            list.items
                .iter()
                .any(|o| &o.name_any() == name && o.finalizers().iter().any(|f| f == FINALIZER))
        })
    })
    .await;
}

/// Invariant 1: no (object, handler) ever ran twice at once.
pub fn assert_no_overlap(log: &InstanceLog) {
    let violations = log.violations();
    assert!(
        violations.is_empty(),
        "invariant 1 violated: {violations:?}"
    );
}

/// Invariant 2: every object in `names` is gone within [`GRACE`].
pub async fn assert_gone(api: &Api<KopfExample>, names: &[String]) {
    let what = format!("invariant 2: {} deleted objects to be gone", names.len());
    wait_until(what, GRACE, || async {
        let Ok(list) = api.list(&ListParams::default()).await else {
            return false;
        };
        !list.items.iter().any(|o| names.contains(&o.name_any()))
    })
    .await;
}

/// Invariant 3: every timer of `names` fires after `fault_end`, within `interval` + 35 s.
pub async fn assert_timers_fire(
    log: &InstanceLog,
    names: &[String],
    interval: Duration,
    fault_end: Instant,
) {
    let deadline = interval + TIMER_SLACK;
    let remaining = deadline.saturating_sub(fault_end.elapsed());
    let what = format!(
        "invariant 3: the timers of {} objects to fire again",
        names.len()
    );
    wait_until(what, remaining, || async {
        names.iter().all(|name| log.fired_since(name, fault_end))
    })
    .await;
}

/// Invariant 4: the operator's counts back to the baseline of an empty namespace: no object,
/// no instance running, stopping or queued. Waits up to [`PROMPTLY`].
pub async fn assert_baseline(op: &Operator) {
    let at_baseline = || {
        op.stats().kinds.iter().all(|kind| {
            let s = &kind.supervisor;
            kind.objects == 0
                && s.objects == 0
                && s.daemons_running + s.daemons_stopping + s.daemons_queued == 0
                && s.timers_running + s.timers_stopping + s.timers_queued == 0
        })
    };
    let what = "invariant 4: the operator's counts back to the baseline";
    wait_until(what, PROMPTLY, || async { at_baseline() }).await;
}

/// Deletes every object in `names`, then checks invariants 1, 2 and 4.
pub async fn finish(
    op: &Operator,
    api: &Api<KopfExample>,
    log: &InstanceLog,
    names: &[String],
) -> anyhow::Result<()> {
    delete_all(api, names).await?;
    assert_gone(api, names).await;
    assert_baseline(op).await;
    assert_eq!(
        log.running(),
        0,
        "instances still running after their objects are gone"
    );
    assert_no_overlap(log);
    Ok(())
}
