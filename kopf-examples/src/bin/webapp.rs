//! # A reconcile handler that runs a web app: a Deployment, a Service and a ConfigMap
//!
//! For every `KopfExample`, the `webapp` reconcile handler owns three children in the parent's
//! namespace, made from its spec:
//!
//! ```text
//!   KopfExample demo                     spec.field: "nginx:1.27"        (the image)
//!   │                                    spec.items: ["replicas=2",      (default 1)
//!   │                                                 "port=8080",       (default 8080)
//!   │                                                 "greeting=hello"]  (anything else: config)
//!   ├── Deployment demo       replicas 2, one container `app` of the image, on the port,
//!   │                         its environment from the ConfigMap
//!   ├── Service    demo       port → the container's port, selecting the Deployment's pods
//!   └── ConfigMap  demo-config  data: {greeting: hello}
//! ```
//!
//! and writes `status.webapp` (which children are applied, with the image and the replicas) only
//! when it changes:
//!
//! ```json
//! {"deployment": "demo", "service": "demo", "configMap": "demo-config", "image": "nginx:1.27", "replicas": 2}
//! ```
//!
//! It shows:
//! - **one function for creation, changes and resumption**: `#[reconcile]` runs when the parent
//!   appears (and for every parent at each operator start), when its spec changes, and when a
//!   child changes; it applies the whole desired state every time, so running it again changes
//!   nothing;
//! - **`owns(Deployment, Service, ConfigMap)`**: one metadata-only watch per child kind wakes the
//!   owner when someone else edits or deletes a child: an edit of the Deployment's `replicas` by
//!   another field manager is taken back, a deleted Service is re-created (the operator's own
//!   applies do not wake it: echo suppression, see `docs/children.md`);
//! - **`Children<K>`**: `children.apply("", deployment)` names the child after its owner, makes
//!   the owner its controller and writes it by server-side apply with `force` under the field
//!   manager of [`ChildWrites`];
//! - **errors and backoff**: a spec it cannot run (no image, a malformed item, a replicas or port
//!   that is not a number) is a permanent error — logged, a Warning event, and no retry until
//!   the spec changes; a failed apply is retried with the handler's backoff (1 s, doubling up to
//!   `backoff_max`);
//! - **a requeue**: `Action::requeue(5 min)` looks again even if nothing changes;
//! - **no `cleanup`**: the children carry owner references, so the Kubernetes garbage collector
//!   deletes them with the parent — also when the operator is down. The handler has nothing
//!   outside the cluster to release, so it holds no finalizer on the parent.
//!
//! ## Run it
//!
//! ```text
//! eval "$(tools/kube-testenv/start.sh)"   # or point KUBECONFIG at your cluster
//! cargo run -p kopf-examples --bin webapp -- --namespace default --install-crd
//! ```
//!
//! then create a `KopfExample` named `demo` in `default` with `spec.field: nginx:1.27` and
//! `spec.items: [replicas=2, port=8080, greeting=hello]`, and read `kubectl get
//! deployment,service,configmap -l app.kubernetes.io/instance=demo`; change `replicas=3`;
//! `kubectl scale deployment demo --replicas=5` and see it back at 3; delete the Service and see
//! it re-created; delete `demo` and see the three go with it.
//!
//! ## RBAC
//!
//! Besides the rules of `kopf-examples/deploy/rbac.yaml` (the parents), the operator needs `get`,
//! `list`, `watch`, `create` and `patch` on `deployments` (`apps`), `services` and `configmaps`
//! (`""`). `webapp` is not in the image that `kopf-examples/deploy/Dockerfile` builds.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapEnvSource, Container, ContainerPort, EnvFromSource, PodSpec,
    PodTemplateSpec, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kopf_examples::crd::KopfExample;
use kopf_runtime::engine::ChildWrites;
use kopf_runtime::{Action, Children, HandlerError, Patch, reconcile};
use serde_json::{Value, json};

/// The field manager of the handler's server-side applies.
pub const FIELD_MANAGER: &str = "kopf-examples-webapp";
/// The label that selects the app's pods: the parent's name.
const INSTANCE: &str = "app.kubernetes.io/instance";
/// How often the handler looks again when nothing changes.
const REQUEUE: Duration = Duration::from_secs(300);

/// The app as the parent's spec wants it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct App {
    /// The parent's name: the pods' `app.kubernetes.io/instance` label.
    instance: String,
    image: String,
    replicas: i32,
    port: i32,
    /// Every `KEY=VALUE` item other than `replicas` and `port`.
    config: BTreeMap<String, String>,
}

