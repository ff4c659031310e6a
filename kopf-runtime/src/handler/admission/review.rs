//! What a handler is told about a request besides the object: the [`Operation`] and the
//! [`Review`].

use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::authentication::v1::UserInfo;

/// The operation an admission request is for.
///
/// ```
/// use kopf_runtime::Operation;
/// assert_eq!(Operation::Create.as_str(), "CREATE");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// An object is created.
    Create,
    /// An object is replaced or patched.
    Update,
    /// An object is deleted: the handler is given the object as it was.
    Delete,
    /// A connection is opened to a subresource of an object (`kubectl exec`, `attach`,
    /// `port-forward`, `proxy`): the handler is given [`Connect`](crate::Connect), not the
    /// object.
    Connect,
}

impl Operation {
    /// The name the API server uses (`CREATE`, `UPDATE`, `DELETE`, `CONNECT`).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Create => "CREATE",
            Self::Update => "UPDATE",
            Self::Delete => "DELETE",
            Self::Connect => "CONNECT",
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an admission request says besides the object: the operation, the object as it was
/// before an update, who asks, and whether it is a dry run (`kubectl --dry-run=server`; a
/// handler must not act on the outside world then, nor, in fact, ever: the API server may
/// call it again, or reject the request after it answered).
///
/// ```
/// use std::sync::Arc;
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kopf_runtime::{Operation, Rejection, Review};
///
/// /// A ConfigMap's `data.owner` cannot change once set.
/// fn owner_is_fixed(map: Arc<ConfigMap>, review: Review<ConfigMap>) -> Result<(), Rejection> {
///     let owner = |m: &ConfigMap| m.data.as_ref().and_then(|d| d.get("owner").cloned());
///     match (review.operation, review.old.as_deref()) {
///         (Operation::Update, Some(old)) if owner(old).is_some() && owner(old) != owner(&map) => {
///             Err(Rejection::new("data.owner cannot change"))
///         }
///         _ => Ok(()),
///     }
/// }
/// # let review = Review::<ConfigMap>::new(Operation::Create);
/// # assert!(owner_is_fixed(Arc::default(), review).is_ok());
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Review<K> {
    /// The operation.
    pub operation: Operation,
    /// The object before the update (`None` on create and delete).
    pub old: Option<Arc<K>>,
    /// The object's name (empty on a create with `generateName`).
    pub name: String,
    /// The object's namespace (`None` for a cluster-scoped one).
    pub namespace: Option<String>,
    /// Who sends the request.
    pub user: UserInfo,
    /// Whether the request is a dry run: nothing will be stored.
    pub dry_run: bool,
}

impl<K> Review<K> {
    /// A review of `operation` with nothing else set (for tests of handlers).
    ///
    /// ```
    /// use kopf_runtime::{Operation, Review};
    /// let review = Review::<()>::new(Operation::Delete);
    /// assert!(!review.dry_run && review.old.is_none());
    /// ```
    #[must_use]
    pub fn new(operation: Operation) -> Self {
        Self {
            operation,
            old: None,
            name: String::new(),
            namespace: None,
            user: UserInfo::default(),
            dry_run: false,
        }
    }
}
