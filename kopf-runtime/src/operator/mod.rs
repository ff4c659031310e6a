//! The operator: connects the supervisor to a Kubernetes API server. It watches every resource
//! kind that has handlers, feeds the objects to one supervisor per kind, keeps the finalizer on
//! objects while their daemons and timers may run, writes results and patches, posts Events, and
//! serves health probes. Everything here is tested against a real kube-apiserver.

#[cfg(feature = "cli")]
mod args;
mod builder;
mod cap;
mod election;
mod error;
mod events;
mod handle;
mod health;
mod identity;
pub(crate) mod kind;
mod limits;
#[cfg(feature = "logging")]
mod logging;
pub(crate) mod metrics;
pub(crate) mod options;
mod replicas;
mod schema;
mod scope;
pub(crate) mod shard;
mod signals;
mod transport;
mod watched;
mod write;

#[cfg(feature = "cli")]
pub use args::{LeaseRef, OperatorArgs};
pub use builder::OperatorBuilder;
pub use election::fence::Fenced;
pub use election::{LeaderElection, Leadership, Role};
pub use error::OperatorError;
pub use events::{EventError, Events};
pub use handle::{KindStats, Operator, OperatorStats};
pub use health::WatchPhase;
pub use limits::RequestStats;
#[cfg(feature = "logging")]
pub use logging::{LogFormat, LoggingError, init_logging};
pub use shard::ranges::{SHARD_RANGES, shard_of};
pub use shard::{Membership, ShardWatch, Sharding};
