//! Proves the test environment is a real kube-apiserver: namespaces, CRDs, watches, the status
//! subresource, finalizers, independent environments and API server restarts.
//!
//! Needs `KUBECONFIG` of a running testenv (`eval "$(tools/kube-testenv/start.sh)"`).

use std::time::Duration;

use anyhow::Context as _;
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kopf_examples::crd::{COMMITTED_CRDS_YAML, KopfCluster, KopfExample, KopfExampleSpec};
use kopf_tests::{
    TestEnv, TestEnvOptions, TestNamespace, install_crd, is_not_found, test_client, wait_for,
    wait_until,
};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, CustomResourceExt as _, Resource as _, ResourceExt as _};
use serde_json::json;

/// Deadline for things the server does promptly (generous: the machine is slow and noisy).
const PROMPTLY: Duration = Duration::from_secs(30);
const FINALIZER: &str = "kopf.dev/test-finalizer";

async fn example_namespace() -> anyhow::Result<(TestNamespace, Api<KopfExample>)> {
    install_crd(&test_client().await, &KopfExample::crd()).await?;
    let mut ns = TestNamespace::create().await?;
    ns.strip_finalizers_of::<KopfExample>();
    let api = ns.api::<KopfExample>();
    Ok((ns, api))
}

fn example(name: &str, finalizers: &[&str]) -> KopfExample {
    let mut obj = KopfExample::new(
        name,
        KopfExampleSpec {
            field: Some("value".to_owned()),
            ..KopfExampleSpec::default()
        },
    );
    if !finalizers.is_empty() {
        obj.metadata.finalizers = Some(finalizers.iter().map(|f| (*f).to_owned()).collect());
    }
    obj
}

#[tokio::test]
async fn lists_namespaces() -> anyhow::Result<()> {
    let client = test_client().await;
    let namespaces = Api::<Namespace>::all(client)
        .list(&ListParams::default())
        .await?;
    let names: Vec<String> = namespaces.iter().map(|ns| ns.name_any()).collect();
    assert!(names.iter().any(|n| n == "default"), "{names:?}");
    assert!(names.iter().any(|n| n == "kube-system"), "{names:?}");
    Ok(())
}

#[tokio::test]
async fn installs_the_committed_example_crds() -> anyhow::Result<()> {
    let client = test_client().await;
    for doc in COMMITTED_CRDS_YAML.split("\n---\n") {
        let crd: CustomResourceDefinition =
            serde_yaml::from_str(doc).context("committed CRD YAML")?;
        let installed = install_crd(&client, &crd).await?;
        assert_eq!(installed.spec.names.plural, crd.spec.names.plural);
        assert_eq!(installed.spec.scope, crd.spec.scope);
    }
    // Both are served: listing them works (an empty list is fine).
    Api::<KopfExample>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    Api::<KopfCluster>::all(client)
        .list(&ListParams::default())
        .await?;
    Ok(())
}

#[tokio::test]
async fn watcher_sees_the_apply_event_of_a_new_object() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let mut events = watcher(api.clone(), watcher::Config::default()).boxed();
    // The initial listing of an empty namespace ends with InitDone; only then create.
    loop {
        let event = tokio::time::timeout(PROMPTLY, events.try_next())
            .await
            .context("no InitDone")??;
        match event {
            Some(watcher::Event::InitDone) => break,
            Some(watcher::Event::Init) => {}
            other => anyhow::bail!("unexpected event before InitDone: {other:?}"),
        }
    }
    api.create(&PostParams::default(), &example("watched", &[]))
        .await?;
    let seen = tokio::time::timeout(PROMPTLY, async {
        while let Some(event) = events.try_next().await? {
            if let watcher::Event::Apply(obj) = event {
                return Ok::<_, watcher::Error>(Some(obj));
            }
        }
        Ok(None)
    })
    .await
    .context("no Apply event within the deadline")??
    .context("the watch stream ended")?;
    assert_eq!(seen.name_any(), "watched");
    assert_eq!(seen.spec.field.as_deref(), Some("value"));
    assert_eq!(
        seen.spec.items,
        Vec::<String>::new(),
        "items defaults to [] on the server"
    );
    ns.cleanup().await
}

