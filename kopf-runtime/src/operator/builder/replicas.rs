//! The builder's setters for several replicas: leader election or sharding. Their settings are
//! in `ha/`; what they do at run time is in `replicas/`.

use super::OperatorBuilder;
use crate::operator::ha::election::LeaderElection;
use crate::operator::ha::sharding::Sharding;

impl OperatorBuilder {
    /// Runs as one of several replicas, of which the one holding the Lease leads: it runs the
    /// handlers and writes; the others watch (their caches stay warm), run nothing and write
    /// nothing, and take over when the leader stops renewing. The leader pauses every handler
    /// the moment its lease lapses on its own clock, and its client refuses every write from
    /// then on ([`Fenced`](crate::ha::Fenced)). On a graceful exit it stops its handlers first and
    /// then releases the Lease. Needs a client the operator builds itself (not
    /// [`client`](Self::client)). See `docs/high-availability.md`.
    ///
    /// ```
    /// use kopf_runtime::ha::LeaderElection;
    /// let builder = kopf_runtime::Operator::builder()
    ///     .leader_election(LeaderElection::new("my-operator", "operators"));
    /// # drop(builder);
    /// ```
    pub fn leader_election(mut self, election: LeaderElection) -> Self {
        self.options.leader_election = Some(election);
        self
    }

    /// Runs as one member of a sharded group: the objects of every served kind are spread over
    /// the group's live members by the hash of their UID, and each member runs the handlers of
    /// its share only. A share moves to another member only after its holder stopped every
    /// handler in it (or its Lease expired), so no daemon ever runs twice; finalizers, results
    /// and Events are written by the holder only. With an API server that supports
    /// `shardSelector`, each member watches only its share. Not combined with
    /// [`leader_election`](Self::leader_election); needs a client the operator builds itself.
    /// See `docs/high-availability.md`.
    ///
    /// ```
    /// use kopf_runtime::ha::Sharding;
    /// let builder = kopf_runtime::Operator::builder()
    ///     .sharding(Sharding::new("my-operator", "operators"));
    /// # drop(builder);
    /// ```
    pub fn sharding(mut self, sharding: Sharding) -> Self {
        self.options.sharding = Some(sharding);
        self
    }
}
