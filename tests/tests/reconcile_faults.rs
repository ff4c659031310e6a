//! A reconcile handler whose child writes fail, in the real operator through the fault proxy
//! against the real API server: a 429 and a 503 on the child's apply are retried after the
//! server's `Retry-After` until the child lands, while another owner converges meanwhile; a 409
//! is retried after 1 s and reported as a Warning that says so; a real 422 (an invalid child
//! derived from the owner's spec) is reported as a permanent failure naming the child and the
//! cause, is not retried (a 403 retried on the handler's backoff is the positive control), an
//! edit to another invalid value is run and reported anew, and the owner's fixed spec runs the
//! handler again and applies the child.

mod operator_common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use http::Method;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kopf_examples::crd::KopfExample;
use kopf_runtime::{Action, Children, Data, HandlerError, Operator, Registry, reconcile};
use kopf_tests::proxy::{Fault, FaultProxy, Match, Rule};
use kopf_tests::{TestNamespace, test_config, wait_until};
use kube::api::{Api, ListParams, Patch, PatchParams};
use operator_common::*;
use serde_json::json;

const HANDLER: &str = "rf-children";
/// The handler's `backoff`: what an arbitrary error waits, doubling up to `BACKOFF_MAX`.
const BACKOFF: Duration = Duration::from_millis(300);
const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// The `Retry-After` of the injected 429 and 503 (seconds).
const RETRY_AFTER: u32 = 1;
/// How soon a child write that lost a conflict is tried again (`children.md`).
const CONFLICT_RETRY: Duration = Duration::from_secs(1);

/// Applies the child `<name>-config` with one data key: the owner's `spec.field` (so an owner
/// can ask for an invalid child). Records `run`, then `ok` or `err`.
#[reconcile(
    id = "rf-children",
    owns(ConfigMap),
    backoff = "300ms",
    backoff_max = "1s"
)]
async fn rf_children(
    obj: Arc<KopfExample>,
    children: Children<KopfExample>,
    journal: Data<Journal>,
) -> Result<Action, HandlerError> {
    let name = obj.metadata.name.clone().unwrap_or_default();
    journal.record(&name, "run");
    let key = obj.spec.field.clone().unwrap_or_default();
    let config = ConfigMap {
        data: Some(BTreeMap::from([(key, "v".to_owned())])),
        ..ConfigMap::default()
    };
    match children.apply("config", config).await {
        Ok(_) => {
            journal.record(&name, "ok");
            Ok(Action::await_change())
        }
        Err(err) => {
            journal.record(&name, "err");
            Err(err.into())
        }
    }
}

/// A test namespace, a proxy in front of the test server, and the operator running the handler
/// through the proxy.
async fn setup() -> anyhow::Result<(
    TestNamespace,
    Api<KopfExample>,
    FaultProxy,
    Journal,
    Operator,
)> {
    let (ns, api) = example_namespace().await?;
    let proxy = FaultProxy::start(&test_config().await?).await?;
    let journal = Journal::default();
    init_test_logging();
    let registry = Registry::from_inventory()?.select(&[HANDLER])?;
    let op = Operator::builder()
        .name("kopf-tests")
        .kube_config(proxy.config())
        .namespaces([ns.name()])
        .registry(&registry)
        .data(journal.clone())
        .shutdown_timeout(Duration::from_secs(10))
        .start()
        .await?;
    Ok((ns, api, proxy, journal, op))
}

/// The requests that apply the child `<owner>-config`.
fn child_patches(ns: &TestNamespace, owner: &str) -> Match {
    Match::method(Method::PATCH).path(format!(
        "/namespaces/{}/configmaps/{owner}-config",
        ns.name()
    ))
}

/// Waits until the child `<owner>-config` holds exactly the data key `key`.
async fn wait_child(ns: &TestNamespace, owner: &str, key: &str) {
    let maps = ns.api::<ConfigMap>();
    let name = format!("{owner}-config");
    wait_until(format!("{name} with the key {key:?}"), PROMPTLY, || async {
        let data = maps
            .get_opt(&name)
            .await
            .ok()
            .flatten()
            .and_then(|c| c.data);
        data.is_some_and(|d| d.len() == 1 && d.contains_key(key))
    })
    .await;
}

