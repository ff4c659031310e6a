//! The children's and related objects' watches against the real API server: a child's event
//! reaches its owner through the trigger callback (and no one else's), the operator's own
//! applies do not (echo suppression) while another field manager's edit does, and a related
//! object reaches the owners a map function names. Every "no trigger" check is followed by a
//! positive control on the same watch stream, whose events arrive in order.

use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kopf_runtime::__private::children::{RelatedWatch, Via, watch_related};
use kopf_runtime::Children;
use kopf_runtime::engine::ChildWrites;
use kopf_tests::{TestNamespace, wait_for};

mod children_common;
use children_common::{Shown, Triggers, child_watch, config_map, edit, labels, reference_to};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn a_childs_events_trigger_its_owner_and_no_one_else() -> anyhow::Result<()> {
    let ns = TestNamespace::create().await?;
    let triggers = Triggers::default();
    let (stop, _canary) = child_watch(ns.client().clone(), &ns, Arc::default(), &triggers).await?;
    let owner = config_map(&ns, "owner", None).await?;
    let uid = owner.metadata.uid.clone().unwrap_or_default();

    let start = Instant::now();
    let created = config_map(&ns, "child", Some(reference_to(&owner))).await?;
    let took = triggers.wait_since(start, &uid, 1).await;
    println!("a created child triggered its owner after {took:?}");
    let all = triggers
        .0
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let (_, cause) = all
        .iter()
        .find(|(o, _)| *o == uid)
        .cloned()
        .expect("the trigger");
    assert_eq!(cause.via, Via::Child);
    assert_eq!(
        (
            &*cause.kind,
            cause.namespace.as_deref(),
            cause.name.as_str()
        ),
        ("ConfigMap", Some(ns.name()), "child")
    );

    // A child of a kind that is not an owner kind triggers nothing; the positive control on
    // the same stream (the real owner's child edited) comes after it.
    let mut foreign = reference_to(&owner);
    foreign.api_version = "example.com/v1".into();
    foreign.kind = "App".into();
    foreign.uid = "not-an-owner-uid".into();
    config_map(&ns, "foreign-child", Some(foreign)).await?;
    config_map(&ns, "orphan", None).await?;
    let start = Instant::now();
    edit::<ConfigMap>(&ns, "child", "1").await?;
    let took = triggers.wait_since(start, &uid, 2).await;
    println!("an edited child triggered its owner after {took:?}");
    assert!(triggers.of("not-an-owner-uid").is_empty());
    assert_eq!(triggers.of(&uid), ["child", "child"]);

    ns.api::<ConfigMap>()
        .delete("child", &DeleteParams::default())
        .await?;
    triggers.wait(&uid, 3).await;
    assert_eq!(triggers.of(&uid), ["child", "child", "child"]);
    assert_ne!(created.metadata.uid, None);
    stop.cancel();
    ns.cleanup().await
}

#[tokio::test]
async fn the_operators_own_applies_do_not_trigger_others_edits_do() -> anyhow::Result<()> {
    let ns = TestNamespace::create().await?;
    let writes = Arc::new(ChildWrites::new("kopf-children-test"));
    let triggers = Triggers::default();
    let (stop, canary) =
        child_watch(ns.client().clone(), &ns, writes.echoes().clone(), &triggers).await?;
    let owner = config_map(&ns, "owner", None).await?;
    let uid = owner.metadata.uid.clone().unwrap_or_default();
    let children =
        Children::<ConfigMap>::new(&owner, ns.client().clone(), writes.clone()).shown()?;
    let data = |v: &str| ConfigMap {
        data: Some(labels(&[("key", v)])),
        ..ConfigMap::default()
    };

    // Created and changed by the helper: echoes, no trigger (checked once the watch has
    // handled a later event).
    children.apply("config", data("1")).await.shown()?;
    children.apply("config", data("2")).await.shown()?;
    canary.sync(&ns, &triggers).await?;
    assert!(
        triggers.of(&uid).is_empty(),
        "the helper's own writes triggered"
    );
    // Edited by someone else: the positive control.
    let edited = Instant::now();
    edit::<ConfigMap>(&ns, "owner-config", "by-hand").await?;
    let took = triggers.wait_since(edited, &uid, 1).await;
    println!("another manager's edit triggered the owner after {took:?}");

    // The reconcile puts its data back: again no trigger; the next edit triggers once more.
    children.apply("config", data("3")).await.shown()?;
    canary.sync(&ns, &triggers).await?;
    assert_eq!(triggers.of(&uid), ["owner-config"]);
    edit::<ConfigMap>(&ns, "owner-config", "again").await?;
    triggers.wait(&uid, 2).await;
    assert_eq!(triggers.of(&uid), ["owner-config", "owner-config"]);

    // Deleted by someone else: triggers, and the echo record forgets the child.
    assert_eq!(writes.echoes().len(), 1);
    ns.api::<ConfigMap>()
        .delete("owner-config", &DeleteParams::default())
        .await?;
    triggers.wait(&uid, 3).await;
    assert_eq!(writes.echoes().len(), 0);
    stop.cancel();
    ns.cleanup().await
}

