//! An index with sharding, against the real API server, with two members in one process: each
//! member serves half of the objects, yet its index holds every object of the kind (the index's
//! watch is not sharded), so a handler in either member sees the objects the other serves, and
//! follows their deletion.

mod operator_common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kopf_examples::crd::KopfExample;
use kopf_runtime::ha::{ShardWatch, Sharding, shard_of};
use kopf_runtime::{Data, HandlerResult, Index, Operator, index, timer};
use kopf_tests::{TestNamespace, wait_until};
use kube::api::DeleteParams;
use operator_common::*;
use serde_json::json;

/// Which member a handler runs in.
#[derive(Debug, Clone)]
struct Member(&'static str);

/// Every object's name, under its `spec.field`.
#[index]
fn examples_by_field(obj: Arc<KopfExample>) -> Option<(String, String)> {
    Some((obj.spec.field.clone()?, obj.metadata.name.clone()?))
}

/// The member that runs it, and every object of the same field, from the index.
#[timer(id = "shard-index", interval = "1s")]
async fn shard_index(
    obj: Arc<KopfExample>,
    peers: Index<examples_by_field>,
    member: Data<Member>,
) -> HandlerResult<serde_json::Value> {
    let mut names = peers.get(&obj.spec.field.clone().unwrap_or_default());
    names.sort();
    Ok(json!({"member": member.0, "peers": names}))
}

async fn member(ns: &TestNamespace, name: &'static str) -> anyhow::Result<Operator> {
    let sharding = Sharding::new("kopf-tests-shard-indexes", ns.name())
        .lease_duration(Duration::from_secs(2))
        .renew_deadline(Duration::from_millis(1500))
        .retry_period(Duration::from_millis(300))
        .identity(name)
        .watch(ShardWatch::ClientSide);
    Ok(operator(ns, &["shard-index"])
        .await?
        .index::<examples_by_field>()
        .data(Member(name))
        .sharding(sharding)
        .start()
        .await?)
}

/// Which member serves an object, for two members `a` < `b`: `a` holds 0‥511.
fn expected(uid: &str) -> &'static str {
    if shard_of(uid) < 512 { "a" } else { "b" }
}

#[tokio::test]
async fn every_member_indexes_every_object_and_serves_its_share() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let a = member(&ns, "a").await?;
    let b = member(&ns, "b").await?;
    wait_until("a serves 0-511 and b 512-1023", PROMPTLY, || async {
        a.stats().sharding.is_some_and(|m| m.ranges == "0-511")
            && b.stats().sharding.is_some_and(|m| m.ranges == "512-1023")
    })
    .await;

    let mut served = BTreeMap::new();
    for i in 0..10 {
        let name = format!("x{i}");
        let created = create(&api, &name, "x").await?;
        served.insert(
            name,
            expected(created.metadata.uid.as_deref().unwrap_or_default()),
        );
    }
    assert!(
        served.values().any(|m| *m == "a") && served.values().any(|m| *m == "b"),
        "both members serve objects: {served:?}"
    );
    let all: Vec<&String> = served.keys().collect();
    for (name, member) in &served {
        wait_status(
            &api,
            name,
            "shard-index",
            json!({"member": member, "peers": all}),
        )
        .await;
    }

    // A deletion served by one member leaves both members' indexes.
    let (gone, _) = served.pop_first().expect("ten objects");
    api.delete(&gone, &DeleteParams::default()).await?;
    let rest: Vec<&String> = served.keys().collect();
    for (name, member) in &served {
        wait_status(
            &api,
            name,
            "shard-index",
            json!({"member": member, "peers": rest}),
        )
        .await;
    }

    a.shutdown().await;
    b.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}
