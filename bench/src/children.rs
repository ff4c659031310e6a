//! The children of scenario 10 (`children`): what every arm makes for each parent, and what the
//! harness checks.
//!
//! ```text
//!   KopfExample obj-0000042 (spec.field: "value")          the parent, made by the harness
//!     ├─ ConfigMap obj-0000042-config   data.field = the parent's spec.field
//!     ├─ Secret    obj-0000042-secret   data.token = "token-obj-0000042"
//!     └─ Service   obj-0000042-svc      headless, selector app = obj-0000042, port 80
//! ```
//!
//! All three are kinds the API server handles alone (no controller-manager runs in the
//! benchmark's testenv): no ReplicaSets or Pods behind them, no status written by anyone else,
//! so every write the harness sees comes from the arm or from the harness itself. The Service is
//! headless (`clusterIP: None`): the testenv's service range is a /24, too small for 1 000
//! cluster IPs. Every child carries the label [`PARENT_LABEL`] naming its parent, which the
//! harness selects on; the arms add the owner reference (controller, block owner deletion).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::json;

use crate::names::NAMESPACE;

/// The label on every child naming its parent (the harness's label selector).
pub const PARENT_LABEL: &str = "kopf-bench/parent";

/// The value of `data.field` the harness's edits write (the operator must restore it).
pub const EDITED: &str = "edited";

/// The three child kinds of a parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ChildKind {
    /// `ConfigMap <parent>-config`.
    ConfigMap,
    /// `Secret <parent>-secret`.
    Secret,
    /// `Service <parent>-svc`.
    Service,
}

impl ChildKind {
    /// Every child kind, in the order the arms apply them.
    pub const ALL: [Self; 3] = [Self::ConfigMap, Self::Secret, Self::Service];

    /// The suffix of the child's name after the parent's (`<parent>-<suffix>`).
    ///
    /// ```
    /// use kopf_bench::children::ChildKind;
    /// assert_eq!(ChildKind::Service.suffix(), "svc");
    /// ```
    #[must_use]
    pub fn suffix(self) -> &'static str {
        match self {
            Self::ConfigMap => "config",
            Self::Secret => "secret",
            Self::Service => "svc",
        }
    }

    /// The merge patch of the harness's edit: a field the operator owns, set to [`EDITED`].
    ///
    /// ```
    /// use kopf_bench::children::ChildKind;
    /// let p = ChildKind::ConfigMap.edit_patch();
    /// assert_eq!(p["data"]["field"], "edited");
    /// ```
    #[must_use]
    pub fn edit_patch(self) -> serde_json::Value {
        match self {
            Self::ConfigMap => json!({"data": {"field": EDITED}}),
            // base64 of "edited"
            Self::Secret => json!({"data": {"token": "ZWRpdGVk"}}),
            Self::Service => json!({"spec": {"selector": {"app": EDITED}}}),
        }
    }
}

/// The name of a parent's child of `kind`.
///
/// ```
/// use kopf_bench::children::{ChildKind, child_name};
/// assert_eq!(child_name("obj-0000001", ChildKind::ConfigMap), "obj-0000001-config");
/// ```
#[must_use]
pub fn child_name(parent: &str, kind: ChildKind) -> String {
    format!("{parent}-{}", kind.suffix())
}

fn meta(parent: &str, kind: ChildKind) -> ObjectMeta {
    ObjectMeta {
        name: Some(child_name(parent, kind)),
        namespace: Some(NAMESPACE.to_owned()),
        labels: Some(BTreeMap::from([(
            PARENT_LABEL.to_owned(),
            parent.to_owned(),
        )])),
        ..ObjectMeta::default()
    }
}

