//! How handlers write to their object without the core knowing about Kubernetes.

use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;

use super::object::ObjectRef;

/// Why a patch could not be applied (after the adapter's own retries).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("patching {object} failed: {message}")]
pub struct PatchError {
    /// The object, as `namespace/name`.
    pub object: String,
    /// What went wrong (the API status and message).
    pub message: String,
    /// The object no longer exists (404, or its UID changed).
    pub gone: bool,
}

/// Applies JSON merge patches to objects of one resource kind. The operator provides one per
/// resource (in [`Services`](crate::engine::Services) as a [`PatchSinkHandle`]); keys under
/// `status` go through the status subresource when the resource has one. Every write is guarded
/// by the object's UID. A failed write is a [`PatchError`], which handlers see from
/// [`Patch::flush`](crate::Patch::flush).
pub trait PatchSink: Send + Sync + 'static {
    /// Applies `patch` to `object`.
    ///
    /// # Cancellation safety
    /// Dropping the future may or may not leave the patch applied.
    fn apply(&self, object: &ObjectRef, patch: Value)
    -> BoxFuture<'static, Result<(), PatchError>>;
}

/// The [`PatchSink`] as stored in [`Services`](crate::engine::Services).
#[derive(Clone)]
pub struct PatchSinkHandle(pub Arc<dyn PatchSink>);

impl fmt::Debug for PatchSinkHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PatchSinkHandle")
    }
}
