//! What the supervisor asks the Kubernetes side to do.

use serde_json::Value;

use super::object::ObjectRef;

/// A request from the supervisor to the Kubernetes adapter. Effects of one object are sent in
/// the order they happened.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Effect {
    /// Whether the object's finalizer must be held. Sent when this changes: `hold: true` as soon
    /// as a handler that holds the finalizer matches; `hold: false` the moment no such handler
    /// matches and no instance that held it is still running (or it was abandoned). Also sent
    /// once on the first observation of every object (so an adapter that finds a stale
    /// finalizer after a restart learns to remove it); never sent after the object is gone.
    Finalizer {
        /// The object.
        object: ObjectRef,
        /// Hold (add) or release (remove) the finalizer.
        hold: bool,
    },
    /// A successful invocation's output: a result for `status.<handler>` and/or a patch.
    Output {
        /// The object.
        object: ObjectRef,
        /// The handler id.
        handler: &'static str,
        /// A result to store under `status.<handler>`.
        result: Option<Value>,
        /// A merge patch to apply.
        patch: Option<Value>,
    },
    /// A failed invocation (for a Warning event). `fatal` when no retry follows.
    Failure {
        /// The object.
        object: ObjectRef,
        /// The handler id.
        handler: &'static str,
        /// The error with its causes.
        message: String,
        /// The error's own message, without its causes (which may quote the object's values):
        /// what Events show by default.
        summary: String,
        /// No retry follows.
        fatal: bool,
    },
    /// The object could not be evaluated for a handler (e.g. it does not deserialize). Sent
    /// once per object version and handler.
    Skipped {
        /// The object.
        object: ObjectRef,
        /// The handler id.
        handler: &'static str,
        /// Why, with the causes.
        message: String,
        /// Why, without the causes (see `Failure::summary`).
        summary: String,
    },
}
