//! Hostile input against the real API server: objects whose spec does not deserialize into the
//! handler's type (wrong types, missing fields), a ~1 MiB object, an object with 200 labels, and
//! unicode everywhere the API allows it. The bad objects are skipped with a Warning event naming
//! them; every other object is served; a bad object that is fixed gets its daemon; the
//! invariants of `faults_common` hold.

mod faults_common;

use std::collections::BTreeMap;
use std::sync::Arc;

use faults_common::{GRACE, InstanceLog, PROMPTLY, assert_baseline, assert_no_overlap};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kopf_runtime::{Data, Operator, Registry, Stopper, daemon};
use kopf_tests::{TestNamespace, install_crd, test_client, test_config, wait_until};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{CustomResource, CustomResourceExt as _};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// A resource whose CRD accepts any spec, while the handler insists on `size: u32`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "faults.kopf.dev",
    version = "v1",
    kind = "FaultyThing",
    namespaced
)]
pub struct FaultyThingSpec {
    /// Required, and a number.
    pub size: u32,
    /// Free text.
    #[serde(default)]
    pub note: Option<String>,
}

const DAEMON: &str = "fi-daemon";

#[daemon(id = "fi-daemon")]
async fn fi_daemon(obj: Arc<FaultyThing>, stopper: Stopper, log: Data<InstanceLog>) {
    let _instance = log.enter(&obj, DAEMON);
    stopper.stopped().await;
}

/// The CRD with a spec schema that keeps anything, so the server stores what the type rejects.
fn lenient_crd() -> anyhow::Result<CustomResourceDefinition> {
    let mut crd = FaultyThing::crd();
    let version = crd
        .spec
        .versions
        .first_mut()
        .ok_or_else(|| anyhow::anyhow!("no version"))?;
    let schema = serde_json::json!({
        "openAPIV3Schema": {
            "type": "object",
            "properties": {
                "spec": { "type": "object", "x-kubernetes-preserve-unknown-fields": true },
                "status": { "type": "object", "x-kubernetes-preserve-unknown-fields": true }
            }
        }
    });
    version.schema = Some(serde_json::from_value(schema)?);
    Ok(crd)
}

