//! What this replica serves: every object (alone, or as the elected leader), none (a standby),
//! or the objects of some hash ranges (a member of a sharded group). Handlers run, finalizers,
//! outputs and Events are written only for the objects in scope.

use std::sync::Arc;

use tokio::sync::watch;

use crate::core::supervisor::InScope;
use crate::operator::ha::ranges::RangeSet;

/// The objects this replica serves now.
#[derive(Debug, Clone)]
pub(crate) enum Scope {
    /// Every object.
    All,
    /// None: a standby.
    Nothing,
    /// The objects whose UID hashes into these ranges.
    Ranges(Arc<RangeSet>),
}

impl Scope {
    /// Whether the object with this UID is served.
    pub(crate) fn covers(&self, uid: &str) -> bool {
        match self {
            Self::All => true,
            Self::Nothing => false,
            Self::Ranges(ranges) => ranges.covers(uid),
        }
    }

    /// The supervisor's scope (`None`: every object; a paused supervisor runs nothing anyway).
    pub(crate) fn in_scope(&self) -> Option<InScope> {
        match self {
            Self::All | Self::Nothing => None,
            Self::Ranges(ranges) => {
                let ranges = ranges.clone();
                Some(Arc::new(move |uid: &str| ranges.covers(uid)))
            }
        }
    }
}

/// What follows the scope: a resource kind.
pub(crate) trait Follower: Send + Sync {
    /// Serves `scope` from now on: handlers of objects out of it stop (through their stop
    /// ladders, with the reason "operator pausing"), handlers of objects newly in it start, and
    /// their finalizers are brought to what the handlers need.
    fn serve(self: Arc<Self>, scope: Scope);
    /// The UIDs of the objects whose handlers still run or stop, or whose outputs are not yet
    /// written or given up (a shard member releases none of their ranges).
    fn busy_uids(&self) -> Vec<Arc<str>>;
    /// How many objects it serves now.
    fn served(&self) -> usize;
}

/// Makes every follower serve what `scope_of` makes of each value of `source` (a role, or a
/// shard member's ranges), until the source ends.
///
/// # Cancellation safety
/// Cancel-safe: it only relays.
pub(crate) async fn follow<T>(
    mut source: watch::Receiver<T>,
    scope_of: impl Fn(&T) -> Scope,
    followers: Vec<Arc<dyn Follower>>,
) {
    loop {
        let scope = scope_of(&source.borrow_and_update());
        for follower in &followers {
            follower.clone().serve(scope.clone());
        }
        if source.changed().await.is_err() {
            return;
        }
    }
}
