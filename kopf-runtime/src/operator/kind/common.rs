//! [`KindCommon`]: the parts of one served kind that both its state (`kind/mod.rs`) and the
//! operator's handle (`handle.rs`: stats, the drain and the finalizers' freeze at shutdown)
//! use. The state builds it once; both hold the same `Arc`.
//!
//! ```text
//!  KindState ──┐
//!              ├──▶ Arc<KindCommon> (info, supervisor, records, finalizers, queues)
//!  KindHandle ─┘
//! ```

use std::sync::Arc;

use super::queue::Queues;
use crate::core::resource::ResourceInfo;
use crate::core::supervisor::Supervisor;
use crate::operator::write::finalizer::Finalizers;
use crate::operator::write::records::Records;

/// The parts of a kind that the operator's handle uses too (for its stats, the drain of the
/// queues and the finalizers' freeze at shutdown): owned here once, shared with the handle.
#[derive(Debug)]
pub(crate) struct KindCommon {
    pub(crate) info: ResourceInfo,
    pub(crate) supervisor: Supervisor,
    /// What was last seen of each object.
    pub(crate) records: Arc<Records>,
    pub(crate) finalizers: Finalizers,
    pub(crate) queues: Arc<Queues>,
}
