//! `Children::apply` against the real API server (with kube-controller-manager's garbage
//! collector): it creates a child named, placed, owned and labelled after its owner; puts back a
//! field someone else edited; re-creates a deleted child; its children go with the owner; and
//! its errors (a real 422, and 409/429/503 from the fault proxy) become the right handler errors.
//! The owners are ConfigMaps: the collector knows the kind from the start.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kopf_runtime::engine::{ChildWrites, Invocation, ObjectState, Services};
use kopf_runtime::{Children, ErrorKind, HandlerError, Inject, Stopper};
use kopf_tests::proxy::{Fault, FaultProxy, Match, Rule};
use kopf_tests::{TestNamespace, test_config, wait_for, wait_until};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};

/// The field manager of the helper's applies.
const MANAGER: &str = "kopf-children-test";

/// Errors that are not `std::error::Error` (`ChildError`, `HandlerError`) into `anyhow`.
trait Shown<T> {
    fn shown(self) -> anyhow::Result<T>;
}

impl<T, E: std::fmt::Display> Shown<T> for Result<T, E> {
    fn shown(self) -> anyhow::Result<T> {
        self.map_err(|e| anyhow::anyhow!("{e}"))
    }
}

/// How long the garbage collector may take for a kind it knows.
const COLLECTED: Duration = Duration::from_secs(60);

fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn config_map(data_pairs: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        data: Some(data(data_pairs)),
        ..ConfigMap::default()
    }
}

/// Creates the owner `name` (a ConfigMap labelled `team=a`) in `ns`.
async fn owner(ns: &TestNamespace, name: &str) -> anyhow::Result<ConfigMap> {
    let mut cm = config_map(&[]);
    cm.metadata.name = Some(name.into());
    cm.metadata.labels = Some(data(&[("team", "a")]));
    Ok(ns
        .api::<ConfigMap>()
        .create(&PostParams::default(), &cm)
        .await?)
}

fn children(owner: &ConfigMap, client: kube::Client) -> Children<ConfigMap> {
    Children::new(owner, client, Arc::new(ChildWrites::new(MANAGER))).expect("an owner")
}

#[tokio::test]
async fn apply_creates_restores_and_recreates_the_child() -> anyhow::Result<()> {
    let ns = TestNamespace::create().await?;
    let owner = owner(&ns, "app").await?;
    let children = children(&owner, ns.client().clone());
    let api = ns.api::<ConfigMap>();

    let mut wanted = config_map(&[("key", "value")]);
    wanted.metadata.labels = Some(data(&[("own", "label")]));
    let applied = children.apply("config", wanted.clone()).await.shown()?;
    assert_eq!(applied.metadata.name.as_deref(), Some("app-config"));
    let child = api.get("app-config").await?;
    assert_eq!(child.data, Some(data(&[("key", "value")])));
    assert_eq!(
        child.metadata.labels,
        Some(data(&[("own", "label"), ("team", "a")]))
    );
    assert_eq!(
        child.metadata.owner_references,
        Some(vec![children.owner_reference()])
    );
    let managers: Vec<_> = (child.metadata.managed_fields.iter().flatten())
        .map(|m| (m.manager.clone(), m.operation.clone()))
        .collect();
    assert_eq!(
        managers,
        vec![(Some(MANAGER.to_owned()), Some("Apply".to_owned()))]
    );
    assert_eq!(
        applied.metadata.resource_version,
        child.metadata.resource_version
    );

    // Someone else edits the applied key (and adds one): the next apply puts it back.
    let edit = serde_json::json!({"data": {"key": "tampered", "theirs": "1"}});
    api.patch(
        "app-config",
        &PatchParams::apply("kubectl-edit").force(),
        &Patch::Apply(&{
            let mut e = edit.clone();
            e["apiVersion"] = "v1".into();
            e["kind"] = "ConfigMap".into();
            e
        }),
    )
    .await?;
    let edited = api.get("app-config").await?;
    assert_eq!(
        edited.data,
        Some(data(&[("key", "tampered"), ("theirs", "1")]))
    );
    children.apply("config", wanted.clone()).await.shown()?;
    let restored = api.get("app-config").await?;
    assert_eq!(
        restored.data,
        Some(data(&[("key", "value"), ("theirs", "1")]))
    );

    // Deleted: the next apply re-creates it (a new object).
    api.delete("app-config", &DeleteParams::default()).await?;
    wait_until("app-config deleted", Duration::from_secs(10), || async {
        matches!(api.get_opt("app-config").await, Ok(None))
    })
    .await;
    children.apply("config", wanted).await.shown()?;
    let recreated = api.get("app-config").await?;
    assert_ne!(recreated.metadata.uid, child.metadata.uid);
    assert_eq!(recreated.data, Some(data(&[("key", "value")])));

    // `get` and `delete` name the child the same way.
    let got: Option<ConfigMap> = children.get("config").await.shown()?;
    assert_eq!(got.and_then(|c| c.metadata.uid), recreated.metadata.uid);
    assert!(children.delete::<ConfigMap>("config").await.shown()?);
    assert!(!children.delete::<ConfigMap>("absent").await.shown()?);
    ns.cleanup().await
}