impl App {
    /// Reads the spec: `field` is the image, `items` are `KEY=VALUE` settings.
    ///
    /// # Errors
    /// A message saying what is wrong with the spec.
    fn of(parent: &KopfExample) -> Result<Self, String> {
        let spec = &parent.spec;
        let image = spec.field.clone().filter(|i| !i.is_empty());
        let image = image.ok_or("spec.field (the image) is required")?;
        let mut app = Self {
            instance: parent.metadata.name.clone().unwrap_or_default(),
            image,
            replicas: 1,
            port: 8080,
            config: BTreeMap::new(),
        };
        for item in &spec.items {
            let Some((key, value)) = item.split_once('=') else {
                return Err(format!("spec.items: {item:?} is not KEY=VALUE"));
            };
            let number = || value.parse::<i32>().ok().filter(|n| *n >= 0);
            match key {
                "replicas" => app.replicas = number().ok_or(format!("replicas={value:?}"))?,
                "port" => {
                    app.port = number()
                        .filter(|p| (1..=65535).contains(p))
                        .ok_or(format!("port={value:?}"))?
                }
                _ => {
                    app.config.insert(key.to_owned(), value.to_owned());
                }
            }
        }
        Ok(app)
    }

    fn selector(&self) -> BTreeMap<String, String> {
        BTreeMap::from([(INSTANCE.to_owned(), self.instance.clone())])
    }

    /// The Deployment (named after the parent): only the fields the handler owns.
    fn deployment(&self, config_map: &str) -> Deployment {
        let container = Container {
            name: "app".to_owned(),
            image: Some(self.image.clone()),
            ports: Some(vec![ContainerPort {
                container_port: self.port,
                name: Some("http".to_owned()),
                ..ContainerPort::default()
            }]),
            env_from: Some(vec![EnvFromSource {
                config_map_ref: Some(ConfigMapEnvSource {
                    name: config_map.to_owned(),
                    optional: None,
                }),
                ..EnvFromSource::default()
            }]),
            ..Container::default()
        };
        let template = PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(self.selector()),
                ..ObjectMeta::default()
            }),
            spec: Some(PodSpec {
                containers: vec![container],
                ..PodSpec::default()
            }),
        };
        Deployment {
            spec: DeploymentSpec {
                replicas: Some(self.replicas),
                selector: LabelSelector {
                    match_labels: Some(self.selector()),
                    ..LabelSelector::default()
                },
                template,
                ..DeploymentSpec::default()
            },
            ..Deployment::default()
        }
    }

    /// The Service (named after the parent) in front of the Deployment's pods.
    fn service(&self) -> Service {
        Service {
            spec: Some(ServiceSpec {
                selector: Some(self.selector()),
                ports: Some(vec![ServicePort {
                    name: Some("http".to_owned()),
                    port: self.port,
                    target_port: Some(IntOrString::String("http".to_owned())),
                    ..ServicePort::default()
                }]),
                ..ServiceSpec::default()
            }),
            ..Service::default()
        }
    }

    /// The ConfigMap `<parent>-config`: the config items.
    fn config_map(&self) -> ConfigMap {
        ConfigMap {
            data: Some(self.config.clone()),
            ..ConfigMap::default()
        }
    }

    /// `status.webapp` once the three children are applied.
    fn status(&self, children: &Children<KopfExample>) -> Value {
        json!({
            "deployment": children.name_for(""),
            "service": children.name_for(""),
            "configMap": children.name_for("config"),
            "image": self.image,
            "replicas": self.replicas,
        })
    }
}

/// Keeps the parent's Deployment, Service and ConfigMap as its spec says.
#[reconcile(
    owns(Deployment, Service, ConfigMap),
    backoff = "1s",
    backoff_max = "1m"
)]
async fn webapp(
    parent: Arc<KopfExample>,
    children: Children<KopfExample>,
    patch: Patch,
) -> Result<Action, HandlerError> {
    // A spec that cannot run: no retry until it changes (a change runs the handler again).
    let app = App::of(&parent).map_err(HandlerError::permanent)?;
    // The ConfigMap first: the Deployment's pods read it.
    let config_map = children.apply("config", app.config_map()).await?;
    let config_name = config_map.metadata.name.unwrap_or_default();
    children.apply("", app.deployment(&config_name)).await?;
    children.apply("", app.service()).await?;
    if let Some(status) = changed(&parent, app.status(&children)) {
        patch.status("webapp", status);
    }
    Ok(Action::requeue(REQUEUE))
}

