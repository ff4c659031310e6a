//! The operator: connects the supervisor to a Kubernetes API server. It watches every resource
//! kind that has handlers, feeds the objects to one supervisor per kind, keeps the finalizer on
//! objects while their daemons and timers may run, writes results and patches, posts Events, and
//! serves health probes. Everything here is tested against a real kube-apiserver.

#[cfg(feature = "cli")]
mod args;
mod builder;
mod cap;
pub(crate) mod children;
mod error;
mod events;
mod ha;
mod handle;
mod health;
mod identity;
pub(crate) mod kind;
mod limits;
#[cfg(feature = "logging")]
mod logging;
pub(crate) mod metrics;
pub(crate) mod options;
pub(crate) mod replicas;
mod schema;
mod scope;
mod signals;
mod start;
mod transport;
mod watched;
#[cfg(feature = "webhook")]
mod webhook;
mod write;

#[cfg(feature = "cli")]
pub use args::{LeaseRef, OperatorArgs};
pub use builder::OperatorBuilder;
pub use error::OperatorError;
pub use events::{EventError, Events};
pub use ha::election::LeaderElection;
pub use ha::fence::Fenced;
pub use ha::ranges::{SHARD_RANGES, shard_of};
pub use ha::report::{Leadership, Membership, Role};
pub use ha::sharding::{ShardWatch, Sharding};
pub use handle::{KindStats, Operator, OperatorStats};
pub use health::WatchPhase;
pub use limits::RequestStats;
#[cfg(feature = "logging")]
pub use logging::{LogFormat, LoggingError, init_logging};
#[cfg(feature = "webhook")]
pub use webhook::{WebhookError, Webhooks};
