//! The operator's own Warnings come from the replica that serves the object, against the real
//! API server: two client-side sharding members in one process both watch every object, and an
//! object that cannot be read (nested deeper than the decoder's limit) gets one
//! `ObjectUnreadable` Warning, from the member whose share it is, not one from each member.

mod operator_common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kopf_runtime::ha::{ShardWatch, Sharding, shard_of};
use kopf_runtime::{Data, Operator, Stopper, daemon};
use kopf_tests::{TestNamespace, install_crd, test_client, wait_until};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::{CustomResource, CustomResourceExt as _};
use operator_common::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// A resource whose CRD keeps any spec, so the server stores what the operator cannot decode.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "faults.kopf.dev",
    version = "v1",
    kind = "ShardedThing",
    namespaced
)]
pub struct ShardedThingSpec {
    /// Anything.
    #[serde(default)]
    pub note: Option<String>,
}

/// Which member a handler runs in.
#[derive(Debug, Clone)]
struct Member(&'static str);

#[daemon(id = "sw-daemon")]
async fn sw_daemon(
    obj: Arc<ShardedThing>,
    stopper: Stopper,
    journal: Data<Journal>,
    member: Data<Member>,
) {
    let name = obj.metadata.name.clone().unwrap_or_default();
    journal.record(&name, format!("started by {}", member.0));
    stopper.stopped().await;
}

/// The CRD with a spec schema that keeps anything.
fn lenient_crd() -> anyhow::Result<CustomResourceDefinition> {
    let mut crd = ShardedThing::crd();
    let version = (crd.spec.versions.first_mut()).ok_or_else(|| anyhow::anyhow!("no version"))?;
    let schema = json!({
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

/// `{"a": {"a": … 1 …}}`, `depth` objects deep: deeper than serde_json's default limit (128).
fn nested(depth: usize) -> serde_json::Value {
    (0..depth).fold(json!(1), |inner, _| json!({ "a": inner }))
}

/// The member whose share a UID is in, with two members (as `sharding.rs` splits 1024 ranges).
fn owner(uid: &str) -> &'static str {
    if shard_of(uid) < 512 { "a" } else { "b" }
}

async fn member(
    ns: &TestNamespace,
    name: &'static str,
    journal: &Journal,
) -> anyhow::Result<Operator> {
    let sharding = Sharding::new("kopf-tests-warnings", ns.name())
        .lease_duration(Duration::from_secs(2))
        .renew_deadline(Duration::from_millis(1500))
        .retry_period(Duration::from_millis(300))
        .identity(name)
        .watch(ShardWatch::ClientSide);
    Ok(operator(ns, &["sw-daemon"])
        .await?
        .health_addr(([127, 0, 0, 1], 0).into())
        .data(journal.clone())
        .data(Member(name))
        .sharding(sharding)
        .start()
        .await?)
}

/// How many `ObjectUnreadable` Event objects name each object (a member's repeats of one
/// Warning are a series of one Event; two members post two Events).
async fn unreadable_warnings(events: &Api<Event>) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    let Ok(list) = events.list(&ListParams::default()).await else {
        return counts;
    };
    for event in list.items {
        let name = event.regarding.as_ref().and_then(|r| r.name.clone());
        if let (Some("ObjectUnreadable"), Some(name)) = (event.reason.as_deref(), name) {
            *counts.entry(name).or_default() += 1;
        }
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_object_is_warned_about_once_by_the_member_serving_it() -> anyhow::Result<()>
{
    install_crd(&test_client().await, &lenient_crd()?).await?;
    let mut ns = TestNamespace::create().await?;
    ns.strip_finalizers_of::<ShardedThing>();
    let resource = kube::api::ApiResource::erase::<ShardedThing>(&());
    let raw: Api<DynamicObject> = Api::namespaced_with(ns.client().clone(), ns.name(), &resource);
    let create = |name: String, spec: serde_json::Value| {
        let raw = raw.clone();
        async move {
            let body = json!({
                "apiVersion": "faults.kopf.dev/v1", "kind": "ShardedThing",
                "metadata": { "name": name }, "spec": spec,
            });
            let obj: DynamicObject = serde_json::from_value(body)?;
            match raw.create(&PostParams::default(), &obj).await {
                // Created; a deep one's answer cannot be read back by this client either.
                Ok(_) | Err(kube::Error::SerdeError(_)) => anyhow::Ok(()),
                Err(err) => Err(err.into()),
            }
        }
    };
    let journal = Journal::default();
    let a = member(&ns, "a", &journal).await?;
    let b = member(&ns, "b", &journal).await?;
    wait_until("the members to split the ranges", PROMPTLY, || async {
        let ranges = |op: &Operator| op.stats().sharding.map(|s| s.ranges);
        ranges(&a).as_deref() == Some("0-511") && ranges(&b).as_deref() == Some("512-1023")
    })
    .await;

    // Unreadable objects until each member serves at least one (both would post). Their UIDs
    // come from the Warnings: no answer about them decodes (their managed fields are as deep).
    let events: Api<Event> = Api::namespaced(ns.client().clone(), ns.name());
    let mut deep = BTreeMap::new();
    for i in 0..40 {
        let name = format!("deep{i}");
        create(name.clone(), json!({ "deep": nested(150) })).await?;
        let what = format!("an ObjectUnreadable Warning about {name}");
        wait_until(what, PROMPTLY, || async {
            unreadable_warnings(&events).await.contains_key(&name)
        })
        .await;
        let uid = unreadable_uid(&events, &name).await;
        deep.insert(name, uid);
        let owners: Vec<&str> = deep.values().map(|uid| owner(uid)).collect();
        if i >= 3 && owners.contains(&"a") && owners.contains(&"b") {
            break;
        }
    }
    let owners: Vec<&str> = deep.values().map(|uid| owner(uid)).collect();
    assert!(owners.contains(&"a") && owners.contains(&"b"), "{deep:?}");

    // Readable objects after them, until each member runs a daemon of one: each member's watch
    // (client-side: every object, in order) has handled every unreadable object by then.
    let (mut good, mut served_by) = (Vec::new(), Vec::new());
    for i in 0..40 {
        let name = format!("good{i}");
        create(name.clone(), json!({ "note": "fine" })).await?;
        let by = |who| journal.count(&name, &format!("started by {who}"));
        wait_until(format!("the daemon of {name}"), PROMPTLY, || async {
            by("a") + by("b") == 1
        })
        .await;
        served_by.push(if by("a") == 1 { "a" } else { "b" });
        good.push(name);
        if served_by.contains(&"a") && served_by.contains(&"b") {
            break;
        }
    }
    assert!(
        served_by.contains(&"a") && served_by.contains(&"b"),
        "{served_by:?}"
    );

    // Each unreadable object got its Warning (positive control, above: from both members, each
    // about what it serves), and no second one: the other member saw the same versions, and
    // stays silent.
    let quiet = Instant::now() + Duration::from_secs(3);
    while Instant::now() < quiet {
        let counts = unreadable_warnings(&events).await;
        for name in deep.keys() {
            assert_eq!(counts.get(name), Some(&1), "{name}: {counts:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    for name in deep.keys().chain(&good) {
        // The answer carries the object, which this test's client cannot read for a deep one.
        let deleted = raw.delete(name, &DeleteParams::default()).await;
        assert!(
            matches!(deleted, Ok(_) | Err(kube::Error::SerdeError(_))),
            "{name}: {deleted:?}"
        );
    }
    wait_until("every object to be gone", PROMPTLY, || async {
        (raw.list(&ListParams::default()).await).is_ok_and(|l| l.items.is_empty())
    })
    .await;
    a.shutdown().await;
    b.shutdown().await;
    ns.cleanup().await
}

/// The UID of the object an `ObjectUnreadable` Warning about `name` names.
async fn unreadable_uid(events: &Api<Event>, name: &str) -> String {
    let list = events.list(&ListParams::default()).await;
    let uid = list.ok().and_then(|list| {
        list.items.into_iter().find_map(|e| {
            let regarding = e.regarding?;
            let ours = e.reason.as_deref() == Some("ObjectUnreadable");
            (ours && regarding.name.as_deref() == Some(name)).then_some(regarding.uid)?
        })
    });
    uid.unwrap_or_else(|| panic!("a Warning about {name} names its object's UID"))
}
