//! Names and constants every arm and the harness agree on.

/// The namespace the benchmark objects live in.
pub const NAMESPACE: &str = "kopf-bench";

/// The API group of the benchmark resource.
pub const GROUP: &str = "kopf.dev";
/// The API version of the benchmark resource.
pub const VERSION: &str = "v1";
/// The kind of the benchmark resource.
pub const KIND: &str = "KopfExample";
/// The plural of the benchmark resource.
pub const PLURAL: &str = "kopfexamples";

/// The `spec.field` of every benchmark object the harness creates.
pub const FIELD_VALUE: &str = "value";

/// The sharded group of scenario 9: its Lease `kopf-bench-shards` and one Lease per member,
/// `kopf-bench-shards-<identity>`, in [`NAMESPACE`].
pub const SHARD_GROUP: &str = "kopf-bench-shards";

/// The handler id of every arm's timer or daemon (the key of its result under `status`).
pub const HANDLER_ID: &str = "tick";

/// The name of the `i`-th benchmark object.
///
/// ```
/// assert_eq!(kopf_bench::names::object_name(42), "obj-0000042");
/// ```
#[must_use]
pub fn object_name(i: usize) -> String {
    format!("obj-{i:07}")
}

/// The index in a name made by [`object_name`].
///
/// ```
/// use kopf_bench::names::{object_index, object_name};
/// assert_eq!(object_index(&object_name(7)), Some(7));
/// assert_eq!(object_index("other"), None);
/// ```
#[must_use]
pub fn object_index(name: &str) -> Option<usize> {
    name.strip_prefix("obj-")?.parse().ok()
}
