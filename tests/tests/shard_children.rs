//! Owned children with sharding, against the real API server, with two members in one process
//! (each its own operator with its own clients): an owner is reconciled only by the member that
//! serves its hash range, also when one of its children is edited — every member watches all
//! the children, and a child's change wakes its owner only where the owner is served.

mod operator_common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kopf_examples::crd::KopfExample;
use kopf_runtime::ha::{ShardWatch, Sharding, shard_of};
use kopf_runtime::{Action, Children, Data, HandlerError, Operator, reconcile};
use kopf_tests::{TestNamespace, wait_until};
use kube::api::{Patch, PatchParams};
use operator_common::*;
use serde_json::json;

/// Which member a handler runs in.
#[derive(Debug, Clone)]
struct Member(&'static str);

#[reconcile(id = "shard-children", owns(ConfigMap))]
async fn shard_children(
    obj: Arc<KopfExample>,
    children: Children<KopfExample>,
    journal: Data<Journal>,
    member: Data<Member>,
) -> Result<Action, HandlerError> {
    let name = obj.metadata.name.clone().unwrap_or_default();
    journal.record(&name, format!("run by {}", member.0));
    let data = BTreeMap::from([(
        "field".to_owned(),
        obj.spec.field.clone().unwrap_or_default(),
    )]);
    let config = ConfigMap {
        data: Some(data),
        ..ConfigMap::default()
    };
    children.apply("config", config).await?;
    Ok(Action::await_change())
}

async fn member(
    ns: &TestNamespace,
    name: &'static str,
    journal: &Journal,
) -> anyhow::Result<Operator> {
    let sharding = Sharding::new("kopf-tests-shard-children", ns.name())
        .lease_duration(Duration::from_secs(2))
        .renew_deadline(Duration::from_millis(1500))
        .retry_period(Duration::from_millis(300))
        .identity(name)
        .watch(ShardWatch::ClientSide);
    Ok(operator(ns, &["shard-children"])
        .await?
        .data(journal.clone())
        .data(Member(name))
        .sharding(sharding)
        .start()
        .await?)
}

/// Which member serves an object, for two members `a` < `b`: `a` holds 0‥511.
fn expected(uid: &str) -> &'static str {
    if shard_of(uid) < 512 { "a" } else { "b" }
}

/// The child's `data.field`, or `None` while it does not exist.
async fn child_field(api: &kube::Api<ConfigMap>, name: &str) -> Option<String> {
    let child = api.get_opt(name).await.ok()??;
    child.data?.get("field").cloned()
}

#[tokio::test]
async fn a_childs_owner_is_reconciled_by_the_member_serving_it() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let maps = ns.api::<ConfigMap>();
    let journal = Journal::default();
    let a = member(&ns, "a", &journal).await?;
    let b = member(&ns, "b", &journal).await?;
    wait_until("a serves 0-511 and b 512-1023", PROMPTLY, || async {
        a.stats().sharding.is_some_and(|m| m.ranges == "0-511")
            && b.stats().sharding.is_some_and(|m| m.ranges == "512-1023")
    })
    .await;

    let mut owners = BTreeMap::new();
    for i in 0..12 {
        let name = format!("c{i}");
        let created = create(&api, &name, "x").await?;
        owners.insert(
            name,
            expected(created.metadata.uid.as_deref().unwrap_or_default()),
        );
    }
    assert!(
        owners.values().any(|m| *m == "a") && owners.values().any(|m| *m == "b"),
        "both members have objects: {owners:?}"
    );
    for (name, member) in &owners {
        journal.wait_for(name, &format!("run by {member}"), 1).await;
        let child = format!("{name}-config");
        wait_until(format!("{child} applied"), PROMPTLY, || async {
            child_field(&maps, &child).await.as_deref() == Some("x")
        })
        .await;
    }

    // Someone edits every child: each owner runs again, in its own member only.
    for name in owners.keys() {
        let edit = json!({"data": {"field": "hacked"}});
        let child = format!("{name}-config");
        maps.patch(&child, &PatchParams::default(), &Patch::Merge(&edit))
            .await?;
    }
    for (name, member) in &owners {
        journal.wait_for(name, &format!("run by {member}"), 2).await;
        let child = format!("{name}-config");
        wait_until(format!("{child} restored"), PROMPTLY, || async {
            child_field(&maps, &child).await.as_deref() == Some("x")
        })
        .await;
    }
    for (name, member) in &owners {
        let runs = journal.of(name);
        let strangers: Vec<_> = runs.iter().filter(|r| !r.ends_with(member)).collect();
        assert!(
            strangers.is_empty(),
            "{name} (served by {member}) also ran in: {runs:?}"
        );
    }

    a.shutdown().await;
    b.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}
