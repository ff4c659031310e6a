//! The deployment manifests of `kopf-examples/deploy/`: the ClusterRole is sufficient (an
//! operator running with only a token of that ServiceAccount adds finalizers, writes status,
//! posts events and releases finalizers), it is necessary (without the binding, the same token
//! gets a clear 403 and the operator reports the resource as unavailable), and the Deployment
//! has the probes and the update strategy the docs promise. The namespaced variant
//! (`rbac-namespaced.yaml`, a Role) does the whole job in its namespace and grants nothing,
//! Events included, anywhere else.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kopf_examples::crd::KopfExample;
use kopf_runtime::ha::{LeaderElection, Role as ReplicaRole};
use kopf_runtime::stats::WatchPhase;
use kopf_runtime::{Events, HandlerResult, Operator, Patch, Registry, Stopper, daemon};
use kopf_runtime::{OperatorBuilder, timer};
use kopf_tests::{
    TestNamespace, install_crd, service_account_token, test_client, token_config, wait_until,
};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, Config, CustomResourceExt as _, ResourceExt as _};
use serde::de::DeserializeOwned;
use serde_json::json;

const RBAC_YAML: &str = include_str!("../../kopf-examples/deploy/rbac.yaml");
const RBAC_NAMESPACED_YAML: &str = include_str!("../../kopf-examples/deploy/rbac-namespaced.yaml");
const DEPLOYMENT_YAML: &str = include_str!("../../kopf-examples/deploy/deployment.yaml");
const PROMPTLY: Duration = Duration::from_secs(30);

/// Writes status, posts an event, and holds the finalizer while it runs.
#[daemon(cancellation_timeout = "5s")]
async fn rbac_daemon(
    _obj: Arc<KopfExample>,
    stopper: Stopper,
    patch: Patch,
    events: Events,
) -> HandlerResult {
    patch.status("rbac_daemon", "running");
    patch.flush().await?;
    events.info("Started", "the RBAC test daemon runs").await?;
    stopper.stopped().await;
    Ok(())
}

/// Stores a result under `status.rbac_timer`.
#[timer(interval = "1s")]
async fn rbac_timer(obj: Arc<KopfExample>) -> HandlerResult<usize> {
    Ok(obj.spec.items.len() + 7)
}

/// The document of `kind` in a multi-document YAML file.
fn document<T: DeserializeOwned>(yaml: &str, kind: &str) -> T {
    let doc = yaml
        .split("\n---\n")
        .find(|doc| doc.contains(&format!("\nkind: {kind}\n")))
        .unwrap_or_else(|| panic!("no {kind} in the manifest"));
    serde_yaml::from_str(doc).unwrap_or_else(|e| panic!("the {kind} does not parse: {e}"))
}

/// The manifests' RBAC objects, renamed into this test's namespace and names.
struct Rbac {
    account: ServiceAccount,
    role: ClusterRole,
    binding: ClusterRoleBinding,
    /// The leader election's Lease, in the operator's namespace.
    lease_role: Role,
    lease_binding: RoleBinding,
}

impl Rbac {
    fn for_namespace(ns: &str) -> Self {
        let mut account: ServiceAccount = document(RBAC_YAML, "ServiceAccount");
        account.metadata.namespace = Some(ns.to_owned());
        let mut role: ClusterRole = document(RBAC_YAML, "ClusterRole");
        role.metadata.name = Some(format!("{}-{ns}", role.name_any()));
        let mut binding: ClusterRoleBinding = document(RBAC_YAML, "ClusterRoleBinding");
        binding.metadata.name = Some(format!("{}-{ns}", binding.name_any()));
        binding.role_ref.name = role.name_any();
        for subject in binding.subjects.iter_mut().flatten() {
            subject.namespace = Some(ns.to_owned());
        }
        let mut lease_role: Role = document(RBAC_YAML, "Role");
        lease_role.metadata.namespace = Some(ns.to_owned());
        let mut lease_binding: RoleBinding = document(RBAC_YAML, "RoleBinding");
        lease_binding.metadata.namespace = Some(ns.to_owned());
        for subject in lease_binding.subjects.iter_mut().flatten() {
            subject.namespace = Some(ns.to_owned());
        }
        Self {
            account,
            role,
            binding,
            lease_role,
            lease_binding,
        }
    }
}

