//! Level 4: the real operator against a real API server — the cluster of `KUBECONFIG` (kind,
//! k3d, or the kopf-rs repository's `tools/kube-testenv`). Each test runs the operator
//! in-process on a namespace of its own, drives it through the API, and waits for what should
//! happen, with a deadline. Without a cluster these tests fail and say so.

use std::future::Future;
use std::time::Duration;

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kopf_runtime::testing::{LiveOperator, Outcome};
use kopf_runtime::{Operator, Registry};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, CustomResourceExt as _};
use operator::crd::{Backup, BackupSpec};
use serde_json::json;

/// How long anything the operator does may take, with slack for a busy machine.
const PROMPTLY: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_backs_up_watches_and_lets_go_on_deletion() -> anyhow::Result<()> {
    let client = cluster().await?;
    install_crd(&client).await?;
    let ns = create_namespace(&client, "watch-and-back-up").await?;
    let builder = Operator::builder()
        .name("operator-test")
        .client(client.clone())
        .namespaces([ns.as_str()])
        .registry(&Registry::from_inventory()?)
        .shutdown_timeout(Duration::from_secs(10));
    let mut operator = LiveOperator::start(builder).await?; // ready, or an error naming the kind

    let backups: Api<Backup> = Api::namespaced(client.clone(), &ns);
    let spec = BackupSpec {
        bucket: "s3://b".to_owned(),
        items: vec!["orders".to_owned()],
    };
    backups
        .create(&PostParams::default(), &Backup::new("nightly", spec))
        .await?;

    // The timer's first run, as the operator saw it, and its result as the API server keeps it.
    let outcome = operator
        .wait_for(PROMPTLY, |o| {
            o.handler() == "back_up" && o.name() == "nightly"
        })
        .await;
    assert!(
        matches!(outcome, Some(Outcome::Succeeded { .. })),
        "{outcome:?}"
    );
    wait_until("status.back_up", || async {
        let status = backups.get("nightly").await.ok().and_then(|b| b.status);
        status.is_some_and(|s| s.0.get("back_up") == Some(&json!({"bucket": "s3://b", "items": 1})))
    })
    .await?;

    // The daemon's Event, and another when the spec names another bucket: the daemon follows
    // the object's latest version (`Live<Backup>`), not the one it started with.
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let watching = |bucket: &'static str| {
        let events = events.clone();
        async move {
            let list = events.list(&ListParams::default()).await;
            let note = format!("watching the bucket {bucket}");
            list.is_ok_and(|l| {
                l.items.iter().any(|e| {
                    e.reason.as_deref() == Some("Watching") && e.note.as_deref() == Some(&note)
                })
            })
        }
    };
    wait_until("the Watching event", || watching("s3://b")).await?;
    let change = json!({"spec": {"bucket": "s3://c"}});
    backups
        .patch("nightly", &PatchParams::default(), &Patch::Merge(&change))
        .await?;
    wait_until("the Watching event of the new bucket", || {
        watching("s3://c")
    })
    .await?;

    // Deletion waits for the daemon, and no longer: the finalizer goes when it has stopped.
    backups.delete("nightly", &DeleteParams::default()).await?;
    wait_until("the backup to be gone", || async {
        matches!(backups.get_opt("nightly").await, Ok(None))
    })
    .await?;

    operator.stop().await;
    delete_namespace(&client, &ns).await
}

/// With the `reconcile` feature: the reconcile handler applies the ConfigMap of a `Backup`, owned
/// by it, follows a change of its spec, and re-creates it when someone deletes it.
#[cfg(feature = "reconcile")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reconcile_handler_keeps_the_items_config_map() -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::ConfigMap;

    let client = cluster().await?;
    install_crd(&client).await?;
    let ns = create_namespace(&client, "reconcile").await?;
    let builder = Operator::builder()
        .name("operator-test")
        .client(client.clone())
        .namespaces([ns.as_str()])
        .registry(&Registry::from_inventory()?.select(&["index_items"])?)
        .shutdown_timeout(Duration::from_secs(10));
    let operator = LiveOperator::start(builder).await?;
    let backups: Api<Backup> = Api::namespaced(client.clone(), &ns);
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    // The child's UID and `data.items`, once it exists.
    let child = || async {
        let map = maps.get_opt("nightly-items").await.ok().flatten()?;
        let items = map.data?.remove("items")?;
        Some((map.metadata.uid, items))
    };

    let spec = BackupSpec {
        bucket: "s3://b".to_owned(),
        items: vec!["orders".to_owned()],
    };
    let backup = backups
        .create(&PostParams::default(), &Backup::new("nightly", spec))
        .await?;
    wait_until("the ConfigMap nightly-items", || async {
        child().await.is_some_and(|(_, items)| items == "orders")
    })
    .await?;
    // Owned by the Backup, so the garbage collector deletes it with the Backup.
    let owners = maps.get("nightly-items").await?.metadata.owner_references;
    let controller = owners
        .unwrap_or_default()
        .into_iter()
        .find(|o| o.controller == Some(true));
    let controller = controller.map(|o| (o.kind, o.name, o.uid));
    let expected = (
        "Backup".to_owned(),
        "nightly".to_owned(),
        backup.metadata.uid.unwrap_or_default(),
    );
    assert_eq!(controller, Some(expected), "the ConfigMap's controller");

    // A change of the spec: applied to the child.
    let change = json!({"spec": {"items": ["orders", "customers"]}});
    backups
        .patch("nightly", &PatchParams::default(), &Patch::Merge(&change))
        .await?;
    wait_until("the ConfigMap updated", || async {
        child()
            .await
            .is_some_and(|(_, items)| items == "orders\ncustomers")
    })
    .await?;

    // Someone deletes the child: the child watch wakes the handler, which applies it again.
    let deleted = child().await.and_then(|(uid, _)| uid);
    maps.delete("nightly-items", &DeleteParams::default())
        .await?;
    wait_until("the ConfigMap re-created", || async {
        child()
            .await
            .is_some_and(|(uid, items)| uid != deleted && items == "orders\ncustomers")
    })
    .await?;

    operator.stop().await;
    delete_namespace(&client, &ns).await
}

