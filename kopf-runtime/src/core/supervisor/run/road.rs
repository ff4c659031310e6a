//! The one road out of the supervisor for every handler kind's results: daemons, timers and
//! change handlers (and the handler kinds to come) hand what they produce to the [`Road`], and
//! nothing else in the supervisor sends an effect or writes to an object.
//!
//! ```text
//!  daemon / timer ─ output, failure ─▶ Road::send ──▶ Effect channel ─▶ adapter queue ─▶ write
//!  change handler ─ step to store ───▶ Road::store ─▶ output sink (awaited) ──────────▶ write
//!  lifecycle ────── finalizer, skip ─▶ Road::send
//! ```
//!
//! The output sink is given to the supervisor explicitly ([`SupervisorConfig::sink`]); without
//! one (tests of the core) a stored step lives in memory only.
//!
//! [`SupervisorConfig::sink`]: crate::core::supervisor::SupervisorConfig::sink

use serde_json::Value;
use tokio::sync::mpsc;

use crate::core::effects::Effect;
use crate::core::object::ObjectRef;
use crate::core::sink::{PatchError, PatchSinkHandle};

/// Where every handler's results leave the supervisor.
pub(crate) struct Road {
    effects: mpsc::UnboundedSender<Effect>,
    sink: Option<PatchSinkHandle>,
}

impl Road {
    /// A road sending effects on `effects` and storing steps through `sink`.
    pub(crate) fn new(
        effects: mpsc::UnboundedSender<Effect>,
        sink: Option<PatchSinkHandle>,
    ) -> Self {
        Self { effects, sink }
    }

    /// Sends `effect` to the adapter, in order with the object's other effects (a closed
    /// channel — the adapter stopped — drops it).
    pub(crate) fn send(&self, effect: Effect) {
        let _no_adapter_is_fine = self.effects.send(effect);
    }

    /// Writes `patch` to `object` before the caller goes on (a step that must be stored before
    /// the next begins). `None`: there is no sink, the step lives in memory only.
    ///
    /// # Cancellation safety
    /// Dropping the future may or may not leave the patch applied.
    pub(crate) async fn store(
        &self,
        object: &ObjectRef,
        patch: Value,
    ) -> Option<Result<(), PatchError>> {
        let sink = self.sink.as_ref()?;
        Some(sink.0.apply(object, patch).await)
    }

    /// Whether steps are stored anywhere (else computing them is pointless).
    pub(crate) fn stores(&self) -> bool {
        self.sink.is_some()
    }
}