#[tokio::test]
async fn status_subresource_keeps_unknown_fields() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    api.create(&PostParams::default(), &example("with-status", &[]))
        .await?;
    let status = json!({"status": {"tick": {"n": 1}, "note": "hello"}});
    let patched = api
        .patch_status(
            "with-status",
            &PatchParams::default(),
            &Patch::Merge(&status),
        )
        .await?;
    assert_eq!(serde_json::to_value(&patched.status)?, status["status"]);

    // Status written through the main endpoint is ignored: it has a status subresource.
    let ignored = json!({"status": {"ignored": true}, "spec": {"field": "changed"}});
    api.patch(
        "with-status",
        &PatchParams::default(),
        &Patch::Merge(&ignored),
    )
    .await?;
    let read = api.get("with-status").await?;
    assert_eq!(read.spec.field.as_deref(), Some("changed"));
    assert_eq!(serde_json::to_value(&read.status)?, status["status"]);
    ns.cleanup().await
}

#[tokio::test]
async fn finalizer_holds_deletion_until_removed() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    api.create(&PostParams::default(), &example("held", &[FINALIZER]))
        .await?;
    api.delete("held", &DeleteParams::default()).await?;

    let held = api.get("held").await?;
    assert!(
        held.metadata.deletion_timestamp.is_some(),
        "deletionTimestamp is set"
    );
    assert_eq!(held.finalizers(), [FINALIZER]);

    let remove = json!({"metadata": {"finalizers": null}});
    api.patch("held", &PatchParams::default(), &Patch::Merge(&remove))
        .await?;
    wait_for("the object to be gone", PROMPTLY, || async {
        match api.get_opt("held").await? {
            None => Ok(()),
            Some(obj) => Err(anyhow::anyhow!(
                "still there: {:?}",
                obj.metadata.finalizers
            )),
        }
    })
    .await;
    ns.cleanup().await
}

#[tokio::test]
async fn cleanup_strips_leftover_finalizers() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let name = ns.name().to_owned();
    let client = ns.client().clone();
    api.create(&PostParams::default(), &example("leftover", &[FINALIZER]))
        .await?;
    ns.cleanup().await?;

    // Without kube-controller-manager the object stays (unfinalized); with it, it goes.
    let leftover = api.get_opt("leftover").await?;
    assert!(
        leftover.is_none_or(|obj| obj.finalizers().is_empty()),
        "finalizers were stripped"
    );
    let namespace = Api::<Namespace>::all(client).get_opt(&name).await?;
    assert!(
        namespace.is_none_or(|ns| ns.metadata.deletion_timestamp.is_some()),
        "the namespace is being deleted"
    );
    Ok(())
}

#[tokio::test]
async fn dropped_namespace_is_cleaned_up_best_effort() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let name = ns.name().to_owned();
    let client = ns.client().clone();
    api.create(&PostParams::default(), &example("dropped", &[FINALIZER]))
        .await?;
    drop(ns); // no cleanup() call, as when a test panics; runs on this current-thread runtime

    let leftover = api.get_opt("dropped").await?;
    assert!(
        leftover.is_none_or(|obj| obj.finalizers().is_empty()),
        "finalizers were stripped"
    );
    let namespace = Api::<Namespace>::all(client).get_opt(&name).await?;
    assert!(
        namespace.is_none_or(|ns| ns.metadata.deletion_timestamp.is_some()),
        "the namespace is being deleted"
    );
    Ok(())
}

async fn namespace_names(client: Client) -> anyhow::Result<Vec<String>> {
    let list = Api::<Namespace>::all(client)
        .list(&ListParams::default())
        .await?;
    Ok(list.iter().map(|ns| ns.name_any()).collect())
}