/// The ConfigMap of `parent`, whose `spec.field` is `field`.
///
/// ```
/// use kopf_bench::children::{config_map, config_map_ok};
/// let cm = config_map("obj-0000001", "value");
/// assert!(config_map_ok(&cm, "value"));
/// assert!(!config_map_ok(&cm, "other"));
/// ```
#[must_use]
pub fn config_map(parent: &str, field: &str) -> ConfigMap {
    ConfigMap {
        metadata: meta(parent, ChildKind::ConfigMap),
        data: Some(BTreeMap::from([("field".to_owned(), field.to_owned())])),
        ..ConfigMap::default()
    }
}

/// Whether a ConfigMap holds what [`config_map`] puts in it.
#[must_use]
pub fn config_map_ok(cm: &ConfigMap, field: &str) -> bool {
    cm.data
        .as_ref()
        .and_then(|d| d.get("field"))
        .is_some_and(|v| v == field)
}

fn token(parent: &str) -> Vec<u8> {
    format!("token-{parent}").into_bytes()
}

/// The Secret of `parent`.
///
/// ```
/// use kopf_bench::children::{secret, secret_ok};
/// assert!(secret_ok(&secret("obj-0000001"), "obj-0000001"));
/// assert!(!secret_ok(&secret("obj-0000001"), "obj-0000002"));
/// ```
#[must_use]
pub fn secret(parent: &str) -> Secret {
    Secret {
        metadata: meta(parent, ChildKind::Secret),
        data: Some(BTreeMap::from([(
            "token".to_owned(),
            ByteString(token(parent)),
        )])),
        ..Secret::default()
    }
}

/// Whether a Secret holds what [`secret`] puts in it.
#[must_use]
pub fn secret_ok(s: &Secret, parent: &str) -> bool {
    s.data
        .as_ref()
        .and_then(|d| d.get("token"))
        .is_some_and(|v| v.0 == token(parent))
}

/// The Service of `parent`: headless, selecting `app: <parent>`, port 80 to 8080.
///
/// ```
/// use kopf_bench::children::{service, service_ok};
/// assert!(service_ok(&service("obj-0000001"), "obj-0000001"));
/// ```
#[must_use]
pub fn service(parent: &str) -> Service {
    Service {
        metadata: meta(parent, ChildKind::Service),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_owned()),
            selector: Some(BTreeMap::from([("app".to_owned(), parent.to_owned())])),
            ports: Some(vec![ServicePort {
                name: Some("http".to_owned()),
                port: 80,
                protocol: Some("TCP".to_owned()),
                target_port: Some(IntOrString::Int(8080)),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// Whether a Service holds what [`service`] puts in it (the selector and the port).
#[must_use]
pub fn service_ok(s: &Service, parent: &str) -> bool {
    s.spec.as_ref().is_some_and(|spec| {
        let app = spec.selector.as_ref().and_then(|sel| sel.get("app"));
        let port = spec.ports.as_ref().and_then(|p| p.first()).map(|p| p.port);
        app.is_some_and(|a| a == parent) && port == Some(80)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An edit breaks exactly the check of its kind (what the harness times the restoration of).
    #[test]
    fn an_edit_breaks_the_check() -> anyhow::Result<()> {
        let p = "obj-0000003";
        let mut cm = serde_json::to_value(config_map(p, "value"))?;
        json_patch::merge(&mut cm, &ChildKind::ConfigMap.edit_patch());
        assert!(!config_map_ok(&serde_json::from_value(cm)?, "value"));
        let mut s = serde_json::to_value(secret(p))?;
        json_patch::merge(&mut s, &ChildKind::Secret.edit_patch());
        let s: Secret = serde_json::from_value(s)?;
        assert!(!secret_ok(&s, p));
        assert_eq!(
            s.data.and_then(|d| d.get("token").cloned()).map(|b| b.0),
            Some(EDITED.into())
        );
        let mut svc = serde_json::to_value(service(p))?;
        json_patch::merge(&mut svc, &ChildKind::Service.edit_patch());
        assert!(!service_ok(&serde_json::from_value(svc)?, p));
        Ok(())
    }
}
