//! Indexes of a served kind, fed by the kind's own watch in lockstep with its handlers: every
//! version reaches the kind's indexes before the supervisor, so a handler given version N of an
//! object reads an index that already holds version N of it (and of every object listed or
//! watched before it). An index gets a watch of its own instead (`operator/children/index.rs`)
//! when the kind's watch does not see every object the index needs: with a label selector or
//! sharding, or for a kind the operator serves no handler of.
//!
//! ```text
//!  the kind's watch ─► Lockstep::apply ─► ErasedIndex::apply ─► supervisor.observe (handlers)
//!        └─ Delete / vanished at a relist ─► Lockstep::remove ─► records.mark_gone
//!        └─ first InitDone of each stream ─► Lockstep::listed (filled after the last one)
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;

use tracing::warn;

use crate::core::object::{ObjectRef, ObjectState};
use crate::core::resource::ResourceInfo;
use crate::handler::ErasedIndex;

/// An index the operator keeps, with the kind it is made of.
pub(crate) type Indexed = (ResourceInfo, Arc<dyn ErasedIndex>);

/// Indexes, as the operator keeps them.
pub(crate) type Indexes = Vec<Arc<dyn ErasedIndex>>;

/// The indexes fed by each served kind's watch.
pub(crate) type Fed = BTreeMap<ResourceInfo, Indexes>;

/// The indexes of one served kind kept from its watch (none: nothing to do).
#[derive(Default)]
pub(crate) struct Lockstep(Indexes);

impl std::fmt::Debug for Lockstep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lockstep")
            .field("indexes", &self.0.len())
            .finish()
    }
}

impl Lockstep {
    /// These indexes, filled once each of the kind's `streams` has listed once.
    pub(crate) fn new(indexes: Indexes, streams: usize) -> Self {
        for index in &indexes {
            index.expect_lists(streams);
        }
        Self(indexes)
    }

    /// Whether it keeps no index.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// A version of an object (listed or watched), before its handlers see it.
    pub(crate) fn apply(&self, state: &ObjectState, kind: &ResourceInfo) {
        for index in &self.0 {
            if let Err(problem) = index.apply(state) {
                warn!(resource = %kind, "{problem}");
            }
        }
    }

    /// An object deleted, or gone from a relist.
    pub(crate) fn remove(&self, object: &ObjectRef) {
        for index in &self.0 {
            index.remove(object);
        }
    }

    /// One of the kind's streams listed for the first time.
    pub(crate) fn listed(&self) {
        for index in &self.0 {
            index.listed();
        }
    }
}

/// The indexes by the served kind whose watch feeds them (when `lockstep` is possible: no label
/// selector, no sharding), and the others, which get watches of their own.
pub(crate) fn split(
    indexes: Vec<Indexed>,
    served: &[&ResourceInfo],
    lockstep: bool,
) -> (Fed, Vec<Indexed>) {
    let mut fed = Fed::new();
    let mut own = Vec::new();
    for (info, index) in indexes {
        if lockstep && served.contains(&&info) {
            fed.entry(info).or_default().push(index);
        } else {
            own.push((info, index));
        }
    }
    (fed, own)
}
