//! The framework's bookkeeping annotations per object and operator, shared by every handler
//! kind: cron timers' records (`<prefix><op>.<id>.cron`) and the change handlers' two:
//!
//! - `<prefix><op>.last-handled`: the diff base ([`crate::core::changes::base`]).
//! - `<prefix><op>.progress`: a change in flight ([`crate::core::changes::progress`]).
//!
//! `<op>` is the operator's storage name ([`storage_name`]): its name for the finalizer derived
//! from it (`kopf.dev/<name>`), else the whole custom finalizer. So two operators on one kind,
//! which never share a finalizer, never share this state either (nor their `.cron` records,
//! `<prefix><op>.<id>.cron`). A long name is shortened with a hash to the 63 characters of an
//! annotation name. Their format is in [`crate::core::changes::format`]; what one step of a
//! change writes is [`crate::core::changes::write::ChangeWrite`].
//!
//! Both annotations name the object they were written for (`"u"`, its UID): a copy on another
//! object (a clone made from exported YAML) is ignored there.
//!
//! Before custom finalizers were told apart, `<op>` was the finalizer's last segment: those
//! keys ([`Keys::legacy`]) are still read when the new ones are absent, and never written.

use std::borrow::Cow;

use crate::core::bookkeeping::{BASE_SUFFIX, CRON_SUFFIX, PROGRESS_SUFFIX};
use crate::core::hash::annotation_key;

/// The prefix of the finalizers derived from operator names (the storage name is the name).
const DERIVED_FINALIZER: &str = "kopf.dev/";

/// The annotation keys of one operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Keys {
    /// `<prefix><op>.progress`.
    pub(crate) progress: String,
    /// `<prefix><op>.last-handled`.
    pub(crate) base: String,
    /// The keys earlier versions used, when they differ: read if the new ones are absent; the
    /// old progress is removed with each write of the new one (so a finished change never
    /// comes back from it).
    pub(crate) legacy: Option<Box<Self>>,
}

impl Keys {
    /// The keys under `prefix` (e.g. `kopf.dev/`) for the operator whose storage name is `op`.
    #[must_use]
    pub(crate) fn new(prefix: &str, op: &str) -> Self {
        Self {
            progress: annotation_key(prefix, op, PROGRESS_SUFFIX),
            base: annotation_key(prefix, op, BASE_SUFFIX),
            legacy: None,
        }
    }

    /// The keys under `prefix` of the operator with this `finalizer`, with the keys of earlier
    /// versions (named after the finalizer's last segment) when they differ.
    #[must_use]
    pub(crate) fn of_operator(prefix: &str, finalizer: &str) -> Self {
        let keys = Self::new(prefix, &storage_name(finalizer));
        let old = Self::new(prefix, legacy_name(finalizer));
        let legacy = (old != keys).then(|| Box::new(old));
        Self { legacy, ..keys }
    }
}

/// The operator's storage name, from its finalizer: `<name>` for `kopf.dev/<name>` (the
/// finalizer derived from the operator's name: the name itself), else `<domain>_<name>` for a
/// custom `<domain>/<name>` (a domain has no `_`), else the finalizer as it is.
#[must_use]
pub(crate) fn storage_name(finalizer: &str) -> Cow<'_, str> {
    if let Some(name) = finalizer.strip_prefix(DERIVED_FINALIZER) {
        return Cow::Borrowed(name);
    }
    match finalizer.split_once('/') {
        Some((domain, name)) => Cow::Owned(format!("{domain}_{name}")),
        None => Cow::Borrowed(finalizer),
    }
}

/// The storage name of earlier versions: the finalizer's last segment.
fn legacy_name(finalizer: &str) -> &str {
    finalizer.rsplit('/').next().unwrap_or(finalizer)
}

/// The record of the cron timer `id` of the operator with this `finalizer`:
/// `<prefix><op>.<id>.cron`.
#[must_use]
pub(crate) fn cron_key(prefix: &str, finalizer: &str, id: &str) -> String {
    let name = format!("{}.{id}", storage_name(finalizer));
    annotation_key(prefix, &name, CRON_SUFFIX)
}

/// The record of the cron timer `id` in earlier versions (`<prefix><id>.cron`, shared by every
/// operator with that prefix): read only when [`cron_key`]'s is absent.
#[must_use]
pub(crate) fn legacy_cron_key(prefix: &str, id: &str) -> String {
    annotation_key(prefix, id, CRON_SUFFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_names_tell_every_finalizer_apart() {
        #[rustfmt::skip]
        let rows = [
            ("kopf.dev/backup-operator", "backup-operator", "backup-operator"),
            ("a.example.com/finalizer", "a.example.com_finalizer", "finalizer"),
            ("b.example.com/finalizer", "b.example.com_finalizer", "finalizer"),
            ("plain", "plain", "plain"),
        ];
        for (finalizer, name, old) in rows {
            assert_eq!(storage_name(finalizer), name, "{finalizer}");
            assert_eq!(legacy_name(finalizer), old, "{finalizer}");
        }
        let derived = Keys::of_operator("kopf.dev/", "kopf.dev/op");
        assert_eq!(derived.progress, "kopf.dev/op.progress");
        assert_eq!(derived.legacy, None, "the same keys as before");
        let custom = Keys::of_operator("kopf.dev/", "a.example.com/finalizer");
        assert_eq!(custom.base, "kopf.dev/a.example.com_finalizer.last-handled");
        let old = custom.legacy.as_deref().map(|k| k.base.as_str());
        assert_eq!(old, Some("kopf.dev/finalizer.last-handled"));
        let other = Keys::of_operator("kopf.dev/", "b.example.com/finalizer");
        assert_ne!(custom.progress, other.progress);
    }

    #[test]
    fn cron_records_are_scoped_by_operator() {
        assert_eq!(
            cron_key("kopf.dev/", "kopf.dev/op", "backup"),
            "kopf.dev/op.backup.cron"
        );
        assert_ne!(
            cron_key("kopf.dev/", "kopf.dev/a", "backup"),
            cron_key("kopf.dev/", "kopf.dev/b", "backup")
        );
        assert_eq!(
            legacy_cron_key("kopf.dev/", "backup"),
            "kopf.dev/backup.cron"
        );
        // The old keys already on objects: a 41-character head and the id's FNV-1a hash.
        let long = "a".repeat(100);
        let hash = crate::core::hash::fnv64(long.as_bytes());
        let old = legacy_cron_key("kopf.dev/", &long);
        assert_eq!(old, format!("kopf.dev/{}-{hash:016x}.cron", "a".repeat(41)));
        let long = cron_key("kopf.dev/", "kopf.dev/op", &"x".repeat(80));
        assert_eq!(long.trim_start_matches("kopf.dev/").len(), 63);
    }
}
