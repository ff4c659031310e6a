//! The `webapp` example (`kopf-examples/src/bin/webapp.rs`) against the real API server, with
//! kube-controller-manager's garbage collector: the reconcile handler applies a Deployment, a
//! Service and a ConfigMap owned by the parent, with the spec's image, replicas, port and config;
//! a spec change updates them; an edit of the Deployment's replicas by another field manager is
//! undone; a deleted Service is re-created; the parent's deletion takes all three with it.

mod operator_common;
#[allow(dead_code, unreachable_pub)]
#[path = "../../kopf-examples/src/bin/webapp.rs"]
mod webapp;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kopf_examples::crd::{KopfExample, KopfExampleSpec};
use kopf_runtime::engine::ChildWrites;
use kopf_tests::{is_not_found, wait_for, wait_until};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use operator_common::{PROMPTLY, delete, example_namespace, operator, status, wait_gone};
use serde::de::DeserializeOwned;
use serde_json::json;

/// How long the garbage collector may take: for a resource kind it has not seen yet (the CRD
/// was installed by this test), it learns the kind at its next discovery resync (every 30 s).
const COLLECTED: Duration = Duration::from_secs(90);

/// What the test reads of the three children.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    image: Option<String>,
    replicas: Option<i32>,
    container_port: Option<i32>,
    service_port: Option<i32>,
    config: Option<BTreeMap<String, String>>,
}

impl Seen {
    fn want(image: &str, replicas: i32, port: i32, config: &[(&str, &str)]) -> Self {
        let config = config
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()));
        Self {
            image: Some(image.to_owned()),
            replicas: Some(replicas),
            container_port: Some(port),
            service_port: Some(port),
            config: Some(config.collect()),
        }
    }
}

/// The three children of `name`, as far as they exist.
async fn seen(
    deployments: &Api<Deployment>,
    services: &Api<Service>,
    maps: &Api<ConfigMap>,
    name: &str,
) -> anyhow::Result<Seen> {
    let deployment = deployments.get_opt(name).await?;
    let spec = deployment.as_ref().map(|d| &d.spec);
    let container = spec.and_then(|s| s.template.spec.as_ref()?.containers.first().cloned());
    let service = services.get_opt(name).await?;
    let service_port =
        (service.as_ref()).and_then(|s| s.spec.as_ref()?.ports.as_ref()?.first().map(|p| p.port));
    let config = maps.get_opt(&format!("{name}-config")).await?;
    Ok(Seen {
        image: container.as_ref().and_then(|c| c.image.clone()),
        replicas: spec.and_then(|s| s.replicas),
        container_port: (container.as_ref())
            .and_then(|c| c.ports.as_ref()?.first().map(|p| p.container_port)),
        service_port,
        config: config.and_then(|c| c.data),
    })
}

/// Checks that `child` is controlled by `parent` alone, and applied by the example's manager.
fn assert_owned<K: Resource + Debug>(child: &K, parent: &KopfExample) {
    let meta: &ObjectMeta = child.meta();
    let owners = meta.owner_references.clone().unwrap_or_default();
    assert_eq!(owners.len(), 1, "{owners:?}");
    assert_eq!(owners[0].api_version, "kopf.dev/v1");
    assert_eq!(owners[0].kind, "KopfExample");
    assert_eq!(Some(&owners[0].name), parent.metadata.name.as_ref());
    assert_eq!(Some(&owners[0].uid), parent.metadata.uid.as_ref());
    assert_eq!(owners[0].controller, Some(true));
    assert_eq!(owners[0].block_owner_deletion, Some(true));
    let applied = (meta.managed_fields.iter().flatten()).any(|m| {
        m.manager.as_deref() == Some(webapp::FIELD_MANAGER)
            && m.operation.as_deref() == Some("Apply")
    });
    assert!(applied, "{:?}", meta.managed_fields);
}

/// Waits until `name` no longer exists in `api`.
async fn wait_collected<K>(api: &Api<K>, name: &str)
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let what = format!("the garbage collector to delete {name}");
    wait_until(what, COLLECTED, || async {
        matches!(api.get(name).await, Err(ref e) if is_not_found(e))
    })
    .await;
}

