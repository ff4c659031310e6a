//! A member's graceful exit: once its handlers have stopped, it gives up its claims (and leaves a
//! quarantine that waits for it), then deletes its Lease, so that the others take its ranges at
//! their next round and no Lease is left behind.

use tokio::time::Instant;
use tracing::{info, warn};

use super::Member;
use crate::core::sync::lock;
use crate::operator::ha::ranges::RangeSet;
use crate::operator::replicas::shard::repair::{GroupState, annotations, lift};

impl Member {
    /// After the handlers have stopped: gives up this member's claims and deletes its Lease
    /// (releases it where it may not delete it), so that the others take its ranges at their
    /// next round instead of after the lease duration.
    ///
    /// # Cancellation safety
    /// Dropping the future may leave the claims or the Lease released or not (they expire).
    pub(crate) async fn release(&self) {
        let deadline = self.settings.lease.renew_deadline;
        match tokio::time::timeout(deadline, self.release_claims()).await {
            Ok(Ok(true)) => {}
            Ok(Ok(false)) | Err(_) => {
                warn!(
                    "sharding: could not release the claims; they pass on when the Lease expires"
                );
                return;
            }
            Ok(Err(err)) => {
                warn!(error = %err, "sharding: cannot release the claims; they pass on when the Lease expires");
                return;
            }
        }
        let Some(own) = lock(&self.seen).own.clone() else {
            return;
        };
        let name = self.leases.own_name();
        let deleted = tokio::time::timeout(deadline, self.leases.delete_own(&own)).await;
        let failed = match deleted {
            Ok(Ok(())) => {
                return info!(lease = %name,
                    "sharding: released this member's ranges and deleted its Lease");
            }
            Ok(Err(kube::Error::Api(status))) if status.code == 404 || status.code == 409 => {
                // Gone, or written by another process with this identity: not this one's.
                return info!(lease = %name, "sharding: released this member's ranges");
            }
            Ok(Err(err)) => err.to_string(),
            Err(_) => "timed out".to_owned(),
        };
        warn!(lease = %name, error = %failed,
            "sharding: cannot delete this member's Lease; releasing it instead");
        match tokio::time::timeout(deadline, self.leases.release(&own)).await {
            Ok(Ok(())) => info!(lease = %name, "sharding: released this member's ranges and Lease"),
            Ok(Err(err)) => {
                warn!(error = %err, "sharding: cannot release the Lease; it expires instead");
            }
            Err(_) => warn!("sharding: releasing the Lease timed out; it expires instead"),
        }
    }

    /// Removes this member's claims, and itself from a quarantine that waits for it (its
    /// handlers have stopped), a few tries on conflicts; `Ok(false)` if it could not.
    async fn release_claims(&self) -> Result<bool, kube::Error> {
        for _attempt in 0..5 {
            if !self.fence.allows(Instant::now()) {
                return Ok(false);
            }
            let Some(group) = self.leases.group().await? else {
                return Ok(false);
            };
            let mut state = GroupState::read(group.metadata.annotations.as_ref());
            if state.garbage.is_some() {
                return Ok(false); // the others repair it, waiting for this member's Lease
            }
            let mine = state.claims.held_by(&self.identity);
            let none = Default::default();
            let left =
                (state.quarantine.as_ref()).and_then(|q| lift(q, &self.identity, true, &none));
            if mine.is_empty() && left.is_none() {
                return Ok(true);
            }
            state.claims.release(&self.identity, &mine);
            let quarantine = left.unwrap_or(state.quarantine);
            self.serve(RangeSet::default());
            if !self.fence.allows(Instant::now()) {
                return Ok(false);
            }
            let set = annotations(&state.claims, quarantine.as_ref());
            let written = self.leases.write_group(group, &set);
            match written.await {
                Ok(()) => return Ok(true),
                Err(kube::Error::Api(status)) if status.code == 409 => {}
                Err(err) => return Err(err),
            }
        }
        Ok(false)
    }
}
