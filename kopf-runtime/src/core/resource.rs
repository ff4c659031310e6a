//! Which Kubernetes resource a handler serves, without depending on kube.

use std::borrow::Cow;
use std::fmt;

/// A resource kind: API group, version, kind, plural and scope.
///
/// ```
/// use kopf_runtime::ResourceInfo;
/// let r = ResourceInfo::new("kopf.dev", "v1", "KopfExample", "kopfexamples", true);
/// assert_eq!(r.api_version(), "kopf.dev/v1");
/// assert_eq!(r.to_string(), "kopfexamples.v1.kopf.dev");
/// let pods = ResourceInfo::new("", "v1", "Pod", "pods", true);
/// assert_eq!(pods.api_version(), "v1");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceInfo {
    /// The API group (`""` for the core group).
    pub group: Cow<'static, str>,
    /// The API version.
    pub version: Cow<'static, str>,
    /// The kind.
    pub kind: Cow<'static, str>,
    /// The plural resource name used in URLs.
    pub plural: Cow<'static, str>,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
}

impl ResourceInfo {
    /// A resource from static strings (usable in `const` contexts).
    #[must_use]
    pub const fn new(
        group: &'static str,
        version: &'static str,
        kind: &'static str,
        plural: &'static str,
        namespaced: bool,
    ) -> Self {
        Self {
            group: Cow::Borrowed(group),
            version: Cow::Borrowed(version),
            kind: Cow::Borrowed(kind),
            plural: Cow::Borrowed(plural),
            namespaced,
        }
    }

    /// `group/version`, or just `version` for the core group.
    #[must_use]
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

impl fmt::Display for ResourceInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}.{}", self.plural, self.version)
        } else {
            write!(f, "{}.{}.{}", self.plural, self.version, self.group)
        }
    }
}