fn object(name: &str, spec: &serde_json::Value) -> serde_json::Value {
    json!({
        "apiVersion": "faults.kopf.dev/v1",
        "kind": "FaultyThing",
        "metadata": { "name": name },
        "spec": spec,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_objects_are_skipped_and_every_other_object_is_served() -> anyhow::Result<()> {
    install_crd(&test_client().await, &lenient_crd()?).await?;
    let mut ns = TestNamespace::create().await?;
    ns.strip_finalizers_of::<FaultyThing>();
    let typed: Api<FaultyThing> = ns.api();
    let resource = kube::api::ApiResource::erase::<FaultyThing>(&());
    let raw: Api<kube::api::DynamicObject> =
        Api::namespaced_with(ns.client().clone(), ns.name(), &resource);
    let raw_json = |body: serde_json::Value| -> anyhow::Result<kube::api::DynamicObject> {
        Ok(serde_json::from_value(body)?)
    };
    let log = InstanceLog::default();
    let registry = Registry::from_inventory()?.select(&[DAEMON])?;
    let op = Operator::builder()
        .name("kopf-tests")
        .kube_config(test_config().await?)
        .namespaces([ns.name()])
        .registry(&registry)
        .data(log.clone())
        .start()
        .await?;

    let big = "x".repeat(900 * 1024);
    let labels: BTreeMap<String, String> = (0..200)
        .map(|i| (format!("label-{i}"), format!("value-{i}")))
        .collect();
    let mut many_labels = object("many-labels", &json!({ "size": 2 }));
    many_labels["metadata"]["labels"] = serde_json::to_value(&labels)?;
    let mut unicode = object(
        "unicode",
        &json!({ "size": 3, "note": "Grüße, 世界 🌍 \u{202e}txt" }),
    );
    unicode["metadata"]["annotations"] = json!({ "kopf.dev/note": "ünïcödé ✓ 🚀" });
    let good = [
        object("good", &json!({ "size": 1 })),
        object("big", &json!({ "size": 1, "note": big })),
        many_labels,
        unicode,
    ];
    let bad = [
        object("wrong-type", &json!({ "size": "three" })),
        object("missing-field", &json!({ "note": "no size" })),
        object("negative", &json!({ "size": -1 })),
        object("fractional", &json!({ "size": 1.5 })),
    ];
    for body in good.iter().chain(&bad) {
        let _ = raw
            .create(&PostParams::default(), &raw_json(body.clone())?)
            .await?;
    }
    let good_names: Vec<String> = good
        .iter()
        .map(|o| {
            o["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    let bad_names: Vec<String> = bad
        .iter()
        .map(|o| {
            o["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();

    for name in &good_names {
        log.wait_started(name, DAEMON, 1).await;
    }
    // Each bad object gets a Warning event naming it (and so, in effect, the time to look).
    let events: Api<Event> = Api::namespaced(ns.client().clone(), ns.name());
    for name in &bad_names {
        let what = format!("a Warning event about {name}");
        wait_until(what, PROMPTLY, || async {
            let Ok(list) = events.list(&ListParams::default()).await else {
                return false;
            };
            list.items.iter().any(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name.as_str())
            })
        })
        .await;
    }
    for name in &bad_names {
        assert_eq!(log.starts(name, DAEMON), 0, "{name} was served");
    }

    // A bad object that is fixed is served from then on.
    let fix = json!({ "spec": { "size": 4 } });
    typed
        .patch("wrong-type", &PatchParams::default(), &Patch::Merge(&fix))
        .await?;
    log.wait_started("wrong-type", DAEMON, 1).await;

    let mut all: Vec<String> = good_names.clone();
    all.extend(bad_names.iter().cloned());
    for name in &all {
        typed.delete(name, &DeleteParams::default()).await?;
    }
    wait_until("every object to be gone", GRACE, || async {
        typed
            .list(&ListParams::default())
            .await
            .is_ok_and(|l| l.items.is_empty())
    })
    .await;
    assert_baseline(&op).await;
    assert_no_overlap(&log);
    op.shutdown().await;
    ns.cleanup().await
}

/// `{"a": {"a": … 1 …}}`, `depth` objects deep: deeper than serde_json's default limit (128),
/// which the API server accepts in any schemaless field.
fn nested(depth: usize) -> serde_json::Value {
    (0..depth).fold(json!(1), |inner, _| json!({ "a": inner }))
}

/// Whether a Warning Event with `reason` names the object `name`.
async fn warned(events: &Api<Event>, name: &str, reason: &str) -> bool {
    events.list(&ListParams::default()).await.is_ok_and(|list| {
        list.items.iter().any(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_nested_too_deep_is_skipped_and_every_other_object_is_served()
-> anyhow::Result<()> {
    install_crd(&test_client().await, &lenient_crd()?).await?;
    let mut ns = TestNamespace::create().await?;
    ns.strip_finalizers_of::<FaultyThing>();
    let typed: Api<FaultyThing> = ns.api();
    let resource = kube::api::ApiResource::erase::<FaultyThing>(&());
    let raw: Api<kube::api::DynamicObject> =
        Api::namespaced_with(ns.client().clone(), ns.name(), &resource);
    let create = |name: &'static str, spec: serde_json::Value| {
        let raw = raw.clone();
        async move {
            let obj = serde_json::from_value(object(name, &spec))?;
            match raw.create(&PostParams::default(), &obj).await {
                // Created; this test's own client cannot read the answer back either.
                Ok(_) | Err(kube::Error::SerdeError(_)) => anyhow::Ok(()),
                Err(err) => Err(err.into()),
            }
        }
    };
    // Present at start-up: the initial list meets it (before, the whole page failed to decode
    // and the operator never became ready).
    create("deep-early", json!({ "size": 1, "deep": nested(150) })).await?;
    create("good-early", json!({ "size": 1 })).await?;
    create("turns-deep", json!({ "size": 1 })).await?;
    let log = InstanceLog::default();
    let registry = Registry::from_inventory()?.select(&[DAEMON])?;
    let op = Operator::builder()
        .name("kopf-tests")
        .kube_config(test_config().await?)
        .namespaces([ns.name()])
        .registry(&registry)
        .data(log.clone())
        .start()
        .await?;
    log.wait_started("good-early", DAEMON, 1).await;
    log.wait_started("turns-deep", DAEMON, 1).await;
    wait_until("the kind to be listed and watched", PROMPTLY, || async {
        op.stats().kinds[0].phase == kopf_runtime::stats::WatchPhase::Watching
    })
    .await;

    // A served object becomes unreadable (a watch event), then a new object arrives.
    let deepen = json!({ "spec": { "deep": nested(150) } });
    let deepened = typed
        .patch(
            "turns-deep",
            &PatchParams::default(),
            &Patch::Merge(&deepen),
        )
        .await;
    assert!(
        matches!(deepened, Ok(_) | Err(kube::Error::SerdeError(_))),
        "{deepened:?}"
    );
    create("good-late", json!({ "size": 2 })).await?;
    log.wait_started("good-late", DAEMON, 1).await;
    let events: Api<Event> = Api::namespaced(ns.client().clone(), ns.name());
    for name in ["deep-early", "turns-deep"] {
        let what = format!("an ObjectUnreadable Warning about {name}");
        wait_until(what, PROMPTLY, || warned(&events, name, "ObjectUnreadable")).await;
    }
    assert_eq!(
        log.starts("deep-early", DAEMON),
        0,
        "an unreadable object was served"
    );

    // The unreadable object holding the finalizer can be deleted: its daemon is stopped.
    for name in ["turns-deep", "deep-early", "good-early", "good-late"] {
        let deleted = typed.delete(name, &DeleteParams::default()).await;
        // The answer carries the object, which this test's client cannot read for a deep one.
        assert!(
            matches!(deleted, Ok(_) | Err(kube::Error::SerdeError(_))),
            "{name}: {deleted:?}"
        );
    }
    wait_until("every object to be gone", GRACE, || async {
        typed
            .list(&ListParams::default())
            .await
            .is_ok_and(|l| l.items.is_empty())
    })
    .await;
    assert_baseline(&op).await;
    assert_no_overlap(&log);
    op.shutdown().await;
    ns.cleanup().await
}