#[tokio::test]
async fn a_handler_takes_children_by_injection_and_they_go_with_the_owner() -> anyhow::Result<()> {
    let ns = TestNamespace::create().await?;
    let owner = owner(&ns, "app").await?;
    let mut services = Services::default();
    services.insert(ns.client().clone());
    services.insert(ChildWrites::new(MANAGER));
    let object = Arc::new(ObjectState::from_json(serde_json::to_value(&owner)?)?);
    let (_tx, live) = kopf_runtime::engine::ObjectWatch::channel(object.clone());
    let invocation = Invocation {
        object,
        live,
        stopper: Stopper::new(),
        retry: 0,
        started: tokio::time::Instant::now(),
        services,
        span: tracing::Span::none(),
        memo: Arc::default(),
        occurrence: None,
        change: None,
    };
    let children = <Children<ConfigMap> as Inject<ConfigMap>>::inject(&invocation).shown()?;
    children.apply("", Secret::default()).await.shown()?;
    children
        .apply("config", config_map(&[("a", "1")]))
        .await
        .shown()?;
    let unowned = {
        let mut cm = config_map(&[]);
        cm.metadata.name = Some("unowned".into());
        ns.api::<ConfigMap>()
            .create(&PostParams::default(), &cm)
            .await?
    };
    let secrets = ns.api::<Secret>();
    let config_maps = ns.api::<ConfigMap>();
    let secret = secrets.get("app").await?;
    assert_eq!(secret.metadata.labels, Some(data(&[("team", "a")])));

    // Without the service, the parameter cannot be made (and says why).
    let mut bare = invocation;
    bare.services = Services::default();
    let err = <Children<ConfigMap> as Inject<ConfigMap>>::inject(&bare).expect_err("must fail");
    assert!(err.to_string().contains("ChildWrites"), "{err}");

    // The owner goes: the collector deletes its children, and only them.
    config_maps
        .delete("app", &DeleteParams::background())
        .await?;
    wait_until("the children collected", COLLECTED, || async {
        matches!(secrets.get_opt("app").await, Ok(None))
            && matches!(config_maps.get_opt("app-config").await, Ok(None))
    })
    .await;
    let still = config_maps.get("unowned").await?;
    assert_eq!(still.metadata.uid, unowned.metadata.uid);
    ns.cleanup().await
}

/// The handler error of an apply of `app-config` answered with `fault`.
async fn faulted(
    ns: &TestNamespace,
    owner: &ConfigMap,
    fault: Fault,
) -> anyhow::Result<HandlerError> {
    let proxy = FaultProxy::start(&test_config().await?).await?;
    // As the operator's own client: kube's retries off (the operator's writes retry in one
    // place), so the helper sees the 429s and 503s.
    let mut config = proxy.config();
    config.default_retry = false;
    let client = kube::Client::try_from(config)?;
    let path = format!("/namespaces/{}/configmaps/app-config", ns.name());
    proxy
        .handle()
        .inject(Rule::new(Match::method(http::Method::PATCH).path(path), fault).times(1));
    let children = children(owner, client);
    let err = children
        .apply("config", config_map(&[("a", "1")]))
        .await
        .expect_err("must fail");
    // The fault was used up: the same apply passes now (the rule matched that request).
    children
        .apply("config", config_map(&[("a", "1")]))
        .await
        .shown()?;
    Ok(err.into())
}

#[tokio::test]
async fn write_errors_become_temporary_or_permanent_handler_errors() -> anyhow::Result<()> {
    let ns = TestNamespace::create().await?;
    let owner = owner(&ns, "app").await?;
    let s = Duration::from_secs;
    let conflict = faulted(&ns, &owner, Fault::conflict()).await?;
    assert_eq!(conflict.kind(), ErrorKind::Temporary { delay: s(1) });
    let busy = faulted(&ns, &owner, Fault::too_many_requests(3)).await?;
    assert_eq!(busy.kind(), ErrorKind::Temporary { delay: s(3) });
    let down = faulted(&ns, &owner, Fault::unavailable()).await?;
    assert_eq!(down.kind(), ErrorKind::Temporary { delay: s(5) });
    let text = conflict.to_string();
    let prefix = format!(
        "cannot write ConfigMap {0}/app-config (a child of ConfigMap {0}/app): 409",
        ns.name()
    );
    assert!(text.starts_with(&prefix), "{text}");

    // A real 422 from the API server: an invalid data key. Permanent, with the server's words.
    let children = children(&owner, ns.client().clone());
    let invalid = children
        .apply("bad", config_map(&[("not a key!", "x")]))
        .await
        .expect_err("must fail");
    assert_eq!(invalid.status_code(), Some(422));
    let invalid: HandlerError = invalid.into();
    assert_eq!(invalid.kind(), ErrorKind::Permanent);
    let text = invalid.to_string();
    assert!(
        text.contains("app-bad") && text.contains("422") && text.contains("not a key!"),
        "{text}"
    );
    // The positive control of the key: a valid one is applied.
    children
        .apply("bad", config_map(&[("a-key", "x")]))
        .await
        .shown()?;
    wait_for("app-bad", Duration::from_secs(5), || async {
        ns.api::<ConfigMap>().get("app-bad").await
    })
    .await;
    ns.cleanup().await
}

#[tokio::test]
async fn children_that_cannot_belong_to_the_owner_are_refused_before_any_request()
-> anyhow::Result<()> {
    let ns = TestNamespace::create().await?;
    let owner = owner(&ns, "app").await?;
    let children = children(&owner, ns.client().clone());
    let mut elsewhere = config_map(&[]);
    elsewhere.metadata.namespace = Some("default".into());
    let err: HandlerError = children
        .apply("x", elsewhere)
        .await
        .expect_err("must fail")
        .into();
    assert_eq!(err.kind(), ErrorKind::Permanent);
    assert!(err.to_string().contains("in its own namespace"), "{err}");
    let api: Api<ConfigMap> = Api::namespaced(ns.client().clone(), "default");
    assert!(api.get_opt("app-x").await?.is_none());
    ns.cleanup().await
}
