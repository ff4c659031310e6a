//! The `admission` example (`kopf-examples/src/bin/admission.rs`) against the real API server,
//! which calls its webhook server on the loopback: an object without an owner is refused with
//! the handler's message, a `risky` owner is admitted with a warning, an object without items
//! is stored with the default one, and the timer reads the other objects of the same owner from
//! the index, following creations and deletions.

#[allow(dead_code, unreachable_pub)]
#[path = "../../kopf-examples/src/bin/admission.rs"]
mod admission;
mod operator_common;

use std::time::Duration;

use kopf_examples::crd::{KopfExample, KopfExampleSpec};
use kopf_runtime::Webhooks;
use kube::api::{Api, DeleteParams, PostParams};
use operator_common::*;
use serde_json::json;

fn object(name: &str, owner: Option<&str>) -> KopfExample {
    let spec = KopfExampleSpec {
        field: owner.map(str::to_owned),
        ..KopfExampleSpec::default()
    };
    KopfExample::new(name, spec)
}

#[tokio::test]
async fn the_example_refuses_defaults_and_indexes() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let name = format!("adm-{}", ns.name());
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let webhooks = Webhooks::url(format!("https://127.0.0.1:{port}"))
        .ca_secret(ns.name(), "adm-ca")
        .handlers(admission::ADMISSION);
    let op = operator(&ns, &["owned_by_the_same"])
        .await?
        .name(&name)
        .index::<admission::by_owner>()
        .webhooks(webhooks)
        .start()
        .await?;
    let post = PostParams::default();

    // Refused once the API server has the configuration (it picks it up within a moment).
    let deadline = std::time::Instant::now() + PROMPTLY;
    let refusal = loop {
        match api.create(&post, &object("nobody", None)).await {
            Err(kube::Error::Api(status)) => break status.message,
            Ok(_) => {
                api.delete("nobody", &DeleteParams::default()).await?;
                assert!(std::time::Instant::now() < deadline, "never refused");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(other) => return Err(other.into()),
        }
    };
    assert!(
        refusal.contains("spec.field must name the object's owner"),
        "{refusal}"
    );

    // Defaulted by the mutation; the index pairs the two objects of one owner.
    let stored = api.create(&post, &object("a", Some("payments"))).await?;
    assert_eq!(stored.spec.items, ["default"]);
    api.create(&post, &object("b", Some("payments"))).await?;
    wait_status(&api, "a", "owned_by_the_same", json!(["b"])).await;
    wait_status(&api, "b", "owned_by_the_same", json!(["a"])).await;
    api.create(&post, &object("c", Some("risky"))).await?;
    wait_status(&api, "c", "owned_by_the_same", json!([])).await;
    api.delete("b", &DeleteParams::default()).await?;
    wait_status(&api, "a", "owned_by_the_same", json!([])).await;

    op.shutdown().await;
    kopf_tests::remove_webhook_configurations(&client().await, &name).await?;
    ns.cleanup().await?;
    Ok(())
}

const WEBHOOK_YAML: &str = include_str!("../../kopf-examples/deploy/webhook.yaml");

/// The document of `kind` in `webhook.yaml`.
fn document<T: serde::de::DeserializeOwned>(kind: &str) -> anyhow::Result<T> {
    let doc = (WEBHOOK_YAML.split("\n---\n"))
        .find(|doc| doc.contains(&format!("\nkind: {kind}\n")))
        .ok_or_else(|| anyhow::anyhow!("no {kind} in webhook.yaml"))?;
    Ok(serde_yaml::from_str(doc)?)
}

/// The webhook server of an operator running as `account` in `ns` (its only handlers are the
/// admission ones), started or refused.
async fn start_as(
    ns: &str,
    account: &str,
    name: &str,
) -> anyhow::Result<Result<kopf_runtime::Operator, kopf_runtime::OperatorError>> {
    let admin = client().await;
    let token = kopf_tests::service_account_token(&admin, ns, account).await?;
    let config = kopf_tests::token_config(&token).await?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let webhooks = Webhooks::url(format!("https://127.0.0.1:{port}"))
        .ca_secret(ns, "kopf-examples-webhook-ca")
        .handlers(admission::ADMISSION);
    Ok(kopf_runtime::Operator::builder()
        .name(name)
        .kube_config(config)
        .namespaces([ns])
        .registry(&kopf_runtime::Registry::default())
        .webhooks(webhooks)
        .start()
        .await)
}

#[tokio::test]
async fn the_webhook_rbac_of_the_manifests_is_necessary_and_sufficient() -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    use kube::ResourceExt as _;
    let (ns, _api) = example_namespace().await?;
    let admin = client().await;
    let post = PostParams::default();
    let account = "kopf-examples";
    let mut sa = ServiceAccount::default();
    sa.metadata.name = Some(account.into());
    Api::<ServiceAccount>::namespaced(admin.clone(), ns.name())
        .create(&post, &sa)
        .await?;
    let name = format!("adm-rbac-{}", ns.name());

    // Without the rules: refused at start, naming what it could not do.
    let refused = start_as(ns.name(), account, &name).await?;
    let error = format!(
        "{:#}",
        anyhow::Error::from(refused.expect_err("no permissions"))
    );
    assert!(
        error.contains("kopf-examples-webhook-ca") && error.contains("403"),
        "{error}"
    );

    // With the manifest's rules, renamed into this namespace: the whole start.
    let suffix = ns.name();
    let mut role: ClusterRole = document("ClusterRole")?;
    role.metadata.name = Some(format!("{}-{suffix}", role.name_any()));
    let mut binding: ClusterRoleBinding = document("ClusterRoleBinding")?;
    binding.metadata.name = Some(format!("{}-{suffix}", binding.name_any()));
    binding.role_ref.name = role.name_any();
    let mut ca_role: Role = document("Role")?;
    ca_role.metadata.namespace = Some(ns.name().into());
    let mut ca_binding: RoleBinding = document("RoleBinding")?;
    ca_binding.metadata.namespace = Some(ns.name().into());
    for subject in
        (binding.subjects.iter_mut().flatten()).chain(ca_binding.subjects.iter_mut().flatten())
    {
        subject.namespace = Some(ns.name().into());
    }
    Api::<ClusterRole>::all(admin.clone())
        .create(&post, &role)
        .await?;
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&post, &binding)
        .await?;
    Api::<Role>::namespaced(admin.clone(), ns.name())
        .create(&post, &ca_role)
        .await?;
    Api::<RoleBinding>::namespaced(admin.clone(), ns.name())
        .create(&post, &ca_binding)
        .await?;
    let deadline = std::time::Instant::now() + PROMPTLY;
    let op = loop {
        match start_as(ns.name(), account, &name).await? {
            Ok(op) => break op,
            Err(e) if std::time::Instant::now() < deadline => {
                eprintln!("not yet: {e}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e.into()),
        }
    };
    op.shutdown().await;
    // And a second start reads the CA the first made (get, not create).
    start_as(ns.name(), account, &name).await??.shutdown().await;

    kopf_tests::remove_webhook_configurations(&admin, &name).await?;
    Api::<ClusterRoleBinding>::all(admin.clone())
        .delete(&binding.name_any(), &DeleteParams::default())
        .await?;
    Api::<ClusterRole>::all(admin)
        .delete(&role.name_any(), &DeleteParams::default())
        .await?;
    ns.cleanup().await?;
    Ok(())
}
