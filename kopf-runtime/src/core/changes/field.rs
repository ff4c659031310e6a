//! A field an `on_update` handler watches, and what an observed version holds of them, as the
//! change rules see it.

use std::collections::BTreeMap;

use serde_json::Value;

/// A field an `on_update` handler watches (`field = "spec.size"`), split at dots at compile
/// time. Segments are object keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct FieldPath {
    /// The dotted path as written (the key in the diff base).
    pub(crate) path: &'static str,
    /// The path's segments.
    pub(crate) segments: &'static [&'static str],
}

/// One observed version, as far as changes are concerned. It borrows the body.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Observed<'b> {
    /// The digest of the essence.
    pub(crate) digest: u64,
    /// Every watched field's value (`None`: absent or `null`), by path.
    pub(crate) fields: BTreeMap<&'static str, Option<&'b Value>>,
}
