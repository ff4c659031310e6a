//! What the generated handlers do, without a cluster: `matches` (declarative filters, decoding,
//! `when`), `initial_delay`, and `invoke` (injection, return values, patches, errors), on
//! objects built from JSON.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kopf_runtime::engine::{
    Call, ErasedHandler, Invocation, MatchError, ObjectSender, ObjectState, ObjectWatch, Output,
    Services,
};
use kopf_runtime::{
    Data, ErrorKind, HandlerError, Live, ObjectRef, Patch, Registry, Retry, Runtime, Started,
    Stopper, daemon, timer,
};
use serde_json::{Value, json};
use tokio::time::Instant;

fn is_v2(value: Option<&str>) -> bool {
    value == Some("v2")
}

fn has_data(config: &ConfigMap) -> bool {
    config.data.is_some()
}

fn delay_by_name_length(config: &ConfigMap) -> Duration {
    Duration::from_secs(config.metadata.name.as_deref().map_or(0, str::len) as u64)
}

#[daemon(
    labels(app = "web", version = is_v2, legacy = absent),
    annotations("example.com/owner" = present),
    field = "data.mode",
    value = "on",
    when = has_data,
    initial_delay = delay_by_name_length,
)]
async fn filtered(config: Arc<ConfigMap>, patch: Patch, retry: Retry) -> Result<(), HandlerError> {
    patch.status("seen", config.metadata.name.clone().unwrap_or_default());
    patch.status("retry", retry.0);
    Ok(())
}

#[timer(interval = "5s", initial_delay = "2s")]
fn count_keys(config: Arc<ConfigMap>) -> Result<usize, Infallible> {
    Ok(config.data.as_ref().map_or(0, |d| d.len()))
}

#[timer(interval = "5s")]
async fn fails_for_now(_config: Arc<ConfigMap>) -> Result<(), HandlerError> {
    Err(HandlerError::temporary("not yet", Duration::from_secs(7)))
}

#[timer(interval = "5s")]
async fn io_error(_config: Arc<ConfigMap>) -> Result<(), std::io::Error> {
    Err(std::io::Error::other("disk full"))
}

struct Settings {
    factor: usize,
}

#[timer(once)]
async fn uses_data(config: Arc<ConfigMap>, settings: Data<Settings>) -> Result<usize, Infallible> {
    Ok(settings.factor * config.data.as_ref().map_or(0, |d| d.len()))
}

#[timer(once)]
async fn needs_client(_config: Arc<ConfigMap>, _client: kube::Client) {}

#[daemon]
async fn follows(mut live: Live<ConfigMap>, patch: Patch) {
    if let Some(latest) = live.changed().await {
        patch.status("version", latest.metadata.resource_version.clone());
    }
}

#[daemon]
fn blocking_reporter(
    stopper: Stopper,
    object: ObjectRef,
    retry: Retry,
    started: Started,
    runtime: Runtime,
    span: tracing::Span,
    patch: Patch,
    _config: Arc<ConfigMap>,
) -> Result<(), std::io::Error> {
    let _entered = span.enter();
    patch.status("object", object.to_string());
    patch.status("retry", retry.0);
    patch.status("started_in_past", started.0 <= Instant::now());
    patch.status("runtime_s", runtime.0.as_secs());
    patch.status("stopped", stopper.is_stopped());
    Ok(())
}

#[timer(once)]
fn bad_patch(_config: Arc<ConfigMap>, patch: Patch) {
    patch.merge(json!("not an object"));
}

fn handler(id: &str) -> Arc<dyn ErasedHandler> {
    Registry::from_inventory()
        .expect("no duplicate ids")
        .get(id)
        .expect("the handler is registered")
        .handler()
}

fn config(name: &str, labels: Value, annotations: Value, data: Value) -> ObjectState {
    let mut body = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "ns", "uid": "uid-1", "resourceVersion": "1"},
    });
    body["metadata"]["labels"] = labels;
    body["metadata"]["annotations"] = annotations;
    body["data"] = data;
    ObjectState::from_json(body).expect("a valid object")
}

fn matching() -> ObjectState {
    config(
        "four",
        json!({"app": "web", "version": "v2"}),
        json!({"example.com/owner": "me"}),
        json!({"mode": "on"}),
    )
}

fn invocation(object: ObjectState, services: Services) -> (Invocation, ObjectSender) {
    let object = Arc::new(object);
    let (tx, live) = ObjectWatch::channel(object.clone());
    let invocation = Invocation {
        object,
        live,
        stopper: Stopper::new(),
        retry: 2,
        started: Instant::now() - Duration::from_secs(3),
        services,
        span: tracing::Span::none(),
        memo: Arc::default(),
        occurrence: None,
        change: None,
    };
    (invocation, tx)
}

async fn run(call: Call) -> Result<Output, HandlerError> {
    match call {
        Call::Async(future) => future.await,
        Call::Blocking(body) => tokio::task::spawn_blocking(body).await.expect("no panic"),
    }
}

async fn invoke(id: &str, object: ObjectState, services: Services) -> Result<Output, HandlerError> {
    let (invocation, _tx) = invocation(object, services);
    run(handler(id).invoke(invocation)?).await
}

