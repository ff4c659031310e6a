//! The `children` example (`kopf-examples/src/bin/children.rs`) against the real API server,
//! with kube-controller-manager's garbage collector: the daemon server-side applies a child
//! ConfigMap owned by its parent, re-applies it when the parent's spec changes, puts it back
//! when it is deleted or edited (counting it in `status.children`), and stops at once when the
//! parent is deleted, after which the garbage collector deletes the child.

#[allow(dead_code, unreachable_pub)]
#[path = "../../kopf-examples/src/bin/children.rs"]
mod children;
mod operator_common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kopf_examples::crd::{KopfExample, KopfExampleSpec};
use kopf_runtime::engine::ChildWrites;
use kopf_tests::{is_not_found, wait_for, wait_until};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use operator_common::{PROMPTLY, delete, example_namespace, operator, status, wait_gone};
use serde_json::{Value, json};

/// How long the garbage collector may take: for a resource kind it has not seen yet (the CRD
/// was installed by this test), it learns the kind at its next discovery resync (every 30 s).
const COLLECTED: Duration = Duration::from_secs(90);

/// `data` as pairs of strings.
fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Waits until the ConfigMap `name` exists with exactly `want` as its data (and, with
/// `not_uid`, a different UID), and returns it.
async fn wait_child(
    api: &Api<ConfigMap>,
    name: &str,
    want: &BTreeMap<String, String>,
    not_uid: Option<&str>,
) -> ConfigMap {
    let what = format!("ConfigMap {name} with data {want:?}");
    wait_for(what, PROMPTLY, || async {
        let cm = api
            .get_opt(name)
            .await?
            .ok_or_else(|| anyhow::anyhow!("not there"))?;
        if cm.data.as_ref() != Some(want) {
            anyhow::bail!("data {:?}", cm.data);
        }
        if not_uid.is_some() && cm.metadata.uid.as_deref() == not_uid {
            anyhow::bail!("still the old object");
        }
        Ok(cm)
    })
    .await
}

async fn children_status(api: &Api<KopfExample>, name: &str) -> Value {
    status(api, name)
        .await
        .get("children")
        .cloned()
        .unwrap_or_default()
}

/// Waits until `status.children` equals `want`.
async fn wait_children_status(api: &Api<KopfExample>, name: &str, want: &Value) {
    let what = format!("{name}: status.children == {want}");
    wait_for(what, PROMPTLY, || async {
        let got = children_status(api, name).await;
        if &got == want {
            Ok(())
        } else {
            Err(format!("status.children = {got}"))
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_owns_and_restores_its_child() -> anyhow::Result<()> {
    let (ns, parents) = example_namespace().await?;
    let config_maps = ns.api::<ConfigMap>();
    let writes = ChildWrites::new(children::FIELD_MANAGER);
    let op = operator(&ns, &["children"])
        .await?
        .data(writes)
        .start()
        .await?;

    // 1. A parent: its child is applied with the spec's data and an owner reference.
    let spec = KopfExampleSpec {
        field: Some("a".to_owned()),
        items: vec!["x".to_owned(), "y".to_owned()],
        duration: Some("10s".to_owned()),
    };
    let parent = parents
        .create(&PostParams::default(), &KopfExample::new("owner", spec))
        .await?;
    let first = data(&[("field", "a"), ("items", "x\ny"), ("duration", "10s")]);
    let child = wait_child(&config_maps, "owner-config", &first, None).await;
    let owners = child.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(owners.len(), 1, "{owners:?}");
    assert_eq!(owners[0].api_version, "kopf.dev/v1");
    assert_eq!(owners[0].kind, "KopfExample");
    assert_eq!(owners[0].name, "owner");
    assert_eq!(
        owners[0].uid,
        parent.metadata.uid.clone().unwrap_or_default()
    );
    assert_eq!(owners[0].controller, Some(true));
    assert_eq!(owners[0].block_owner_deletion, Some(true));
    let managers: Vec<_> = child
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|m| (m.manager.clone(), m.operation.clone()))
        .collect();
    assert!(
        managers.contains(&(
            Some("kopf-examples-children".to_owned()),
            Some("Apply".to_owned())
        )),
        "{managers:?}"
    );
    let no_restorations = json!({"configMap": "owner-config", "restored": 0});
    wait_children_status(&parents, "owner", &no_restorations).await;

    // 2. The parent's spec changes: the child follows (a key no longer in the spec is removed).
    let change = json!({"spec": {"field": "b", "items": ["z"], "duration": null}});
    parents
        .patch("owner", &PatchParams::default(), &Patch::Merge(&change))
        .await?;
    let second = data(&[("field", "b"), ("items", "z")]);
    let child = wait_child(&config_maps, "owner-config", &second, None).await;

    // 3a. The child is deleted: it is re-created, and the restoration counted.
    config_maps
        .delete("owner-config", &DeleteParams::default())
        .await?;
    let old_uid = child.metadata.uid.clone().unwrap_or_default();
    wait_child(&config_maps, "owner-config", &second, Some(&old_uid)).await;
    let once = json!({"configMap": "owner-config", "restored": 1});
    wait_children_status(&parents, "owner", &once).await;

    // 3b. Its data is edited by hand: it is put back.
    let edit = json!({"data": {"field": "tampered"}});
    config_maps
        .patch(
            "owner-config",
            &PatchParams::default(),
            &Patch::Merge(&edit),
        )
        .await?;
    wait_child(&config_maps, "owner-config", &second, None).await;
    let twice = json!({"configMap": "owner-config", "restored": 2});
    wait_children_status(&parents, "owner", &twice).await;

    // 4. The parent is deleted: the daemon stops at once (the finalizer it holds is released),
    // and the garbage collector deletes the child.
    let deleted = Instant::now();
    delete(&parents, "owner").await?;
    wait_gone(&parents, "owner").await;
    assert!(deleted.elapsed() < PROMPTLY);
    wait_until(
        "the garbage collector to delete owner-config",
        COLLECTED,
        || async { matches!(config_maps.get("owner-config").await, Err(ref e) if is_not_found(e)) },
    )
    .await;

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}
