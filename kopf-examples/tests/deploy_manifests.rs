//! The hardening promised by `kopf-examples/deploy/` and the repository's `.dockerignore`, checked
//! on the files themselves (no API server needed): the namespace enforces the Pod Security
//! Standard `restricted` and the Deployment complies with it, the pod knows its name, a
//! NetworkPolicy admits only the kubelet's probes, the namespaced RBAC variant grants everything
//! (Events included) in the watched namespace only, and the image neither contains `tcp_health`
//! nor is built from a context with `target/` in it.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, Namespace, PodSecurityContext, PodSpec};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role, RoleBinding};
use serde::Deserialize as _;
use serde::de::DeserializeOwned;

const NAMESPACE_YAML: &str = include_str!("../deploy/namespace.yaml");
const DEPLOYMENT_YAML: &str = include_str!("../deploy/deployment.yaml");
const NETWORK_POLICY_YAML: &str = include_str!("../deploy/networkpolicy.yaml");
const RBAC_YAML: &str = include_str!("../deploy/rbac.yaml");
const RBAC_NAMESPACED_YAML: &str = include_str!("../deploy/rbac-namespaced.yaml");
const DOCKERFILE: &str = include_str!("../deploy/Dockerfile");
const DOCKERIGNORE: &str = include_str!("../../.dockerignore");

/// Every document of `kind` in a multi-document YAML file.
fn documents<T: DeserializeOwned>(yaml: &str, kind: &str) -> Vec<T> {
    serde_yaml::Deserializer::from_str(yaml)
        .map(|doc| serde_yaml::Value::deserialize(doc).expect("valid YAML"))
        .filter(|doc| doc["kind"].as_str() == Some(kind))
        .map(|doc| serde_yaml::from_value(doc).expect("a valid object of its kind"))
        .collect()
}

/// The only document of `kind`.
fn document<T: DeserializeOwned>(yaml: &str, kind: &str) -> T {
    let mut found = documents(yaml, kind);
    assert_eq!(found.len(), 1, "exactly one {kind}");
    found.remove(0)
}

fn pod_spec() -> PodSpec {
    let deployment: Deployment = document(DEPLOYMENT_YAML, "Deployment");
    deployment.spec.template.spec.expect("a pod template")
}

#[test]
fn the_namespace_enforces_the_restricted_pod_security_standard() {
    let namespace: Namespace = document(NAMESPACE_YAML, "Namespace");
    let labels = namespace.metadata.labels.unwrap_or_default();
    let label = |name: &str| labels.get(name).map(String::as_str);
    assert_eq!(
        label("pod-security.kubernetes.io/enforce"),
        Some("restricted")
    );
    let deployment: Deployment = document(DEPLOYMENT_YAML, "Deployment");
    assert_eq!(deployment.metadata.namespace, namespace.metadata.name);
}

/// The checks of the `restricted` profile (and of `baseline`, which it includes) that apply to
/// the fields this pod could set.
fn assert_restricted(pod: &PodSpec, container: &Container) {
    let pod_security = pod.security_context.clone().unwrap_or_default();
    let security = container.security_context.clone().unwrap_or_default();
    let PodSecurityContext {
        run_as_non_root,
        run_as_user,
        seccomp_profile,
        ..
    } = pod_security;
    assert!(security.run_as_non_root.or(run_as_non_root) == Some(true));
    assert_ne!(security.run_as_user.or(run_as_user), Some(0));
    let seccomp = security
        .seccomp_profile
        .or(seccomp_profile)
        .map(|p| p.type_);
    assert!(matches!(
        seccomp.as_deref(),
        Some("RuntimeDefault" | "Localhost")
    ));
    assert_eq!(security.allow_privilege_escalation, Some(false));
    assert_ne!(security.privileged, Some(true));
    let capabilities = security.capabilities.unwrap_or_default();
    assert!(
        capabilities
            .drop
            .unwrap_or_default()
            .iter()
            .any(|c| c == "ALL")
    );
    let added = capabilities.add.unwrap_or_default();
    assert!(added.iter().all(|c| c == "NET_BIND_SERVICE"), "{added:?}");
    for shared in [pod.host_network, pod.host_pid, pod.host_ipc] {
        assert_ne!(shared, Some(true));
    }
    let volumes = pod.volumes.clone().unwrap_or_default();
    assert!(volumes.iter().all(|v| v.host_path.is_none()));
    let ports = container.ports.clone().unwrap_or_default();
    assert!(ports.iter().all(|p| p.host_port.is_none()));
}