#[test]
fn declarative_filters_and_when_all_apply() {
    let h = handler("filtered");
    assert!(h.matches(&matching()).unwrap());
    let cases = [
        config(
            "a",
            json!({"app": "db", "version": "v2"}),
            json!({"example.com/owner": "me"}),
            json!({"mode": "on"}),
        ),
        config(
            "a",
            json!({"app": "web", "version": "v1"}),
            json!({"example.com/owner": "me"}),
            json!({"mode": "on"}),
        ),
        config(
            "a",
            json!({"app": "web", "version": "v2", "legacy": "1"}),
            json!({"example.com/owner": "me"}),
            json!({"mode": "on"}),
        ),
        config(
            "a",
            json!({"app": "web", "version": "v2"}),
            json!({}),
            json!({"mode": "on"}),
        ),
        config(
            "a",
            json!({"app": "web", "version": "v2"}),
            json!({"example.com/owner": "me"}),
            json!({"mode": "off"}),
        ),
        // `when = has_data`: no data at all.
        config(
            "a",
            json!({"app": "web", "version": "v2"}),
            json!({"example.com/owner": "me"}),
            Value::Null,
        ),
    ];
    for (i, object) in cases.iter().enumerate() {
        assert!(!h.matches(object).unwrap(), "case {i} should not match");
    }
}

#[test]
fn an_object_of_another_shape_is_a_decode_error_only_if_the_filters_match() {
    let mut body = matching().body().as_ref().clone();
    body["kind"] = json!("Secret");
    let wrong = ObjectState::from_json(body).unwrap();
    match handler("filtered").matches(&wrong) {
        Err(MatchError::Decode { type_name, .. }) => assert!(type_name.ends_with("ConfigMap")),
        other => panic!("expected a decode error, got {other:?}"),
    }
    let unrelated = config("a", json!({}), json!({}), Value::Null);
    let mut body = unrelated.body().as_ref().clone();
    body["kind"] = json!("Secret");
    let unrelated = ObjectState::from_json(body).unwrap();
    assert!(!handler("filtered").matches(&unrelated).unwrap());
}

#[test]
fn initial_delay_is_fixed_or_computed_from_the_object() {
    assert_eq!(
        handler("count_keys").initial_delay(&matching()),
        Some(Duration::from_secs(2))
    );
    assert_eq!(
        handler("filtered").initial_delay(&matching()),
        Some(Duration::from_secs(4))
    );
    assert_eq!(handler("uses_data").initial_delay(&matching()), None);
}

#[tokio::test]
async fn async_daemon_output_carries_its_patch() {
    let output = invoke("filtered", matching(), Services::default())
        .await
        .unwrap();
    assert_eq!(output.result, None);
    assert_eq!(
        output.patch,
        Some(json!({"status": {"seen": "four", "retry": 2}}))
    );
}

#[tokio::test]
async fn blocking_timer_result_is_stored() {
    let object = config("a", json!({}), json!({}), json!({"x": "1", "y": "2"}));
    let call = handler("count_keys")
        .invoke(invocation(object, Services::default()).0)
        .unwrap();
    assert!(matches!(call, Call::Blocking(_)));
    let output = run(call).await.unwrap();
    assert_eq!(
        output,
        Output {
            result: Some(json!(2)),
            patch: None
        }
    );
}

#[tokio::test]
async fn errors_keep_their_kind() {
    let err = invoke("fails_for_now", matching(), Services::default())
        .await
        .unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::Temporary {
            delay: Duration::from_secs(7)
        }
    );
    let err = invoke("io_error", matching(), Services::default())
        .await
        .unwrap_err();
    assert_eq!(
        (err.kind(), err.to_string().as_str()),
        (ErrorKind::Other, "disk full")
    );
}

#[tokio::test]
async fn shared_data_is_injected_and_its_absence_named() {
    let err = invoke("uses_data", matching(), Services::default())
        .await
        .unwrap_err();
    assert!(err.is_permanent());
    assert!(err.to_string().contains("Settings"), "{err}");

    let mut services = Services::default();
    services.insert(Settings { factor: 10 });
    let output = invoke("uses_data", matching(), services).await.unwrap();
    assert_eq!(output.result, Some(json!(10)));
}

#[tokio::test]
async fn a_missing_client_fails_the_invocation_before_it_runs() {
    let (invocation, _tx) = invocation(matching(), Services::default());
    let err = handler("needs_client").invoke(invocation).unwrap_err();
    assert!(err.to_string().contains("Client"), "{err}");
}

#[tokio::test]
async fn live_follows_new_versions() {
    let (invocation, tx) = invocation(matching(), Services::default());
    let call = handler("follows").invoke(invocation).unwrap();
    let mut body = matching().body().as_ref().clone();
    body["metadata"]["resourceVersion"] = json!("2");
    tx.send_replace(Arc::new(ObjectState::from_json(body).unwrap()));
    let output = run(call).await.unwrap();
    assert_eq!(output.patch, Some(json!({"status": {"version": "2"}})));
}

#[tokio::test]
async fn blocking_daemon_gets_every_injectable() {
    let output = invoke("blocking_reporter", matching(), Services::default())
        .await
        .unwrap();
    assert_eq!(
        output.patch,
        Some(json!({"status": {
            "object": "ns/four", "retry": 2, "started_in_past": true, "runtime_s": 3,
            "stopped": false,
        }}))
    );
}

#[tokio::test]
async fn an_invalid_patch_fails_the_invocation() {
    let err = invoke("bad_patch", matching(), Services::default())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("must be a JSON object"), "{err}");
}
