//! Admission webhooks under leader election, against the real API server: every replica starts
//! its webhook server at once (the standby too, before any replica leads), with the CA's Secret
//! made by whichever comes first and shared; the configurations are the leader's, and point at
//! the new leader once the old one has stopped, without a refused admission beyond the moment
//! the API server takes the new one in.

mod operator_common;

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kopf_examples::crd::{KopfExample, KopfExampleSpec};
use kopf_runtime::{Operator, Registry, Rejection, Webhooks, validate};
use kopf_tests::{test_config, try_wait_for, wait_for};
use kube::api::{Api, DeleteParams, PostParams};
use operator_common::*;

/// Refuses `spec.field: forbidden`.
#[validate(id = "whe-field")]
fn field_allowed(obj: &KopfExample) -> Result<(), Rejection> {
    match obj.spec.field.as_deref() {
        Some("forbidden") => Err(Rejection::new("spec.field must not be \"forbidden\"")),
        _ => Ok(()),
    }
}

fn example(name: &str, field: &str) -> KopfExample {
    let spec = KopfExampleSpec {
        field: Some(field.to_owned()),
        ..KopfExampleSpec::default()
    };
    KopfExample::new(name, spec)
}

/// One replica of the operator `name`, elected over the Lease `whe` of `ns`, serving the
/// admission handler on its own loopback port (returned), with its CA in the Secret `whe-ca`.
async fn replica(
    name: &str,
    ns: &kopf_tests::TestNamespace,
    identity: &str,
) -> anyhow::Result<(Operator, u16)> {
    init_test_logging();
    let port = kopf_tests::free_port();
    let settings = Webhooks::url(format!("https://127.0.0.1:{port}"))
        .ca_secret(ns.name(), "whe-ca")
        .handlers(["whe-field"]);
    let operator = Operator::builder()
        .name(name)
        .kube_config(test_config().await?)
        .namespaces([ns.name()])
        .registry(&Registry::default())
        .leader_election(short_election("whe", ns, identity))
        .webhooks(settings)
        .shutdown_timeout(Duration::from_secs(5))
        .start()
        .await?;
    Ok((operator, port))
}

/// The port the configuration `name` sends the API server to, once it exists.
async fn configured_port(name: &str) -> Option<u16> {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client().await);
    let config = api.get_opt(name).await.ok().flatten()?;
    let hook = config.webhooks?.into_iter().next()?;
    // https://127.0.0.1:<port>/validate/<id>
    let url = hook.client_config.url?;
    let after_host = url.strip_prefix("https://127.0.0.1:")?;
    after_host.split('/').next()?.parse().ok()
}

#[tokio::test]
async fn every_replica_serves_and_the_leader_keeps_the_configuration() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let name = format!("whe-{}", ns.name());
    // Both start: the webhook server does not wait for (nor need) the leadership.
    let (a, port_a) = replica(&name, &ns, "a").await?;
    let (b, port_b) = replica(&name, &ns, "b").await?;

    // One CA for both, from the shared Secret: each server presents a certificate it signed.
    let secrets: Api<Secret> = Api::namespaced(client().await, ns.name());
    let ca = secrets.get("whe-ca").await?.data.unwrap_or_default();
    let ca = ca
        .get("ca.crt")
        .map(|pem| pem.0.clone())
        .unwrap_or_default();
    for port in [port_a, port_b] {
        kopf_tests::webhook_tls(port, &ca).await?;
    }

    // The leader applies the configuration with its own address; the API server then refuses.
    let leading = wait_for("the leader's configuration", PROMPTLY, || async {
        match configured_port(&name).await {
            Some(port) if port == port_a || port == port_b => Ok(port),
            other => Err(format!("configured: {other:?}")),
        }
    })
    .await;
    let refused = |object: &'static str| {
        let api = api.clone();
        async move {
            match api
                .create(&PostParams::default(), &example(object, "forbidden"))
                .await
            {
                Err(kube::Error::Api(status)) if status.message.contains("must not be") => Ok(()),
                Ok(_) => {
                    api.delete(object, &DeleteParams::default()).await?;
                    Err(anyhow::anyhow!("admitted"))
                }
                Err(other) => Err(anyhow::anyhow!("{other}")),
            }
        }
    };
    wait_for("a refusal", PROMPTLY, || refused("first")).await;

    // The leader stops: the other one leads and points the configuration at itself.
    let (gone, survivor, survivor_port) = if leading == port_a {
        (a, b, port_b)
    } else {
        (b, a, port_a)
    };
    gone.shutdown().await;
    let moved = try_wait_for(
        "the configuration to follow the new leader",
        PROMPTLY,
        || async {
            match configured_port(&name).await {
                Some(port) if port == survivor_port => Ok(()),
                other => Err(format!("configured: {other:?}")),
            }
        },
    )
    .await;
    assert!(moved.is_ok(), "{moved:?}");
    wait_for("a refusal from the new leader", PROMPTLY, || {
        refused("second")
    })
    .await;
    api.create(&PostParams::default(), &example("allowed", "fine"))
        .await?;

    survivor.shutdown().await;
    kopf_tests::remove_webhook_configurations(&client().await, &name).await?;
    ns.cleanup().await?;
    Ok(())
}