/// `status` if the parent's `status.webapp` differs from it: a write of the same value would be a
/// request for nothing (the API server would not even store it).
fn changed(parent: &KopfExample, status: Value) -> Option<Value> {
    let current = parent.status.as_ref().and_then(|s| s.0.get("webapp"));
    (current != Some(&status)).then_some(status)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = kopf_examples::cli::ExampleArgs::from_env();
    if args.install_crd {
        kopf_examples::cli::install_crds().await?;
    }
    // `Children` applies with this field manager.
    let writes = ChildWrites::new(FIELD_MANAGER);
    args.builder().data(writes).run().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kopf_examples::crd::KopfExampleSpec;

    fn parent(field: Option<&str>, items: &[&str]) -> KopfExample {
        let spec = KopfExampleSpec {
            field: field.map(str::to_owned),
            items: items.iter().map(|i| (*i).to_owned()).collect(),
            duration: None,
        };
        KopfExample::new("demo", spec)
    }

    #[test]
    fn the_spec_is_read_into_an_app() {
        let app = App::of(&parent(Some("nginx"), &["replicas=2", "port=80", "a=b=c"]));
        let want = App {
            instance: "demo".to_owned(),
            image: "nginx".to_owned(),
            replicas: 2,
            port: 80,
            config: BTreeMap::from([("a".to_owned(), "b=c".to_owned())]),
        };
        assert_eq!(app, Ok(want));
        let defaults = App::of(&parent(Some("nginx"), &[])).map(|a| (a.replicas, a.port));
        assert_eq!(defaults, Ok((1, 8080)));
    }

    #[test]
    fn a_spec_that_cannot_run_is_refused_with_the_reason() {
        let table: &[(Option<&str>, &[&str], &str)] = &[
            (None, &[], "spec.field (the image) is required"),
            (Some(""), &[], "spec.field (the image) is required"),
            (
                Some("i"),
                &["replicas"],
                "spec.items: \"replicas\" is not KEY=VALUE",
            ),
            (Some("i"), &["replicas=-1"], "replicas=\"-1\""),
            (Some("i"), &["replicas=two"], "replicas=\"two\""),
            (Some("i"), &["port=0"], "port=\"0\""),
            (Some("i"), &["port=70000"], "port=\"70000\""),
        ];
        for (field, items, error) in table {
            let got = App::of(&parent(*field, items));
            assert_eq!(got, Err((*error).to_owned()), "{field:?} {items:?}");
        }
    }

    #[test]
    fn the_status_is_written_only_when_it_changes() {
        let with_status = |status: Option<Value>| {
            let mut obj = parent(Some("i"), &[]);
            obj.status = status.map(|s| serde_json::from_value(s).unwrap_or_default());
            obj
        };
        let now = json!({"image": "i", "replicas": 1});
        let table = [
            (None, Some(now.clone())),
            (Some(json!({"other": 1})), Some(now.clone())),
            (
                Some(json!({"webapp": {"image": "j", "replicas": 1}})),
                Some(now.clone()),
            ),
            (Some(json!({"webapp": now.clone(), "other": 1})), None),
        ];
        for (before, want) in table {
            let obj = with_status(before.clone());
            assert_eq!(changed(&obj, now.clone()), want, "{before:?}");
        }
    }

    #[test]
    fn the_deployment_runs_the_image_on_the_port_with_the_config() {
        let app = App::of(&parent(Some("nginx"), &["replicas=3", "port=81"]));
        let app = app.unwrap_or_else(|e| panic!("{e}"));
        let manifest = serde_json::to_value(app.deployment("demo-config")).unwrap_or_default();
        let selector = json!({INSTANCE: "demo"});
        assert_eq!(manifest["spec"]["replicas"], 3);
        assert_eq!(manifest["spec"]["selector"]["matchLabels"], selector);
        let pod = &manifest["spec"]["template"];
        assert_eq!(pod["metadata"]["labels"], selector);
        let container = &pod["spec"]["containers"][0];
        assert_eq!(container["image"], "nginx");
        assert_eq!(container["ports"][0]["containerPort"], 81);
        assert_eq!(
            container["envFrom"][0]["configMapRef"]["name"],
            "demo-config"
        );
        let service = serde_json::to_value(app.service()).unwrap_or_default();
        assert_eq!(service["spec"]["selector"], selector);
        assert_eq!(service["spec"]["ports"][0]["port"], 81);
        assert_eq!(service["spec"]["ports"][0]["targetPort"], "http");
    }
}