/// With the `webhook` feature: the API server asks the operator's webhook server (on this
/// machine's loopback, so the API server must run here too, as the kopf-rs testenv does) before
/// it stores a `Backup`, and refuses one whose bucket is not a URL with the handler's message.
#[cfg(feature = "webhook")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_refuses_a_bucket_that_is_not_a_url() -> anyhow::Result<()> {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    use kopf_runtime::Webhooks;

    let client = cluster().await?;
    install_crd(&client).await?;
    let ns = create_namespace(&client, "webhook").await?;
    // A free port of the loopback, and an operator name of this test's own: the webhook
    // configuration is named after the operator, and only admits objects of `ns`.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let name = format!("operator-test-{ns}");
    let webhooks = Webhooks::url(format!("https://127.0.0.1:{port}"))
        .ca_secret(ns.as_str(), "webhook-ca")
        .handlers(["bucket_is_a_url"]);
    let builder = Operator::builder()
        .name(name.as_str())
        .client(client.clone())
        .namespaces([ns.as_str()])
        .registry(&Registry::default())
        .webhooks(webhooks)
        .shutdown_timeout(Duration::from_secs(10));
    let operator = LiveOperator::start(builder).await?;
    let backups: Api<Backup> = Api::namespaced(client.clone(), &ns);
    let backup = |name: &str, bucket: &str| {
        let spec = BackupSpec {
            bucket: bucket.to_owned(),
            items: Vec::new(),
        };
        Backup::new(name, spec)
    };

    // Refused, once the API server has taken in the configuration (within a moment).
    let deadline = tokio::time::Instant::now() + PROMPTLY;
    let refusal = loop {
        match backups
            .create(&PostParams::default(), &backup("bad", "my-bucket"))
            .await
        {
            Err(kube::Error::Api(status)) => break status.message,
            Ok(_) if tokio::time::Instant::now() < deadline => {
                backups.delete("bad", &DeleteParams::default()).await?;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Ok(_) => bail!("a Backup without a URL was admitted for {PROMPTLY:?}"),
            Err(other) => return Err(other.into()),
        }
    };
    assert!(refusal.contains("spec.bucket must be a URL"), "{refusal}");
    // Admitted: a bucket that is a URL.
    backups
        .create(&PostParams::default(), &backup("good", "s3://my-bucket"))
        .await?;

    operator.stop().await;
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .delete(&name, &DeleteParams::default())
        .await?;
    delete_namespace(&client, &ns).await
}

/// The client of `KUBECONFIG` (or of the pod's service account), with a clear error without one.
async fn cluster() -> anyhow::Result<Client> {
    Client::try_default().await.context(
        "no cluster for the level-4 tests: set KUBECONFIG (kind, k3d, or the kopf-rs \
         repository's tools/kube-testenv/start.sh), or run only `cargo test --test handlers \
         --test simulation`",
    )
}

/// Installs (server-side applies) the CRD and waits until the API server serves it.
async fn install_crd(client: &Client) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = Backup::crd();
    let name = crd.metadata.name.clone().unwrap_or_default();
    let params = PatchParams::apply("operator-test").force();
    crds.patch(&name, &params, &Patch::Apply(&crd)).await?;
    wait_until("the CRD to be established", || async {
        let crd = crds.get(&name).await.ok();
        let conditions = crd.and_then(|c| c.status).and_then(|s| s.conditions);
        conditions.is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
    })
    .await
}

/// A new namespace for one test, named after it.
async fn create_namespace(client: &Client, test: &str) -> anyhow::Result<String> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .subsec_nanos();
    let name = format!("test-{test}-{nanos:x}");
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await?;
    Ok(name)
}

async fn delete_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    Api::<Namespace>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await?;
    Ok(())
}

/// Waits until `condition` holds, at most [`PROMPTLY`]: never a fixed sleep.
async fn wait_until<F, Fut>(what: &str, condition: F) -> anyhow::Result<()>
where
    F: Fn() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + PROMPTLY;
    while !condition().await {
        if tokio::time::Instant::now() > deadline {
            bail!("{what}: not within {PROMPTLY:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}
