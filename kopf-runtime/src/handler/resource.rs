//! Resource identity of statically typed Kubernetes resources.

use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};

use crate::core::resource::ResourceInfo;

/// Whether a `kube::Resource::Scope` is namespaced. Implemented for k8s-openapi's
/// [`NamespaceResourceScope`] and [`ClusterResourceScope`].
///
/// ```
/// use kopf_runtime::ScopeKind;
/// assert!(<k8s_openapi::NamespaceResourceScope as ScopeKind>::NAMESPACED);
/// assert!(!<k8s_openapi::ClusterResourceScope as ScopeKind>::NAMESPACED);
/// ```
pub trait ScopeKind {
    /// `true` for namespaced resources.
    const NAMESPACED: bool;
}

impl ScopeKind for NamespaceResourceScope {
    const NAMESPACED: bool = true;
}

impl ScopeKind for ClusterResourceScope {
    const NAMESPACED: bool = false;
}

/// A Rust type that names one Kubernetes resource statically: any
/// `kube::Resource<DynamicType = ()>` whose scope is namespaced or cluster-wide (the
/// `k8s_openapi` types and `#[derive(CustomResource)]` structs).
///
/// ```
/// use kopf_runtime::StaticResource;
/// use k8s_openapi::api::core::v1::{Namespace, Pod};
/// let pods = Pod::resource_info();
/// assert_eq!((pods.plural.as_ref(), pods.namespaced), ("pods", true));
/// assert!(!Namespace::resource_info().namespaced);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` does not name a Kubernetes resource statically",
    label = "no static group/version/kind/plural",
    note = "use a type that implements `kube::Resource<DynamicType = ()>` (a `k8s_openapi` type or \
            a `#[derive(CustomResource)]` struct), or name the resource in the attribute: \
            `group = \"...\", version = \"...\", plural = \"...\", kind = \"...\"`"
)]
pub trait StaticResource {
    /// The resource's group, version, kind, plural and scope.
    fn resource_info() -> ResourceInfo;
}

#[diagnostic::do_not_recommend]
impl<K> StaticResource for K
where
    K: kube::Resource<DynamicType = ()>,
    K::Scope: ScopeKind,
{
    fn resource_info() -> ResourceInfo {
        ResourceInfo {
            group: K::group(&()).into_owned().into(),
            version: K::version(&()).into_owned().into(),
            kind: K::kind(&()).into_owned().into(),
            plural: K::plural(&()).into_owned().into(),
            namespaced: <K::Scope as ScopeKind>::NAMESPACED,
        }
    }
}
