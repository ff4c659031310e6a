//! What a children's or related objects' watch remembers of each object, and the rule of whom
//! an event triggers: per object UID only its resourceVersion and the targets it maps to (owner
//! UIDs, or owner names), never its body, and only for objects that map to some target.
//!
//! ```text
//!  first listing ──▶ remember, trigger nothing (every owner runs at start anyway)
//!  later event   ──▶ same resourceVersion as remembered? ── yes ──▶ nothing (a relist's echo)
//!                         │ no
//!                         ▼
//!                    trigger the targets it maps to now ∪ those it mapped to before
//!  deleted, or vanished at a relist ──▶ trigger the targets it mapped to
//! ```

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::Arc;

/// The remembered objects of one watch stream.
#[derive(Debug)]
pub(super) struct Known<T> {
    entries: HashMap<Arc<str>, Entry<T>>,
    /// The UIDs seen since the relist began (`None`: no relist under way).
    relist: Option<HashSet<Arc<str>>>,
    /// Whether the first listing is done.
    listed: bool,
}

#[derive(Debug)]
struct Entry<T> {
    resource_version: String,
    targets: Vec<T>,
}

impl<T> Default for Known<T> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            relist: None,
            listed: false,
        }
    }
}

impl<T: Clone + Eq + Hash> Known<T> {
    /// A listing begins (the first, or a relist after the watch was down).
    pub(super) fn list_begins(&mut self) {
        self.relist = Some(HashSet::new());
    }

    /// A version of the object `uid` (listed or watched) that maps to `targets`: the targets to
    /// trigger.
    pub(super) fn seen(&mut self, uid: &str, resource_version: &str, targets: Vec<T>) -> Vec<T> {
        let uid: Arc<str> = uid.into();
        if let Some(relist) = &mut self.relist {
            relist.insert(uid.clone());
        }
        let before = self.entries.get(&uid);
        if before.is_some_and(|e| e.resource_version == resource_version) {
            return Vec::new();
        }
        let mut trigger = if self.listed {
            targets.clone()
        } else {
            Vec::new()
        };
        if self.listed {
            for old in before.map(|e| e.targets.as_slice()).unwrap_or_default() {
                if !trigger.contains(old) {
                    trigger.push(old.clone());
                }
            }
        }
        if targets.is_empty() {
            self.entries.remove(&uid);
        } else {
            let resource_version = resource_version.to_owned();
            self.entries.insert(
                uid,
                Entry {
                    resource_version,
                    targets,
                },
            );
        }
        trigger
    }

    /// The object `uid` was deleted: the targets it mapped to.
    pub(super) fn deleted(&mut self, uid: &str) -> Vec<T> {
        self.entries
            .remove(uid)
            .map(|e| e.targets)
            .unwrap_or_default()
    }

    /// The listing is complete: the targets of the objects that vanished while the watch was
    /// down (none after the first listing).
    pub(super) fn list_done(&mut self) -> Vec<T> {
        let seen = self.relist.take().unwrap_or_default();
        self.listed = true;
        let gone: Vec<Arc<str>> = self
            .entries
            .keys()
            .filter(|uid| !seen.contains(*uid))
            .cloned()
            .collect();
        let mut trigger = Vec::new();
        for uid in gone {
            for target in self.deleted(&uid) {
                if !trigger.contains(&target) {
                    trigger.push(target);
                }
            }
        }
        trigger
    }

    /// How many objects are remembered.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::Known;

    /// One step of a watch stream, and the targets it must trigger.
    enum Step {
        Begin,
        Seen(&'static str, &'static str, &'static [&'static str]),
        Deleted(&'static str),
        Done,
    }
    use Step::{Begin, Deleted, Done, Seen};

    fn run(steps: &[(Step, &[&'static str])]) -> Known<&'static str> {
        let mut known = Known::default();
        for (i, (step, want)) in steps.iter().enumerate() {
            let mut got = match step {
                Begin => {
                    known.list_begins();
                    Vec::new()
                }
                Seen(uid, rv, targets) => known.seen(uid, rv, targets.to_vec()),
                Deleted(uid) => known.deleted(uid),
                Done => known.list_done(),
            };
            got.sort_unstable();
            assert_eq!(got, *want, "step {i}");
        }
        known
    }

    #[test]
    fn the_first_listing_triggers_nothing_later_events_trigger_their_owners() {
        #[rustfmt::skip]
        let known = run(&[
            (Begin,                        &[]),
            (Seen("c1", "1", &["o1"]),     &[]),
            (Seen("c2", "1", &[]),         &[]),   // owned by none of ours: not remembered
            (Done,                         &[]),
            (Seen("c1", "2", &["o1"]),     &["o1"]),
            (Seen("c1", "2", &["o1"]),     &[]),   // the same version again
            (Seen("c1", "3", &["o2"]),     &["o1", "o2"]), // moved: both owners hear of it
            (Seen("c3", "4", &["o1", "o2"]), &["o1", "o2"]),
            (Seen("c3", "5", &[]),         &["o1", "o2"]), // disowned: forgotten
            (Deleted("c1"),                &["o2"]),
            (Deleted("c2"),                &[]),
        ]);
        assert_eq!(known.len(), 0);
    }

    #[test]
    fn a_relist_triggers_what_changed_or_vanished_while_the_watch_was_down() {
        #[rustfmt::skip]
        let known = run(&[
            (Begin,                    &[]),
            (Seen("c1", "1", &["o1"]), &[]),
            (Seen("c2", "1", &["o2"]), &[]),
            (Seen("c3", "1", &["o3"]), &[]),
            (Done,                     &[]),
            // The watch was down; the relist:
            (Begin,                    &[]),
            (Seen("c1", "1", &["o1"]), &[]),       // unchanged
            (Seen("c2", "7", &["o2"]), &["o2"]),   // changed meanwhile
            (Seen("c4", "8", &["o4"]), &["o4"]),   // new
            (Done,                     &["o3"]),   // c3 vanished
        ]);
        assert_eq!(known.len(), 3);
    }
}