#[test]
fn the_deployment_complies_with_the_restricted_profile() {
    let pod = pod_spec();
    assert!(
        pod.init_containers
            .as_deref()
            .unwrap_or_default()
            .is_empty()
    );
    for container in &pod.containers {
        assert_restricted(&pod, container);
    }
}

#[test]
fn the_pod_name_comes_from_the_downward_api() {
    let pod = pod_spec();
    let env = pod.containers[0].env.clone().unwrap_or_default();
    let pod_name = env
        .iter()
        .find(|e| e.name == "POD_NAME")
        .and_then(|e| e.value_from.as_ref())
        .and_then(|v| v.field_ref.as_ref())
        .map(|f| f.field_path.as_str());
    assert_eq!(pod_name, Some("metadata.name"));
}

#[test]
fn the_network_policy_admits_only_traffic_from_the_node() {
    let policy: NetworkPolicy = document(NETWORK_POLICY_YAML, "NetworkPolicy");
    let deployment: Deployment = document(DEPLOYMENT_YAML, "Deployment");
    assert_eq!(policy.metadata.namespace, deployment.metadata.namespace);
    let spec = policy.spec.expect("a spec");
    let pod_labels = deployment
        .spec
        .template
        .metadata
        .and_then(|m| m.labels)
        .unwrap_or_default();
    let selected = spec
        .pod_selector
        .and_then(|s| s.match_labels)
        .unwrap_or_default();
    assert!(!selected.is_empty());
    assert!(selected.iter().all(|(k, v)| pod_labels.get(k) == Some(v)));
    assert_eq!(
        spec.policy_types.as_deref(),
        Some(&["Ingress".to_owned()][..])
    );
    // No ingress rule: only the node (the kubelet's probes) may connect.
    assert!(spec.ingress.unwrap_or_default().is_empty());
}

fn grants_events(rules: &[PolicyRule]) -> bool {
    rules.iter().any(|r| {
        r.api_groups.iter().flatten().any(|g| g == "events.k8s.io")
            && r.resources.iter().flatten().any(|res| res == "events")
    })
}

#[test]
fn the_namespaced_rbac_grants_the_operator_s_rules_in_its_namespace_only() {
    let cluster_wide: ClusterRole = document(RBAC_YAML, "ClusterRole");
    let role: Role = document(RBAC_NAMESPACED_YAML, "Role");
    let binding: RoleBinding = document(RBAC_NAMESPACED_YAML, "RoleBinding");
    // The same rules as the cluster-wide variant, except the (cluster-scoped) CRD rule, plus the
    // leader election's Lease rule (a Role of its own in the cluster-wide variant).
    let lease_role: Role = document(RBAC_YAML, "Role");
    let namespaced_rules: Vec<_> = cluster_wide
        .rules
        .unwrap_or_default()
        .into_iter()
        .filter(|r| {
            !r.api_groups
                .iter()
                .flatten()
                .any(|g| g == "apiextensions.k8s.io")
        })
        .chain(lease_role.rules.unwrap_or_default())
        .collect();
    assert_eq!(role.rules.clone().unwrap_or_default(), namespaced_rules);
    assert!(grants_events(&role.rules.unwrap_or_default()));
    assert_eq!(binding.metadata.namespace, role.metadata.namespace);
    assert_eq!(binding.role_ref.kind, "Role");
    assert_eq!(Some(binding.role_ref.name), role.metadata.name);
    // Nothing cluster-wide but reading the one CRD.
    for cluster_role in documents::<ClusterRole>(RBAC_NAMESPACED_YAML, "ClusterRole") {
        for rule in cluster_role.rules.unwrap_or_default() {
            assert_eq!(rule.verbs, ["get"]);
            assert_eq!(
                rule.resources.as_deref(),
                Some(&["customresourcedefinitions".to_owned()][..])
            );
            assert!(rule.resource_names.is_some_and(|n| !n.is_empty()));
        }
    }
}

#[test]
fn the_image_leaves_out_tcp_health_and_the_build_context_leaves_out_target() {
    let instructions: Vec<&str> = DOCKERFILE
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect();
    assert!(
        instructions.iter().all(|l| !l.contains("tcp_health")),
        "tcp_health must not be built into the image"
    );
    assert!(!instructions.iter().any(|l| l.contains("--bins")));
    let ignored: Vec<&str> = DOCKERIGNORE
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    for needed in ["target", "**/target", ".git"] {
        assert!(
            ignored.contains(&needed),
            "{needed} is not in .dockerignore"
        );
    }
}
