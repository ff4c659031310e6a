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

/// What the metrics read of one watch that wakes reconcile handlers (children or related
/// objects of one kind).
#[derive(Debug)]
pub(crate) struct WatchProbe {
    /// The watched kind, as the `resource` label.
    pub(super) resource: String,
    /// `children` or `related`, as the `watch` label.
    pub(super) role: &'static str,
    pub(super) health: Arc<KindHealth>,
}

impl WatchProbe {
    pub(crate) fn new(info: &ResourceInfo, role: &'static str, health: Arc<KindHealth>) -> Self {
        Self {
            resource: info.to_string(),
            role,
            health,
        }
    }
}
