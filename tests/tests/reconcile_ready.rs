//! The watch of a reconcile handler's children takes part in the operator's readiness, in the
//! real operator against the real API server: an operator whose user may apply ConfigMaps but
//! not list or watch them applies the child, yet `/readyz` answers 503 naming the children's
//! watch and the missing permission (and `ready()` does not return); the same operator with
//! the permission is ready. The operator runs as an impersonated user bound to a Role in the
//! test's namespace.

mod operator_common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kopf_examples::crd::KopfExample;
use kopf_runtime::{Action, Children, HandlerError, Operator, reconcile};
use kopf_tests::{TestNamespace, test_config, wait_until};
use kube::api::PostParams;
use operator_common::*;
use serde_json::json;

/// How long the operator may take to get ready or to apply a child (upper bound with slack).
const PROMPTLY: Duration = Duration::from_secs(30);

#[reconcile(id = "rc-ready", owns(ConfigMap), backoff = "1s")]
async fn rc_ready(
    obj: Arc<KopfExample>,
    children: Children<KopfExample>,
) -> Result<Action, HandlerError> {
    let field = obj.spec.field.clone().unwrap_or_default();
    let config = ConfigMap {
        data: Some(BTreeMap::from([("field".to_owned(), field)])),
        ..ConfigMap::default()
    };
    children.apply("config", config).await?;
    Ok(Action::await_change())
}

/// A Role in `ns` with what the operator needs, ConfigMaps' `list` and `watch` only if
/// `watch_children`, bound to the user `user`.
async fn grant(ns: &TestNamespace, user: &str, watch_children: bool) -> anyhow::Result<()> {
    let mut child_verbs = vec!["get", "create", "patch"];
    if watch_children {
        child_verbs.extend(["list", "watch"]);
    }
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "kopf-ready"},
        "rules": [
            {"apiGroups": ["kopf.dev"], "resources": ["kopfexamples"],
             "verbs": ["get", "list", "watch", "patch", "update"]},
            {"apiGroups": ["kopf.dev"], "resources": ["kopfexamples/status"],
             "verbs": ["get", "patch", "update"]},
            {"apiGroups": ["", "events.k8s.io"], "resources": ["events"],
             "verbs": ["create", "patch"]},
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": child_verbs},
        ],
    }))?;
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "kopf-ready"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "kopf-ready"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }))?;
    let params = PostParams::default();
    ns.api::<Role>().create(&params, &role).await?;
    ns.api::<RoleBinding>().create(&params, &binding).await?;
    Ok(())
}

/// The operator of `rc-ready` in `ns`, as the user `user`, serving the probes.
async fn start_as(ns: &TestNamespace, user: &str) -> anyhow::Result<Operator> {
    let mut config = test_config().await?;
    config.auth_info.impersonate = Some(user.to_owned());
    config.auth_info.impersonate_groups = Some(vec!["system:authenticated".to_owned()]);
    Ok(operator(ns, &["rc-ready"])
        .await?
        .kube_config(config)
        .health_addr(([127, 0, 0, 1], 0).into())
        .start()
        .await?)
}

/// `/readyz` as it answers now (503 and an empty body if it cannot be reached).
async fn readyz(op: &Operator) -> (u16, String) {
    let addr = op.health_addr().expect("a probe address was configured");
    probe(addr, "/readyz").await.unwrap_or((503, String::new()))
}

/// The child `one-config`'s `data.field`, or `None` while it does not exist.
async fn child_field(ns: &TestNamespace) -> Option<String> {
    let child = ns.api::<ConfigMap>().get_opt("one-config").await.ok()??;
    child.data?.get("field").cloned()
}

#[tokio::test]
async fn a_forbidden_child_watch_keeps_the_operator_unready() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let user = format!("kopf-ready-denied-{}", ns.name());
    grant(&ns, &user, false).await?;
    let op = start_as(&ns, &user).await?;
    create(&api, "one", "x").await?;

    // The owner is served (the child is applied) while the children's watch is forbidden.
    wait_until("the child to be applied", PROMPTLY, || async {
        child_field(&ns).await.as_deref() == Some("x")
    })
    .await;
    let why = "/readyz to name the forbidden children's watch";
    wait_until(why, PROMPTLY, || async {
        let (code, body) = readyz(&op).await;
        code == 503
            && body.contains("configmaps.v1 (children)")
            && body.contains("not permitted to list/watch")
            && body.contains(&format!("in {}", ns.name()))
    })
    .await;
    let (code, body) = readyz(&op).await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("\"configmaps\""), "the permission: {body}");
    assert!(!op.is_ready(), "{body}");
    let caught_up = tokio::time::timeout(Duration::from_millis(500), op.ready()).await;
    assert!(
        caught_up.is_err(),
        "ready() returned with the watch forbidden"
    );

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn a_permitted_child_watch_lets_the_operator_get_ready() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let user = format!("kopf-ready-granted-{}", ns.name());
    grant(&ns, &user, true).await?;
    let op = start_as(&ns, &user).await?;
    create(&api, "one", "x").await?;

    if tokio::time::timeout(PROMPTLY, op.ready()).await.is_err() {
        anyhow::bail!("not ready within {PROMPTLY:?}: {:?}", readyz(&op).await);
    }
    let (code, body) = readyz(&op).await;
    assert_eq!(code, 200, "{body}");
    wait_until("the child to be applied", PROMPTLY, || async {
        child_field(&ns).await.as_deref() == Some("x")
    })
    .await;
    // The watch works: a deleted child is re-created.
    let maps = ns.api::<ConfigMap>();
    maps.delete("one-config", &Default::default()).await?;
    wait_until("the deleted child to be re-created", PROMPTLY, || async {
        child_field(&ns).await.as_deref() == Some("x")
    })
    .await;
    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}
