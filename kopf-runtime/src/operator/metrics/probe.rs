//! What the metrics read of one resource kind: narrow handles on the parts, taken at start-up.

use std::sync::Arc;

use super::super::health::KindHealth;
use super::super::write::records::Records;
use crate::core::resource::ResourceInfo;
use crate::core::supervisor::Supervisor;
use crate::core::supervisor::census::MeterReader;

/// What the metrics read of one resource kind.
#[derive(Debug)]
pub(crate) struct KindProbe {
    /// The kind, as the `resource` label.
    pub(super) resource: String,
    pub(super) meters: Option<MeterReader>,
    pub(super) records: Arc<Records>,
    pub(super) health: Arc<KindHealth>,
    pub(super) finalizer: Arc<str>,
}

impl KindProbe {
    pub(crate) fn new(
        info: &ResourceInfo,
        supervisor: &Supervisor,
        records: Arc<Records>,
        health: Arc<KindHealth>,
        finalizer: Arc<str>,
    ) -> Self {
        Self {
            resource: info.to_string(),
            meters: supervisor.meters(),
            records,
            health,
            finalizer,
        }
    }
}
