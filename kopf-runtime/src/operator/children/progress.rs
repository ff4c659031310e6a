//! What a child or related watch stream reports to its health, as a kind's watch stream does
//! (`operator/kind/watch.rs`): its first initial list (readiness waits for it), its failures and
//! relists (the metrics count them), its end (liveness fails), and its pulse (a stream failing
//! or silent for longer than its bounds is down: not ready, then not alive).

use std::sync::Arc;

use kube::runtime::watcher::Event;

use crate::operator::health::{KindHealth, WatchPhase, pulse};

/// One watch stream's reports to its health.
pub(super) struct Progress {
    health: Arc<KindHealth>,
    /// The stream's first initial list is done.
    listed: bool,
}

impl Progress {
    /// A stream that starts listing now, and the client to watch through: it reports every
    /// answer to the stream's pulse.
    pub(super) fn start(health: &Arc<KindHealth>, client: &kube::Client) -> (Self, kube::Client) {
        if health.phase() != WatchPhase::Watching {
            health.set_phase(WatchPhase::Listing);
        }
        let client = pulse::observed(client, health.pulse());
        let progress = Self {
            health: health.clone(),
            listed: false,
        };
        (progress, client)
    }

    /// The stream failed (with `cause`, unless it merely expired); it restarts after a backoff.
    pub(super) fn failed(&self, cause: Option<String>) {
        self.health.watch_failed(cause);
    }

    /// The stream ended (it never does while the operator runs).
    pub(super) fn ended(&self) {
        self.health.mark_dead();
    }

    /// The stream delivered an event.
    pub(super) fn event<K>(&mut self, event: &Event<K>) {
        match event {
            Event::Init if self.listed => self.health.relisted(),
            Event::InitDone if !self.listed => {
                self.listed = true;
                self.health.list_done();
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(health: &Arc<KindHealth>) -> Progress {
        Progress {
            health: health.clone(),
            listed: false,
        }
    }

    #[test]
    fn watching_after_every_stream_listed_once() {
        let health = Arc::new(KindHealth::new("configmaps.v1 (children)".into(), 2));
        let (mut a, mut b) = (progress(&health), progress(&health));
        a.event::<()>(&Event::Init);
        a.event::<()>(&Event::InitDone);
        assert_ne!(
            health.phase(),
            WatchPhase::Watching,
            "one stream still lists"
        );
        b.event::<()>(&Event::Init);
        b.event::<()>(&Event::InitDone);
        assert_eq!(health.phase(), WatchPhase::Watching);
        assert_eq!(health.watch_counts(), (0, 0));
        // A failed stream restarts and relists; the list does not count twice.
        a.failed(Some("forbidden".into()));
        a.event::<()>(&Event::Init);
        a.event::<()>(&Event::InitDone);
        assert_eq!(health.watch_counts(), (1, 1));
        assert_eq!(health.phase(), WatchPhase::Watching);
    }
}