#[tokio::test]
async fn independent_testenv_starts_and_stops() -> anyhow::Result<()> {
    let env = TestEnv::start().await?;
    let shared = test_client().await;
    let client = env.client().await?;
    assert!(
        namespace_names(client.clone())
            .await?
            .contains(&"default".to_owned())
    );

    // Independent: a namespace created there does not exist on the shared server.
    let marker = Namespace {
        metadata: ObjectMeta {
            name: Some("only-in-independent".to_owned()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &marker)
        .await?;
    assert!(
        namespace_names(client.clone())
            .await?
            .contains(&"only-in-independent".to_owned())
    );
    assert!(
        !namespace_names(shared.clone())
            .await?
            .contains(&"only-in-independent".to_owned())
    );

    let dir = env.dir().to_owned();
    env.stop().await?;
    assert!(!dir.exists(), "the state directory is removed");
    let err = client
        .apiserver_version()
        .await
        .expect_err("a stopped server does not answer");
    assert!(
        !matches!(err, kube::Error::Api(_)),
        "a connection error, not an API answer: {err}"
    );
    // The shared server was not disturbed.
    shared.apiserver_version().await?;
    Ok(())
}

#[tokio::test]
async fn apiserver_restart_keeps_clients_and_data() -> anyhow::Result<()> {
    let env = TestEnv::start().await?;
    let client = env.client().await?;
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), "default");
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("survivor".to_owned()),
            ..ObjectMeta::default()
        },
        data: Some([("k".to_owned(), "v".to_owned())].into()),
        ..ConfigMap::default()
    };
    config_maps.create(&PostParams::default(), &cm).await?;

    env.stop_apiserver().await?;
    let err = config_maps
        .get("survivor")
        .await
        .expect_err("the API server is stopped");
    assert!(
        !matches!(err, kube::Error::Api(_)),
        "a connection error, not an API answer: {err}"
    );

    env.start_apiserver().await?;
    // The same client (same token, CA, port) works again, and the data survived in etcd.
    let read = wait_for("the restarted server to answer", PROMPTLY, || {
        config_maps.get("survivor")
    })
    .await;
    assert_eq!(read.data, cm.data);

    env.restart_apiserver().await?;
    wait_for("the server to answer after restart", PROMPTLY, || {
        client.apiserver_version()
    })
    .await;
    env.stop().await
}

#[tokio::test]
async fn controllers_delete_namespaces_and_collect_garbage() -> anyhow::Result<()> {
    let env = TestEnv::start_with(TestEnvOptions { controllers: true }).await?;
    let ns = TestNamespace::create_with(env.config().await?).await?;
    let (name, client) = (ns.name().to_owned(), ns.client().clone());
    let config_maps = ns.api::<ConfigMap>();
    let owner = config_maps
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: ObjectMeta {
                    name: Some("owner".to_owned()),
                    ..ObjectMeta::default()
                },
                ..ConfigMap::default()
            },
        )
        .await?;
    let owner_ref = owner.controller_owner_ref(&()).context("owner reference")?;
    for child in ["child", "orphan-control"] {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(child.to_owned());
        if child == "child" {
            cm.metadata.owner_references = Some(vec![owner_ref.clone()]);
        }
        config_maps.create(&PostParams::default(), &cm).await?;
    }
    config_maps
        .delete("owner", &DeleteParams::background())
        .await?;
    wait_until(
        "the garbage collector to delete the child",
        Duration::from_secs(60),
        || async { matches!(config_maps.get_opt("child").await, Ok(None)) },
    )
    .await;
    // Positive control for "GC deleted only the dependent": the unowned one is still there.
    assert!(config_maps.get_opt("orphan-control").await?.is_some());

    ns.cleanup().await?;
    let namespaces = Api::<Namespace>::all(client);
    wait_until(
        "the namespace controller to finish the deletion",
        Duration::from_secs(60),
        || async { matches!(namespaces.get_opt(&name).await, Ok(None)) },
    )
    .await;
    env.stop().await
}

#[tokio::test]
async fn missing_objects_are_not_found() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let err = api.get("does-not-exist").await.expect_err("no such object");
    assert!(is_not_found(&err), "{err}");
    ns.cleanup().await
}
