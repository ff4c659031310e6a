//! Outputs on their way (opt-in: the operator tracks them): an object whose `Output` effect
//! was sent and not yet written or given up by the adapter counts as busy
//! ([`Supervisor::busy_uids`](crate::core::supervisor::Supervisor::busy_uids)), from the moment it is sent, under the lock that also sees its
//! instance exit. So a shard member never hands a range over while a handler's result or a
//! cron run's record is still in the effects channel or the object's write queue: the next
//! member would not see it, and would run that occurrence again.
//!
//! ```text
//!  instance: run ──▶ emit Output (count +1) ──▶ exit
//!  adapter:                 recv ──▶ queue ──▶ write / give up ──▶ settle (count −n)
//!  busy:     ├──────────── instance ───────────┤
//!                           ├──────────── output counted ───────────────────┤
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use crate::core::effects::Effect;

/// Counts by object UID.
type Counts = HashMap<Arc<str>, u32, foldhash::fast::RandomState>;

/// The count of outputs sent and not settled, per object (only while tracked).
#[derive(Default)]
pub(crate) struct PendingOutputs(Option<Counts>);

impl PendingOutputs {
    /// Counts `effect` if it is an output and outputs are tracked.
    pub(crate) fn sent(&mut self, uid: &Arc<str>, effect: &Effect) {
        if let (Some(counts), Effect::Output { .. }) = (&mut self.0, effect) {
            *counts.entry(Arc::clone(uid)).or_default() += 1;
        }
    }

    /// The objects with outputs not settled.
    pub(crate) fn uids(&self) -> impl Iterator<Item = &Arc<str>> {
        self.0.iter().flat_map(|counts| counts.keys())
    }

    /// Counts every output from now on (the first call turns tracking on).
    pub(crate) fn track(&mut self) {
        if self.0.is_none() {
            self.0 = Some(Counts::default());
        }
    }

    /// `outputs` outputs of the object `uid` were written, or given up.
    pub(crate) fn settle(&mut self, uid: &str, outputs: u32) {
        let Some(counts) = &mut self.0 else {
            return;
        };
        if let Some(count) = counts.get_mut(uid) {
            *count = count.saturating_sub(outputs);
            if *count == 0 {
                counts.remove(uid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::core::effects::Effect;
    use crate::core::erased::{Call, ErasedHandler, Invocation, MatchError, Output, Services};
    use crate::core::object::ObjectState;
    use crate::core::outcome::HandlerError;
    use crate::core::spec::{HandlerKind, HandlerSpec};
    use crate::core::supervisor::{Supervisor, SupervisorConfig};

    /// A daemon that returns a result at once (and is not restarted).
    struct Once;
    static SPEC: HandlerSpec = HandlerSpec::new("once", HandlerKind::Daemon);
    impl ErasedHandler for Once {
        fn spec(&self) -> &'static HandlerSpec {
            &SPEC
        }
        fn matches(&self, _: &ObjectState) -> Result<bool, MatchError> {
            Ok(true)
        }
        fn invoke(&self, _: Invocation) -> Result<Call, HandlerError> {
            Ok(Call::Async(Box::pin(async {
                let result = Some(serde_json::json!("done"));
                Ok(Output {
                    result,
                    patch: None,
                })
            })))
        }
    }

    /// A supervisor of `Once` that saw `u1`, after the daemon's output was sent and its
    /// instance exited.
    async fn after_the_output(track: bool) -> Supervisor {
        let (supervisor, mut effects) = Supervisor::new(
            vec![Arc::new(Once)],
            Services::default(),
            SupervisorConfig::default(),
        );
        if track {
            supervisor.track_outputs();
        }
        let meta = serde_json::json!({"name": "a", "namespace": "ns", "uid": "u1"});
        let object = ObjectState::from_json(serde_json::json!({ "metadata": meta }));
        supervisor.observe(object.expect("an object"));
        let mut output = false;
        // The last effect: the finalizer released once the instance is over.
        while let Some(effect) = effects.recv().await {
            output |= matches!(effect, Effect::Output { .. });
            if matches!(effect, Effect::Finalizer { hold: false, .. }) {
                break;
            }
        }
        assert!(output, "the daemon's output was sent");
        supervisor
    }

    #[tokio::test(start_paused = true)]
    async fn an_output_keeps_its_object_busy_after_the_instance_exited_until_settled() {
        let supervisor = after_the_output(true).await;
        assert_eq!(supervisor.busy_uids(), vec![Arc::<str>::from("u1")]);
        supervisor.outputs_settled("u1", 1);
        assert!(supervisor.busy_uids().is_empty());
    }

    /// A daemon that returns a result once asked to stop.
    struct UntilStopped;
    static UNTIL_STOPPED: HandlerSpec = HandlerSpec::new("until-stopped", HandlerKind::Daemon);
    impl ErasedHandler for UntilStopped {
        fn spec(&self) -> &'static HandlerSpec {
            &UNTIL_STOPPED
        }
        fn matches(&self, _: &ObjectState) -> Result<bool, MatchError> {
            Ok(true)
        }
        fn invoke(&self, inv: Invocation) -> Result<Call, HandlerError> {
            Ok(Call::Async(Box::pin(async move {
                inv.stopper.stopped().await;
                let result = Some(serde_json::json!("last words"));
                Ok(Output {
                    result,
                    patch: None,
                })
            })))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_output_of_a_released_objects_stopping_instance_is_still_sent() {
        let (supervisor, mut effects) = Supervisor::new(
            vec![Arc::new(UntilStopped)],
            Services::default(),
            SupervisorConfig::default(),
        );
        supervisor.track_outputs();
        let meta = serde_json::json!({"name": "a", "namespace": "ns", "uid": "u1"});
        let object = ObjectState::from_json(serde_json::json!({ "metadata": meta }));
        supervisor.observe(object.expect("an object"));
        tokio::time::sleep(std::time::Duration::from_secs(1)).await; // the daemon runs
        // Another replica serves it now: the daemon stops and returns its result.
        supervisor.release("u1");
        let mut output = false;
        while let Ok(Some(effect)) =
            tokio::time::timeout(std::time::Duration::from_secs(60), effects.recv()).await
        {
            output |= matches!(effect, Effect::Output { .. });
        }
        assert!(output, "the output of the released object was sent");
        assert_eq!(supervisor.busy_uids(), vec![Arc::<str>::from("u1")]);
        supervisor.outputs_settled("u1", 1);
        assert!(supervisor.busy_uids().is_empty());
        // Positive control: the object itself is gone from the supervisor.
        assert!(supervisor.tracked_uids().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn untracked_outputs_do_not_count() {
        let supervisor = after_the_output(false).await;
        assert!(supervisor.busy_uids().is_empty());
        supervisor.outputs_settled("u1", 1); // nothing to settle
        assert!(supervisor.busy_uids().is_empty());
    }
}
