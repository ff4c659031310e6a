//! Snapshots of a running operator, from [`Operator::stats`](crate::Operator::stats): per
//! resource kind ([`KindStats`]: where its watch is, a [`WatchPhase`]; how many objects; the
//! supervisor's counters), the requests of the operator's client ([`RequestStats`]), and this
//! replica's part in leader election or sharding ([`Leadership`](crate::ha::Leadership),
//! [`Membership`](crate::ha::Membership), in [`ha`](crate::ha)). The same numbers are served
//! on `/metrics`.
//!
//! ```no_run
//! use kopf_runtime::Operator;
//! use kopf_runtime::stats::{OperatorStats, WatchPhase};
//!
//! fn all_watching(stats: &OperatorStats) -> bool {
//!     stats.kinds.iter().all(|kind| kind.phase == WatchPhase::Watching)
//! }
//!
//! # async fn demo() -> Result<(), kopf_runtime::OperatorError> {
//! let operator = Operator::builder().start().await?;
//! println!("watching: {}", all_watching(&operator.stats()));
//! operator.shutdown().await;
//! # Ok(()) }
//! # let _ = demo;
//! ```

pub use crate::operator::{KindStats, OperatorStats, RequestStats, WatchPhase};