/// The operator as deployed: with leader election (short settings), so that the job includes
/// acquiring the Lease.
fn operator(config: Config, ns: &TestNamespace) -> anyhow::Result<OperatorBuilder> {
    let registry = Registry::from_inventory()?.select(&["rbac_daemon", "rbac_timer"])?;
    let election = LeaderElection::new("kopf-tests-rbac", ns.name())
        .lease_duration(Duration::from_secs(2))
        .renew_deadline(Duration::from_millis(1500))
        .retry_period(Duration::from_millis(500));
    Ok(Operator::builder()
        .name("kopf-tests")
        .kube_config(config)
        .namespaces([ns.name()])
        .registry(&registry)
        .leader_election(election)
        .shutdown_timeout(Duration::from_secs(10)))
}

async fn status_of(api: &Api<KopfExample>, name: &str, key: &str) -> serde_json::Value {
    let obj = api.get_opt(name).await.ok().flatten();
    let status = obj.and_then(|o| serde_json::to_value(o.status).ok());
    status.and_then(|s| s.get(key).cloned()).unwrap_or_default()
}

/// Without the binding, the token is authenticated (403, not 401) but not permitted, and an
/// operator with it never gets ready.
async fn assert_denied(
    as_operator: &Api<KopfExample>,
    config: Config,
    ns: &TestNamespace,
) -> anyhow::Result<()> {
    // Without the binding: authenticated (403, not 401), but not permitted.
    let denied = as_operator
        .list(&ListParams::default())
        .await
        .expect_err("listing without the binding must be forbidden");
    let text = denied.to_string();
    assert!(
        matches!(&denied, kube::Error::Api(status) if status.code == 403),
        "expected 403 Forbidden, got {denied}"
    );
    assert!(
        text.contains("kopfexamples") && text.contains("kopf-examples"),
        "{text}"
    );
    // The operator starts (discovery is open to everyone) but cannot list: never ready. The
    // positive control is the bound operator below, which gets ready promptly.
    let unbound = operator(config, ns)?.start().await?;
    let window = tokio::time::Instant::now() + Duration::from_secs(3);
    while tokio::time::Instant::now() < window {
        assert!(!unbound.is_ready(), "ready without permission to list");
        let phases: Vec<_> = unbound.stats().kinds.iter().map(|k| k.phase).collect();
        assert!(
            phases.iter().all(|p| matches!(
                p,
                WatchPhase::Discovering | WatchPhase::Listing | WatchPhase::Unavailable
            )),
            "{phases:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    unbound.shutdown().await;
    Ok(())
}

/// With the binding, an operator with only the token adds the finalizer, writes status, posts
/// an event and releases the finalizer.
async fn assert_whole_job(
    config: Config,
    ns: &TestNamespace,
    admin: &Client,
) -> anyhow::Result<()> {
    let running = operator(config, ns)?.start().await?;
    wait_until("the bound operator to be ready", PROMPTLY, || async {
        running.is_ready()
    })
    .await;
    wait_until("the bound operator to lead", PROMPTLY, || async {
        running
            .stats()
            .leadership
            .is_some_and(|l| l.role == ReplicaRole::Leader)
    })
    .await;
    let api = ns.api::<KopfExample>();
    api.create(
        &PostParams::default(),
        &KopfExample::new("guarded", Default::default()),
    )
    .await?;
    wait_until(
        "the finalizer added by the service account",
        PROMPTLY,
        || async {
            api.get("guarded")
                .await
                .ok()
                .and_then(|o| o.metadata.finalizers)
                .is_some_and(|f| f.iter().any(|f| f == "kopf.dev/kopf-tests"))
        },
    )
    .await;
    wait_until(
        "status written by the daemon and the timer",
        PROMPTLY,
        || async {
            status_of(&api, "guarded", "rbac_daemon").await == json!("running")
                && status_of(&api, "guarded", "rbac_timer").await == json!(7)
        },
    )
    .await;
    let events: Api<Event> = Api::namespaced(admin.clone(), ns.name());
    wait_until("the daemon's event", PROMPTLY, || async {
        let list = events.list(&ListParams::default()).await;
        list.is_ok_and(|l| {
            l.items
                .iter()
                .any(|e| e.reason.as_deref() == Some("Started"))
        })
    })
    .await;
    api.delete("guarded", &DeleteParams::default()).await?;
    wait_until(
        "the object to be gone (finalizer released)",
        PROMPTLY,
        || async { matches!(api.get_opt("guarded").await, Ok(None)) },
    )
    .await;
    running.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_role_is_necessary_and_sufficient() -> anyhow::Result<()> {
    let admin = test_client().await;
    install_crd(&admin, &KopfExample::crd()).await?;
    let mut ns = TestNamespace::create().await?;
    ns.strip_finalizers_of::<KopfExample>();
    let rbac = Rbac::for_namespace(ns.name());
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    let bindings: Api<ClusterRoleBinding> = Api::all(admin.clone());
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), ns.name());
    accounts
        .create(&PostParams::default(), &rbac.account)
        .await?;
    roles.create(&PostParams::default(), &rbac.role).await?;

    let token = service_account_token(&admin, ns.name(), &rbac.account.name_any()).await?;
    let config = token_config(&token).await?;
    let as_operator: Api<KopfExample> =
        Api::namespaced(Client::try_from(config.clone())?, ns.name());

    assert_denied(&as_operator, config.clone(), &ns).await?;

    // With the bindings: the same token can do the operator's whole job.
    bindings
        .create(&PostParams::default(), &rbac.binding)
        .await?;
    Api::<Role>::namespaced(admin.clone(), ns.name())
        .create(&PostParams::default(), &rbac.lease_role)
        .await?;
    Api::<RoleBinding>::namespaced(admin.clone(), ns.name())
        .create(&PostParams::default(), &rbac.lease_binding)
        .await?;
    wait_until("the binding to take effect", PROMPTLY, || async {
        as_operator.list(&ListParams::default()).await.is_ok()
    })
    .await;
    assert_whole_job(config, &ns, &admin).await?;

    bindings
        .delete(&rbac.binding.name_any(), &DeleteParams::default())
        .await?;
    roles
        .delete(&rbac.role.name_any(), &DeleteParams::default())
        .await?;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_namespaced_role_is_sufficient_and_grants_nothing_elsewhere() -> anyhow::Result<()> {
    let admin = test_client().await;
    install_crd(&admin, &KopfExample::crd()).await?;
    let mut ns = TestNamespace::create().await?;
    ns.strip_finalizers_of::<KopfExample>();
    let other = TestNamespace::create().await?;
    let mut account: ServiceAccount = document(RBAC_NAMESPACED_YAML, "ServiceAccount");
    account.metadata.namespace = Some(ns.name().to_owned());
    let mut role: Role = document(RBAC_NAMESPACED_YAML, "Role");
    role.metadata.namespace = Some(ns.name().to_owned());
    let mut binding: RoleBinding = document(RBAC_NAMESPACED_YAML, "RoleBinding");
    binding.metadata.namespace = Some(ns.name().to_owned());
    for subject in binding.subjects.iter_mut().flatten() {
        subject.namespace = Some(ns.name().to_owned());
    }
    Api::<ServiceAccount>::namespaced(admin.clone(), ns.name())
        .create(&PostParams::default(), &account)
        .await?;
    Api::<Role>::namespaced(admin.clone(), ns.name())
        .create(&PostParams::default(), &role)
        .await?;
    Api::<RoleBinding>::namespaced(admin.clone(), ns.name())
        .create(&PostParams::default(), &binding)
        .await?;
    let token = service_account_token(&admin, ns.name(), &account.name_any()).await?;
    let config = token_config(&token).await?;
    let as_operator = Client::try_from(config.clone())?;
    let here: Api<KopfExample> = Api::namespaced(as_operator.clone(), ns.name());
    wait_until("the binding to take effect", PROMPTLY, || async {
        here.list(&ListParams::default()).await.is_ok()
    })
    .await;
    // Nothing in another namespace: neither its objects nor an Event there.
    let elsewhere: Api<KopfExample> = Api::namespaced(as_operator.clone(), other.name());
    let listed = elsewhere.list(&ListParams::default()).await;
    assert!(
        matches!(listed, Err(kube::Error::Api(ref s)) if s.code == 403),
        "{listed:?}"
    );
    let event: Event = serde_json::from_value(json!({
        "metadata": {"generateName": "probe-"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "kopf-tests", "reportingInstance": "probe",
        "action": "Probe", "reason": "Probe", "type": "Normal",
    }))?;
    let posted = Api::<Event>::namespaced(as_operator, other.name())
        .create(&PostParams::default(), &event)
        .await;
    assert!(
        matches!(posted, Err(kube::Error::Api(ref s)) if s.code == 403),
        "{posted:?}"
    );
    // Positive control: the operator's whole job in its own namespace.
    assert_whole_job(config, &ns, &admin).await?;
    other.cleanup().await?;
    ns.cleanup().await?;
    Ok(())
}

#[test]
fn the_deployment_runs_two_elected_replicas_and_probes_the_health_endpoints() {
    let deployment: Deployment = document(DEPLOYMENT_YAML, "Deployment");
    let spec = deployment.spec;
    assert_eq!(spec.replicas, Some(2));
    let strategy = spec.strategy.expect("a strategy");
    assert_eq!(strategy.type_.as_deref(), Some("RollingUpdate"));
    let rolling = strategy.rolling_update.expect("rolling update settings");
    assert_eq!(rolling.max_unavailable, Some(IntOrString::Int(0)));
    let budget: PodDisruptionBudget = document(DEPLOYMENT_YAML, "PodDisruptionBudget");
    let budget = budget.spec.expect("a budget");
    assert_eq!(budget.min_available, Some(IntOrString::Int(1)));
    assert_eq!(budget.selector, spec.selector.clone().into());
    let pod = spec.template.spec.expect("a pod spec");
    assert_eq!(pod.service_account_name.as_deref(), Some("kopf-examples"));
    // Longer than the operator's shutdown timeout, so daemons can stop gracefully.
    assert!(pod.termination_grace_period_seconds.is_some_and(|s| s > 20));
    let container = &pod.containers[0];
    let path = |probe: &Option<k8s_openapi::api::core::v1::Probe>| {
        probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .and_then(|h| h.path.clone())
    };
    assert_eq!(path(&container.liveness_probe).as_deref(), Some("/healthz"));
    assert_eq!(path(&container.readiness_probe).as_deref(), Some("/readyz"));
    let args = container.args.clone().unwrap_or_default();
    let health = args
        .iter()
        .position(|a| a == "--health")
        .map(|i| &args[i + 1]);
    assert_eq!(health.map(String::as_str), Some("0.0.0.0:8080"));
    // The Lease lives in the operator's namespace, where rbac.yaml's Role grants it.
    let lease = args
        .iter()
        .position(|a| a == "--leader-election")
        .map(|i| &args[i + 1]);
    let namespace = deployment.metadata.namespace.clone().unwrap_or_default();
    assert!(
        lease.is_some_and(|l| l.starts_with(&format!("{namespace}/"))),
        "{args:?}"
    );
    let lease_role: Role = document(RBAC_YAML, "Role");
    assert_eq!(
        lease_role.metadata.namespace.as_deref(),
        Some(namespace.as_str())
    );
    let env = container.env.clone().unwrap_or_default();
    assert!(
        env.iter().any(|e| e.name == "POD_NAME"),
        "the identity in the Lease"
    );
    let account: ServiceAccount = document(RBAC_YAML, "ServiceAccount");
    assert_eq!(account.metadata.namespace, deployment.metadata.namespace);
}