/// Waits until the handler succeeded for `owner` and its child holds exactly the key `key`.
async fn converged(ns: &TestNamespace, journal: &Journal, owner: &str, key: &str) {
    wait_child(ns, owner, key).await;
    journal.wait_for(owner, "ok", 1).await;
}

/// The notes of the `HandlerFailed` Warnings about `owner`.
async fn failure_notes(ns: &TestNamespace, owner: &str) -> Vec<String> {
    let api: Api<Event> = Api::namespaced(ns.client().clone(), ns.name());
    let events = api.list(&ListParams::default()).await.map(|l| l.items);
    (events.unwrap_or_default().into_iter())
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(owner))
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .filter(|e| e.reason.as_deref() == Some("HandlerFailed"))
        .filter_map(|e| e.note)
        .collect()
}

/// Waits until a `HandlerFailed` Warning about `owner` contains every one of `words`.
async fn wait_warning(ns: &TestNamespace, owner: &str, words: &[&str]) {
    let what = format!("a HandlerFailed Warning on {owner} with {words:?}");
    wait_until(what, PROMPTLY, || async {
        let notes = failure_notes(ns, owner).await;
        notes.iter().any(|n| words.iter().all(|w| n.contains(w)))
    })
    .await;
}

/// Sets the owner's `spec.field` (the key of its child).
async fn set_field(api: &Api<KopfExample>, owner: &str, field: &str) -> anyhow::Result<()> {
    let patch = json!({"spec": {"field": field}});
    api.patch(owner, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// The gaps between the consecutive runs of `owner`.
fn gaps(journal: &Journal, owner: &str) -> Vec<Duration> {
    let runs = journal.instants(owner, "run");
    runs.windows(2).map(|w| w[1] - w[0]).collect()
}

#[tokio::test]
async fn a_busy_server_delays_the_child_of_one_owner_and_not_the_others() -> anyhow::Result<()> {
    let (ns, api, proxy, journal, op) = setup().await?;
    // Three 429s, then a 503, each with `Retry-After: 1`.
    let busy = Fault::too_many_requests(RETRY_AFTER);
    let down = Fault::Status {
        code: 503,
        reason: "ServiceUnavailable",
        retry_after: Some(RETRY_AFTER),
    };
    let faults = 4;
    proxy
        .handle()
        .inject(Rule::new(child_patches(&ns, "slow"), busy).times(faults - 1));
    proxy
        .handle()
        .inject(Rule::new(child_patches(&ns, "slow"), down).times(1));

    create(&api, "slow", "key").await?;
    journal.wait_for("slow", "err", 1).await;
    // Another owner, created while `slow` fails: its child does not wait for `slow`'s.
    create(&api, "fast", "key").await?;
    converged(&ns, &journal, "fast", "key").await;
    converged(&ns, &journal, "slow", "key").await;
    let fast_ok = journal.instants("fast", "ok");
    let slow_ok = journal.instants("slow", "ok");
    assert!(
        fast_ok[0] < slow_ok[0],
        "fast converged after slow: {:?}",
        journal.all()
    );
    assert_eq!(journal.of("fast"), ["run", "ok"]);

    // Every fault was answered to an attempt, and each attempt failed until the last.
    assert_eq!(proxy.handle().rules(), 0, "faults left unused");
    assert_eq!(
        proxy.handle().count(&child_patches(&ns, "slow")),
        faults + 1
    );
    let runs = journal.count("slow", "run");
    assert!(runs > usize::try_from(faults)?, "{:?}", journal.of("slow"));
    assert_eq!(
        journal.count("slow", "err"),
        runs - 1,
        "{:?}",
        journal.of("slow")
    );
    // Spaced by the server's `Retry-After` (which wins over the 300 ms backoff), not sooner.
    let retry_after = Duration::from_secs(RETRY_AFTER.into());
    let spacing = gaps(&journal, "slow");
    assert!(spacing.iter().all(|g| *g >= retry_after), "{spacing:?}");
    // Reported as it went: the 429s, then the 503 (a new note is a new Warning).
    wait_warning(&ns, "slow", &["will be retried", "429"]).await;
    wait_warning(&ns, "slow", &["will be retried", "503"]).await;

    op.shutdown().await;
    ns.cleanup().await
}

#[tokio::test]
async fn a_conflict_on_a_child_write_is_retried_and_others_are_served() -> anyhow::Result<()> {
    let (ns, api, proxy, journal, op) = setup().await?;
    let conflicts = 2;
    let rule = Rule::new(child_patches(&ns, "clash"), Fault::conflict()).times(conflicts);
    proxy.handle().inject(rule);

    create(&api, "clash", "key").await?;
    journal.wait_for("clash", "err", 1).await;
    // Served meanwhile.
    create(&api, "bystander", "key").await?;
    converged(&ns, &journal, "bystander", "key").await;
    assert_eq!(journal.of("bystander"), ["run", "ok"]);

    // A temporary error: retried 1 s later, until the child lands.
    converged(&ns, &journal, "clash", "key").await;
    let expected = ["run", "err", "run", "err", "run", "ok"];
    assert_eq!(journal.of("clash"), expected);
    assert_eq!(
        proxy.handle().count(&child_patches(&ns, "clash")),
        conflicts + 1
    );
    let spacing = gaps(&journal, "clash");
    assert!(spacing.iter().all(|g| *g >= CONFLICT_RETRY), "{spacing:?}");
    let child = format!("ConfigMap {}/clash-config", ns.name());
    wait_warning(&ns, "clash", &["will be retried", &child, "409"]).await;

    op.shutdown().await;
    ns.cleanup().await
}

#[tokio::test]
async fn an_invalid_child_is_reported_not_retried_and_applied_after_the_fix() -> anyhow::Result<()>
{
    let (ns, api, proxy, journal, op) = setup().await?;
    // The positive control: a 403 on the child of `denied`, an arbitrary error, is retried on
    // the handler's backoff (300 ms, ×2 up to 1 s) for as long as it lasts.
    let denied = Rule::new(
        child_patches(&ns, "denied"),
        Fault::status(403, "Forbidden"),
    );
    let denied = proxy.handle().inject(denied);
    create(&api, "denied", "key").await?;
    // A real 422: `not a key!` is no valid ConfigMap key.
    create(&api, "bad", "not a key!").await?;
    journal.wait_for("bad", "err", 1).await;
    journal.wait_for("denied", "err", 2).await;
    let child = format!("ConfigMap {}/bad-config", ns.name());
    let words = ["failed permanently", &child, "422", "not a key!"];
    wait_warning(&ns, "bad", &words).await;

    // No retry of the permanent failure over 3 s, while `denied` is retried meanwhile.
    let denied_runs = journal.count("denied", "run");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(journal.of("bad"), ["run", "err"]);
    assert_eq!(proxy.handle().count(&child_patches(&ns, "bad")), 1);
    let retried = journal.count("denied", "run") - denied_runs;
    assert!(retried >= 2, "{:?}", journal.of("denied"));
    let spacing = gaps(&journal, "denied");
    for (i, gap) in spacing.iter().enumerate() {
        let base = (BACKOFF * 2_u32.pow(u32::try_from(i)?)).min(BACKOFF_MAX);
        assert!(*gap >= base - base / 10, "gap {i}: {spacing:?}");
    }
    wait_warning(&ns, "denied", &["will be retried", "403"]).await;

    // A change to another invalid key runs it again, and the Warning says what is wrong now.
    set_field(&api, "bad", "still bad!").await?;
    journal.wait_for("bad", "err", 2).await;
    wait_warning(&ns, "bad", &["failed permanently", "still bad!"]).await;

    // The owner's spec is fixed: that change runs the handler, and the child is applied.
    set_field(&api, "bad", "fixed").await?;
    converged(&ns, &journal, "bad", "fixed").await;
    assert_eq!(journal.of("bad"), ["run", "err", "run", "err", "run", "ok"]);
    // The control recovers too once its fault is gone.
    assert!(proxy.handle().remove(denied));
    converged(&ns, &journal, "denied", "key").await;

    op.shutdown().await;
    ns.cleanup().await
}
