//! The `filters` example (`kopf-examples/src/bin/filters.rs`) against the real API server: its
//! `monitor` daemon runs only while an object is labelled `monitor=true`, and stops and
//! restarts as the label is toggled.

#[allow(dead_code, unreachable_pub)]
#[path = "../../kopf-examples/src/bin/filters.rs"]
mod filters;
mod operator_common;

use kopf_examples::crd::KopfExample;
use kube::api::Api;
use operator_common::{
    FINALIZER, PROMPTLY, create_with, example_namespace, finalizers, operator, set_label, status,
};
use serde_json::{Value, json};

async fn monitor_status(api: &Api<KopfExample>, name: &str) -> Value {
    status(api, name)
        .await
        .get("monitor")
        .cloned()
        .unwrap_or_default()
}

async fn wait_monitor(api: &Api<KopfExample>, name: &str, running: bool) {
    let what = format!("{name}: status.monitor.running == {running}, finalizer == {running}");
    kopf_tests::wait_until(what, PROMPTLY, || async {
        let state = monitor_status(api, name).await;
        let held = finalizers(api, name).await.iter().any(|f| f == FINALIZER);
        state["running"] == json!(running) && held == running
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_monitor_daemon_follows_the_label() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let op = operator(&ns, &["monitor"]).await?.start().await?;
    create_with(&api, "watched", &[], &[("monitor", "true")]).await?;
    create_with(&api, "ignored", &[], &[("monitor", "no")]).await?;

    wait_monitor(&api, "watched", true).await;
    // `ignored` was created together with `watched`, whose daemon has run: none for `ignored`.
    assert_eq!(monitor_status(&api, "ignored").await, Value::Null);
    assert!(finalizers(&api, "ignored").await.is_empty());

    // Label removed: the daemon is stopped as a filter mismatch, its last patch is applied,
    // and the finalizer is released.
    set_label(&api, "watched", "monitor", None).await?;
    wait_monitor(&api, "watched", false).await;
    assert_eq!(
        monitor_status(&api, "watched").await["reason"],
        json!("filters mismatch")
    );

    // Label back: a new daemon starts.
    set_label(&api, "watched", "monitor", Some("true")).await?;
    wait_monitor(&api, "watched", true).await;
    // And the other object starts once it asks for it.
    set_label(&api, "ignored", "monitor", Some("true")).await?;
    wait_monitor(&api, "ignored", true).await;

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[test]
fn the_audit_timer_combines_every_filter_form() {
    let registry = kopf_runtime::Registry::from_inventory().unwrap();
    let spec = registry.get("annotated_audit").unwrap().spec();
    assert_eq!(spec.filters.labels.len(), 1);
    assert_eq!(spec.filters.annotations.len(), 1);
    assert!(spec.filters.field.is_some());
}
