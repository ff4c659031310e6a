//! The two annotations per object and operator that hold the change handlers' state:
//!
//! - `<prefix><op>.last-handled`: the diff base ([`super::base`]).
//! - `<prefix><op>.progress`: a change in flight ([`super::progress`]).
//!
//! `<op>` is the operator's storage name, so two operators on one kind keep separate state,
//! like their finalizers; a long name is shortened with a hash to the 63 characters of an
//! annotation name, as for `.cron`. Their format is in [`super::format`]; what one step of a
//! change writes is [`super::write::ChangeWrite`].

use crate::core::hash::annotation_key;

/// The suffix of the diff base's annotation.
const BASE_SUFFIX: &str = ".last-handled";
/// The suffix of the progress annotation.
const PROGRESS_SUFFIX: &str = ".progress";

/// The annotation keys of one operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Keys {
    /// `<prefix><op>.progress`.
    pub(crate) progress: String,
    /// `<prefix><op>.last-handled`.
    pub(crate) base: String,
}

impl Keys {
    /// The keys under `prefix` (e.g. `kopf.dev/`) for the operator named `op`.
    #[must_use]
    pub(crate) fn new(prefix: &str, op: &str) -> Self {
        Self {
            progress: annotation_key(prefix, op, PROGRESS_SUFFIX),
            base: annotation_key(prefix, op, BASE_SUFFIX),
        }
    }
}