fn spec(image: &str, items: &[&str]) -> KopfExampleSpec {
    KopfExampleSpec {
        field: Some(image.to_owned()),
        items: items.iter().map(|i| (*i).to_owned()).collect(),
        duration: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handler_runs_a_web_app_of_three_children() -> anyhow::Result<()> {
    let (ns, parents) = example_namespace().await?;
    let deployments = ns.api::<Deployment>();
    let services = ns.api::<Service>();
    let maps = ns.api::<ConfigMap>();
    let writes = ChildWrites::new(webapp::FIELD_MANAGER);
    let op = operator(&ns, &["webapp"])
        .await?
        .data(writes)
        .start()
        .await?;
    let wait_seen = |want: Seen| {
        let (deployments, services, maps) = (&deployments, &services, &maps);
        async move {
            let what = format!("the children of web as {want:?}");
            wait_for(what, PROMPTLY, || async {
                let got = seen(deployments, services, maps, "web").await?;
                anyhow::ensure!(got == want, "{got:?}");
                Ok(())
            })
            .await;
        }
    };

    // 1. The parent appears: its three children, owned by it, with the spec's content.
    let items = ["replicas=2", "port=8080", "greeting=hello"];
    let new = KopfExample::new("web", spec("nginx:1.27", &items));
    let parent = parents.create(&PostParams::default(), &new).await?;
    wait_seen(Seen::want("nginx:1.27", 2, 8080, &[("greeting", "hello")])).await;
    assert_owned(&deployments.get("web").await?, &parent);
    assert_owned(&services.get("web").await?, &parent);
    assert_owned(&maps.get("web-config").await?, &parent);
    let status_of = |image: &str, replicas: i32| {
        json!({"deployment": "web", "service": "web", "configMap": "web-config",
               "image": image, "replicas": replicas})
    };
    let want = status_of("nginx:1.27", 2);
    wait_for("status.webapp", PROMPTLY, || async {
        let got = status(&parents, "web").await.get("webapp").cloned();
        anyhow::ensure!(got.as_ref() == Some(&want), "{got:?}");
        Ok(())
    })
    .await;

    // 2. The spec changes: the children follow (a config key no longer in the spec goes).
    let items = ["replicas=3", "port=9090", "colour=blue"];
    let change = json!({"spec": {"field": "nginx:1.28", "items": items}});
    parents
        .patch("web", &PatchParams::default(), &Patch::Merge(&change))
        .await?;
    wait_seen(Seen::want("nginx:1.28", 3, 9090, &[("colour", "blue")])).await;
    let want = status_of("nginx:1.28", 3);
    wait_for("status.webapp after the change", PROMPTLY, || async {
        let got = status(&parents, "web").await.get("webapp").cloned();
        anyhow::ensure!(got.as_ref() == Some(&want), "{got:?}");
        Ok(())
    })
    .await;

    // 3. Another field manager scales the Deployment: the edit lands (the positive control),
    // then the handler takes the replicas back.
    let scale = json!({"spec": {"replicas": 7}});
    let params = PatchParams {
        field_manager: Some("someone-else".to_owned()),
        ..PatchParams::default()
    };
    let scaled = deployments
        .patch("web", &params, &Patch::Merge(&scale))
        .await?;
    assert_eq!(scaled.spec.replicas, Some(7));
    wait_seen(Seen::want("nginx:1.28", 3, 9090, &[("colour", "blue")])).await;

    // 4. The Service is deleted: it is re-created (a new object).
    let old_uid = services.get("web").await?.uid();
    services.delete("web", &DeleteParams::default()).await?;
    wait_for("the Service web re-created", PROMPTLY, || async {
        let service = services.get_opt("web").await?;
        let uid = service.as_ref().and_then(ResourceExt::uid);
        anyhow::ensure!(uid.is_some() && uid != old_uid, "uid {uid:?}");
        Ok(())
    })
    .await;
    wait_seen(Seen::want("nginx:1.28", 3, 9090, &[("colour", "blue")])).await;

    // 5. The parent is deleted (no cleanup: no finalizer holds it): the garbage collector
    // deletes the three children.
    assert_eq!(parents.get("web").await?.finalizers(), &[] as &[String]);
    delete(&parents, "web").await?;
    wait_gone(&parents, "web").await;
    wait_collected(&deployments, "web").await;
    wait_collected(&services, "web").await;
    wait_collected(&maps, "web-config").await;

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}
