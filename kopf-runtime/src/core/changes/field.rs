//! A field an `on_update` handler watches, as the change rules see it.

/// A field an `on_update` handler watches (`field = "spec.size"`), split at dots at compile
/// time. Segments are object keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct FieldPath {
    /// The dotted path as written (the key in the diff base).
    pub(crate) path: &'static str,
    /// The path's segments.
    pub(crate) segments: &'static [&'static str],
}
