//! How this replica works with the others: alone, as one of several under leader election
//! (one leads, the others stand by), or as a member of a sharded group (each serves a share).
//! The resource kinds follow whichever decides what they serve (see `scope.rs`).
//!
//! ```text
//!  replicas/mod.rs (Replicas: Alone | Elected | Sharded)
//!     ├──▶ election/  one Lease, one leader      ─┐ never import each other: what they
//!     └──▶ shard/     a Lease per member, claims ─┘ share is in ha/ (rules, fence, alarm)
//! ```

pub(crate) mod election;
pub(crate) mod shard;

use std::sync::{Arc, OnceLock};

use kube::Client;
use tokio_util::sync::CancellationToken;

use self::election::{Elector, scope_of};
use self::shard::member::Member;
use crate::core::clearance::Clearance;
use crate::operator::ha::alarm::LeaseReport;
use crate::operator::ha::election::LeaderElection;
use crate::operator::ha::fence::Fence;
use crate::operator::ha::report::{Leadership, Membership, ReplicaReport, Role};
use crate::operator::ha::sharding::{ShardWatch, Sharding};
use crate::operator::health::Detail;
use crate::operator::scope::{Follower, follow};

/// The coordination of this replica with the others.
#[derive(Debug)]
pub(crate) enum Replicas {
    /// The only replica: it serves every object.
    Alone,
    /// Leader election.
    Elected(Arc<Elector>),
    /// A member of a sharded group.
    Sharded(Arc<Member>),
}

impl Replicas {
    /// The coordination the options ask for (`fence`: the operator client's fence, set when
    /// either is on).
    pub(crate) fn new(
        election: Option<LeaderElection>,
        sharding: Option<Sharding>,
        lease_client: Client,
        fence: Option<Arc<Fence>>,
    ) -> Self {
        match (election, sharding, fence) {
            (Some(election), _, Some(fence)) => {
                Self::Elected(Arc::new(Elector::new(election, lease_client, fence)))
            }
            (None, Some(sharding), Some(fence)) => {
                Self::Sharded(Arc::new(Member::new(sharding, lease_client, fence)))
            }
            _ => Self::Alone,
        }
    }

    /// Until when invocations may start (`None`: always).
    pub(crate) fn clearance(&self) -> Option<Clearance> {
        match self {
            Self::Alone => None,
            Self::Elected(elector) => Some(elector.fence.clearance()),
            Self::Sharded(member) => Some(member.fence.clearance()),
        }
    }

    /// With sharding: the watch mode asked for, and where the mode used is recorded.
    pub(crate) fn sharding(&self) -> Option<(ShardWatch, Arc<OnceLock<ShardWatch>>)> {
        match self {
            Self::Sharded(member) => Some((member.watch_mode(), member.mode.clone())),
            _ => None,
        }
    }

    /// Starts coordinating: the kinds follow the role or the ranges until `stop`.
    pub(crate) fn start(&self, followers: Vec<Arc<dyn Follower>>, stop: &CancellationToken) {
        match self {
            Self::Alone => {}
            Self::Elected(elector) => {
                tokio::spawn(follow(
                    elector.roles(),
                    |role: &Role| scope_of(*role),
                    followers,
                ));
                tokio::spawn(elector.clone().run(stop.clone()));
            }
            Self::Sharded(member) => {
                member.set_followers(followers.clone());
                tokio::spawn(follow(member.ranges(), Member::scope_of, followers));
                tokio::spawn(member.clone().run(stop.clone()));
            }
        }
    }

    /// At shutdown, before the handlers stop: a standby no longer acquires, a member no longer
    /// claims or releases.
    pub(crate) fn retire(&self) {
        match self {
            Self::Alone => {}
            Self::Elected(elector) => elector.retire(),
            Self::Sharded(member) => member.retire(),
        }
    }

    /// After the handlers have stopped: gives up the Lease (and a member's ranges), so that the
    /// others take over at once.
    ///
    /// # Cancellation safety
    /// Dropping the future may leave them released or not (they then expire).
    pub(crate) async fn release(&self) {
        match self {
            Self::Alone => {}
            Self::Elected(elector) => elector.release().await,
            Self::Sharded(member) => member.release().await,
        }
    }

    /// At an exit that left handlers running or writes pending: stops leading or serving
    /// without giving anything up; the others take over once the Lease expires.
    pub(crate) fn leave(&self) {
        match self {
            Self::Alone => {}
            Self::Elected(elector) => elector.leave(),
            Self::Sharded(member) => member.leave(),
        }
    }

    /// Whether this replica coordinates with others (leader election or sharding).
    pub(crate) fn coordinated(&self) -> bool {
        !matches!(self, Self::Alone)
    }

    /// This replica's role as it changes, with leader election.
    #[cfg(feature = "webhook")]
    pub(crate) fn roles(&self) -> Option<tokio::sync::watch::Receiver<Role>> {
        match self {
            Self::Elected(elector) => Some(elector.roles()),
            _ => None,
        }
    }

    /// The role, with leader election.
    pub(crate) fn leadership(&self) -> Option<Leadership> {
        match self {
            Self::Elected(elector) => Some(elector.leadership()),
            _ => None,
        }
    }

    /// What `/readyz` adds: the role, or a member's ranges and objects; and the Lease's
    /// problems, if any.
    pub(crate) fn detail(&self) -> Option<Detail> {
        match self {
            Self::Alone => None,
            Self::Elected(elector) => {
                let elector = elector.clone();
                Some(Arc::new(move || elector.detail()))
            }
            Self::Sharded(member) => {
                let member = member.clone();
                Some(Arc::new(move || member.detail()))
            }
        }
    }

    /// What the metrics read of the coordination (`None`: alone).
    pub(crate) fn report(&self) -> Option<Arc<dyn ReplicaReport>> {
        match self {
            Self::Alone => None,
            Self::Elected(elector) => Some(elector.clone()),
            Self::Sharded(member) => Some(member.clone()),
        }
    }

    /// The ranges and members, with sharding.
    pub(crate) fn membership(&self) -> Option<Membership> {
        match self {
            Self::Sharded(member) => Some(member.membership()),
            _ => None,
        }
    }
}

impl ReplicaReport for Elector {
    fn leadership(&self) -> Option<Leadership> {
        Some(Self::leadership(self))
    }

    fn membership(&self) -> Option<Membership> {
        None
    }

    fn lease(&self) -> Option<LeaseReport> {
        Some(self.alarm.report())
    }
}

impl ReplicaReport for Member {
    fn leadership(&self) -> Option<Leadership> {
        None
    }

    fn membership(&self) -> Option<Membership> {
        Some(Self::membership(self))
    }

    fn lease(&self) -> Option<LeaseReport> {
        Some(self.alarm.report())
    }
}
