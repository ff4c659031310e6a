//! What a reconcile handler names besides its own resource: the kinds it owns and watches
//! ([`KindRef`], [`Related`]), the owners a related object maps to ([`Target`]), and why a
//! reconcile was triggered ([`Trigger`]). Kubernetes-free and const-constructible, so that
//! `#[reconcile]` can put them in its static spec. A leaf.

use std::fmt;

use crate::core::resource::ResourceInfo;

/// A Kubernetes kind, as the operator needs it to watch it: group, version, kind, plural and
/// scope. The same value as the [`ResourceInfo`] a handler serves, under the name the reconcile
/// options use; `#[reconcile(owns(ConfigMap))]` makes one from the type.
///
/// ```
/// use kopf_runtime::engine::KindRef;
/// let kind = KindRef::new("apps", "v1", "Deployment", "deployments", true);
/// assert_eq!(kind.api_version(), "apps/v1");
/// ```
pub type KindRef = ResourceInfo;

/// An owner a related object maps to, by namespace and name (`namespace: None` for a
/// cluster-scoped owner).
///
/// ```
/// use kopf_runtime::engine::Target;
/// let target = Target::namespaced("shop", "frontend");
/// assert_eq!(target.to_string(), "shop/frontend");
/// assert_eq!(Target::cluster("global").to_string(), "global");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Target {
    /// The owner's namespace (`None`: a cluster-scoped owner).
    pub namespace: Option<String>,
    /// The owner's name.
    pub name: String,
}

impl Target {
    /// A namespaced owner.
    ///
    /// ```
    /// let t = kopf_runtime::engine::Target::namespaced("ns", "a");
    /// assert_eq!(t.namespace.as_deref(), Some("ns"));
    /// ```
    #[must_use]
    pub fn namespaced(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: Some(namespace.into()),
            name: name.into(),
        }
    }

    /// A cluster-scoped owner.
    ///
    /// ```
    /// assert_eq!(kopf_runtime::engine::Target::cluster("a").namespace, None);
    /// ```
    #[must_use]
    pub fn cluster(name: impl Into<String>) -> Self {
        Self {
            namespace: None,
            name: name.into(),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// A kind a reconcile handler watches without owning it: a change of one of its objects maps,
/// through `map`, to the owners to reconcile. `#[reconcile(watches(Secret, map = f))]` makes one
/// whose `map` decodes the body into `Secret` and calls `f`.
///
/// ```
/// use kopf_runtime::engine::{KindRef, Related, Target};
/// fn secrets() -> KindRef { KindRef::new("", "v1", "Secret", "secrets", true) }
/// fn same_name(body: &serde_json::Value) -> Vec<Target> {
///     let meta = &body["metadata"];
///     match (meta["namespace"].as_str(), meta["name"].as_str()) {
///         (Some(ns), Some(name)) => vec![Target::namespaced(ns, name)],
///         _ => Vec::new(),
///     }
/// }
/// const RELATED: Related = Related { kind: secrets, map: same_name };
/// let body = serde_json::json!({"metadata": {"namespace": "ns", "name": "a"}});
/// assert_eq!((RELATED.map)(&body), vec![Target::namespaced("ns", "a")]);
/// ```
#[derive(Clone, Copy)]
pub struct Related {
    /// The watched kind.
    pub kind: fn() -> KindRef,
    /// The owners a (full) object of the kind maps to.
    pub map: fn(&serde_json::Value) -> Vec<Target>,
}

impl fmt::Debug for Related {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Related")
            .field("kind", &(self.kind)())
            .finish_non_exhaustive()
    }
}

/// Why a reconcile run was asked for, for logs and metrics.
///
/// ```
/// use kopf_runtime::engine::Trigger;
/// assert_eq!(Trigger::Child.as_str(), "child");
/// assert_eq!(Trigger::Related.to_string(), "related");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Trigger {
    /// The object appeared, or the operator (re)started serving it.
    Appeared,
    /// The object's essence changed (not the operator's own status, finalizer or annotation
    /// writes).
    Changed,
    /// An owned child changed (created, modified or deleted by someone else).
    Child,
    /// A related (watched) object changed and maps to this owner.
    Related,
    /// Asked for explicitly.
    External,
}

impl Trigger {
    /// The cause as a word: `appeared`, `changed`, `child`, `related`, `external`.
    ///
    /// ```
    /// assert_eq!(kopf_runtime::engine::Trigger::External.as_str(), "external");
    /// ```
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Appeared => "appeared",
            Self::Changed => "changed",
            Self::Child => "child",
            Self::Related => "related",
            Self::External => "external",
        }
    }
}

impl fmt::Display for Trigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
