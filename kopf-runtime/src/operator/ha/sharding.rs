//! The settings of sharding ([`Sharding`]): the group's Leases and timing, this member's
//! identity, and how its watches get its share ([`ShardWatch`]). What the settings mean at run
//! time is in `replicas/shard/`.

use std::time::Duration;

use super::election::LeaderElection;

/// How a member's watches get its share of the objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ShardWatch {
    /// The API server's `shardSelector` if it accepts it (checked at start-up, per kind), else
    /// client-side filtering.
    #[default]
    Auto,
    /// The API server's `shardSelector` (feature gate `ShardedListAndWatch`), without checking.
    Server,
    /// Watch every object and serve only the share (works with any API server).
    ClientSide,
}

/// Sharding settings for [`OperatorBuilder::sharding`](crate::OperatorBuilder::sharding): the
/// group's name and the namespace of its Leases, their timing (as for leader election), this
/// member's identity, and how its watches get its share.
///
/// ```
/// use std::time::Duration;
/// use kopf_runtime::ha::{ShardWatch, Sharding};
///
/// let sharding = Sharding::new("my-operator", "operators")
///     .lease_duration(Duration::from_secs(15))
///     .renew_deadline(Duration::from_secs(10))
///     .retry_period(Duration::from_secs(2))
///     .watch(ShardWatch::Auto);
/// # drop(sharding);
/// ```
#[derive(Debug, Clone)]
pub struct Sharding {
    /// The group's name and timing, and this member's identity.
    pub(crate) lease: LeaderElection,
    pub(crate) watch: ShardWatch,
}

impl Sharding {
    /// Shards over the group `name`: its Lease `name` (the claims) and one Lease per member,
    /// in `namespace` (created when missing); client-go's timing by default (15 s lease, 10 s
    /// renew deadline, 2 s retry period).
    pub fn new(name: impl Into<String>, namespace: impl Into<String>) -> Self {
        Self {
            lease: LeaderElection::new(name, namespace),
            watch: ShardWatch::Auto,
        }
    }

    /// How long the others wait, after they last saw a member's Lease change, before they take
    /// over its ranges (whole seconds, at least 1).
    #[must_use]
    pub fn lease_duration(mut self, duration: Duration) -> Self {
        self.lease = self.lease.lease_duration(duration);
        self
    }

    /// How long a member keeps serving after the start of its last successful renewal: past it,
    /// on its own monotonic clock, it stops every handler and its writes are refused. Shorter
    /// than the lease duration.
    #[must_use]
    pub fn renew_deadline(mut self, deadline: Duration) -> Self {
        self.lease = self.lease.renew_deadline(deadline);
        self
    }

    /// How often a member renews its Lease and re-plans its ranges. Shorter than the renew
    /// deadline.
    #[must_use]
    pub fn retry_period(mut self, period: Duration) -> Self {
        self.lease = self.lease.retry_period(period);
        self
    }

    /// This member's identity (default: `POD_NAME`, else the host name with a random suffix).
    /// Two members must never share one.
    #[must_use]
    pub fn identity(mut self, identity: impl Into<String>) -> Self {
        self.lease = self.lease.identity(identity);
        self
    }

    /// How the watches get this member's share (default [`ShardWatch::Auto`]).
    #[must_use]
    pub fn watch(mut self, mode: ShardWatch) -> Self {
        self.watch = mode;
        self
    }

    /// What cannot work, if anything.
    pub(crate) fn problem(&self) -> Option<&'static str> {
        if let Some(problem) = self.lease.problem() {
            return Some(problem);
        }
        let name = &self.lease.name;
        let label_value = name.len() <= 63
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
            && name.starts_with(|c: char| c.is_ascii_alphanumeric())
            && name.ends_with(|c: char| c.is_ascii_alphanumeric());
        (!label_value).then_some(
            "the group's name must be a valid label value (at most 63 letters, digits, '-', '.' \
             or '_', starting and ending with a letter or digit)",
        )
    }
}