#[tokio::test]
async fn related_objects_trigger_the_owners_their_map_names() -> anyhow::Result<()> {
    let ns = TestNamespace::create().await?;
    let triggers = Triggers::default();
    // Each Secret concerns the owner named in its `app` label, in its own namespace.
    let watch = RelatedWatch {
        resource: ApiResource::erase::<Secret>(&()),
        namespace: Some(ns.name().to_owned()),
        map: Arc::new(|body: &serde_json::Value| {
            let meta = &body["metadata"];
            match meta["labels"]["app"].as_str() {
                Some(app) => vec![(meta["namespace"].as_str().map(Into::into), app.to_owned())],
                None => Vec::new(),
            }
        }),
        server_timeout: 60,
    };
    let stop = CancellationToken::new();
    tokio::spawn(watch_related(
        ns.client().clone(),
        watch,
        triggers.by_name(),
        stop.clone(),
    ));
    let secrets = ns.api::<Secret>();
    let secret = |name: &str, app: Option<&str>| {
        let mut s = Secret::default();
        s.metadata.name = Some(name.into());
        s.metadata.labels = app.map(|a| labels(&[("app", a)]));
        s
    };
    let owner = |name: &str| format!("{}/{name}", ns.name());
    secrets
        .create(&PostParams::default(), &secret("canary", Some("canary")))
        .await?;
    let mut round = 0;
    wait_for(
        "the related watch to deliver",
        Duration::from_secs(30),
        || {
            round += 1;
            let round = round;
            let (ns, triggers, canary) = (&ns, &triggers, owner("canary"));
            async move {
                edit::<Secret>(ns, "canary", &round.to_string())
                    .await
                    .map_err(|e| e.to_string())?;
                tokio::time::sleep(Duration::from_millis(200)).await;
                if triggers.of(&canary).is_empty() {
                    Err("no trigger yet".to_owned())
                } else {
                    Ok(())
                }
            }
        },
    )
    .await;

    // Unlabelled: maps to no one. Then the positive control.
    secrets
        .create(&PostParams::default(), &secret("plain", None))
        .await?;
    let created = Instant::now();
    secrets
        .create(&PostParams::default(), &secret("s1", Some("a1")))
        .await?;
    triggers.wait(&owner("a1"), 1).await;
    println!(
        "a related object triggered its owner after {:?}",
        created.elapsed()
    );
    assert_eq!(triggers.of(&owner("a1")), ["s1"]);
    let all = triggers
        .0
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    assert!(
        all.iter()
            .all(|(_, c)| c.name != "plain" && c.via == Via::Related),
        "{all:?}"
    );

    // Relabelled to another owner: both hear of it; deleted: the last one does.
    let relabel = serde_json::json!({"metadata": {"labels": {"app": "a2"}}});
    secrets
        .patch("s1", &PatchParams::default(), &Patch::Merge(&relabel))
        .await?;
    triggers.wait(&owner("a2"), 1).await;
    triggers.wait(&owner("a1"), 2).await;
    secrets.delete("s1", &DeleteParams::default()).await?;
    triggers.wait(&owner("a2"), 2).await;
    assert_eq!(triggers.of(&owner("a1")), ["s1", "s1"]);
    assert_eq!(triggers.of(&owner("a2")), ["s1", "s1"]);
    stop.cancel();
    ns.cleanup().await
}
