//! One member of a sharded group: its loop renews its own Lease, reads the group's claims, sees
//! which members live, and plans (see `claims.rs`); the ranges it may serve go to the resource
//! kinds through a watch channel. Garbage in the group's Lease is repaired (`repair.rs`,
//! [`upkeep`]), long-expired member Leases collected (`expiry.rs`), and the exit gives up the
//! claims and deletes the member's Lease ([`exit`]).

mod exit;
mod upkeep;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::claims::{Claims, Plan, Round, plan};
use super::expiry::{self, Collector};
use super::leases::GroupLeases;
use super::repair::{GroupState, Warned};
use crate::core::sync::lock;
use crate::operator::ha::alarm::{LeaseAlarm, describe};
use crate::operator::ha::fence::Fence;
use crate::operator::ha::lease::{Claimant, Decision, Observed, Record, decide};
use crate::operator::ha::ranges::{RangeSet, SHARD_RANGES};
use crate::operator::ha::report::Membership;
use crate::operator::ha::sharding::{ShardWatch, Sharding};
use crate::operator::scope::{Follower, Scope};

/// What a member has seen.
#[derive(Debug, Default)]
struct Seen {
    /// Each member's Lease as last read, and since when it has not changed (local clock).
    leases: HashMap<String, Observed>,
    /// The live members, sorted.
    live: Vec<String>,
    /// Whether a write of this validity period confirmed this member's claims.
    confirmed: bool,
    /// The Lease of this member as last written (for the release).
    own: Option<Lease>,
    /// This member's Lease as last read, and since when it has not changed (local clock).
    own_read: Option<Observed>,
    /// How many times it has listed the members' Leases.
    listings: u64,
    /// What the last round left to do: ranges to release once quiet, ranges to wait for.
    pending: Option<(RangeSet, RangeSet)>,
    /// The garbage in the group's Lease already warned about.
    warned: Warned,
}

/// How often a member that hands ranges over checks whether their handlers have stopped.
const QUIET_POLL: Duration = Duration::from_millis(50);

/// Runs one member of a group.
pub(crate) struct Member {
    settings: Sharding,
    identity: String,
    /// This member's identity and this process's incarnation.
    me: Claimant,
    leases: GroupLeases,
    /// The problems of this member's Lease.
    pub(crate) alarm: LeaseAlarm,
    /// The fence of the operator's own client.
    pub(crate) fence: Arc<Fence>,
    /// The ranges served now.
    serving: watch::Sender<Arc<RangeSet>>,
    followers: OnceLock<Vec<Arc<dyn Follower>>>,
    seen: Mutex<Seen>,
    retiring: AtomicBool,
    /// The watch mode the kinds use.
    pub(crate) mode: Arc<OnceLock<ShardWatch>>,
    /// Deletes the group's member Leases that expired long ago.
    collector: Collector,
}

impl std::fmt::Debug for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Member")
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

impl Member {
    pub(crate) fn new(settings: Sharding, client: Client, fence: Arc<Fence>) -> Self {
        let me = Claimant::random(settings.lease.resolved_identity());
        let lease = &settings.lease;
        let leases = GroupLeases::new(
            client,
            &lease.namespace,
            &lease.name,
            me.clone(),
            lease.lease_duration,
        );
        let alarm = LeaseAlarm::new(&lease.namespace, leases.own_name());
        Self {
            leases,
            alarm,
            settings,
            identity: me.identity.clone(),
            me,
            fence,
            serving: watch::Sender::new(Arc::new(RangeSet::default())),
            followers: OnceLock::new(),
            seen: Mutex::new(Seen::default()),
            retiring: AtomicBool::new(false),
            mode: Arc::default(),
            collector: Collector::default(),
        }
    }

    /// The watch mode asked for.
    pub(crate) fn watch_mode(&self) -> ShardWatch {
        self.settings.watch
    }

    /// The ranges served now and their changes.
    pub(crate) fn ranges(&self) -> watch::Receiver<Arc<RangeSet>> {
        self.serving.subscribe()
    }

    /// What the kinds serve for a set of ranges.
    pub(crate) fn scope_of(ranges: &Arc<RangeSet>) -> Scope {
        if ranges.is_empty() {
            Scope::Nothing
        } else {
            Scope::Ranges(ranges.clone())
        }
    }

    /// The kinds whose busy objects hold back a release.
    pub(crate) fn set_followers(&self, followers: Vec<Arc<dyn Follower>>) {
        let _first = self.followers.set(followers);
    }

    /// Where this member stands.
    pub(crate) fn membership(&self) -> Membership {
        let ranges = self.serving.borrow().clone();
        Membership {
            identity: self.identity.clone(),
            members: lock(&self.seen).live.clone(),
            ranges: ranges.to_string(),
            held: ranges.len(),
            objects: self
                .followers
                .get()
                .into_iter()
                .flatten()
                .map(|f| f.served())
                .sum(),
            watch: self.mode.get().copied(),
        }
    }

    /// What `/readyz` adds: the membership, and the Lease's problems if any.
    pub(crate) fn detail(&self) -> String {
        let mut line = self.membership().to_string();
        if let Some(problem) = self.alarm.line() {
            line.push_str("; ");
            line.push_str(&problem);
        }
        line
    }

    /// Renews, reads and plans every retry period until `stop`.
    ///
    /// # Cancellation safety
    /// Meant to run in its own task; cancelling it leaves the Lease to expire (the fence closes
    /// on time by itself, and the kinds stop serving when it does).
    pub(crate) async fn run(self: Arc<Self>, stop: CancellationToken) {
        let lease = &self.settings.lease;
        info!(group = %lease.name, namespace = %lease.namespace, identity = %self.identity,
            "sharding: joining the group; serving nothing until this member holds ranges");
        loop {
            let started = Instant::now();
            let round = tokio::time::timeout(lease.renew_deadline, self.round(started));
            tokio::select! {
                () = stop.cancelled() => return,
                outcome = round => match outcome {
                    Ok(Ok(())) => self.alarm.worked(),
                    Ok(Err(err)) => self.alarm.failed(&describe(&err, &lease.namespace)),
                    Err(_) => self.alarm.failed("a Lease request timed out"),
                },
                () = self.lapse() => {}
            }
            self.check_validity();
            tokio::select! {
                () = stop.cancelled() => return,
                () = self.until_next_round() => {}
                () = self.lapse() => {}
            }
            self.check_validity();
        }
    }

    /// Waits until the next round is due: at once when the ranges it hands over went quiet,
    /// after a quarter of the retry period while it waits for ranges of its target, else after
    /// the retry period. So a handover takes the stop ladders and a fraction of a retry period,
    /// not several periods.
    async fn until_next_round(&self) {
        let period = self.settings.lease.retry_period;
        let pending = lock(&self.seen).pending.take();
        let Some((releasing, waiting)) = pending else {
            return tokio::time::sleep(period).await;
        };
        let deadline = Instant::now()
            + if waiting.is_empty() {
                period
            } else {
                period / 4
            };
        if releasing.is_empty() {
            return tokio::time::sleep_until(deadline).await;
        }
        while Instant::now() < deadline {
            if self.busy().intersection(&releasing).is_empty() {
                return;
            }
            tokio::time::sleep(QUIET_POLL.min(period)).await;
        }
    }

    /// Resolves when this member's validity lapses (never while it serves nothing).
    async fn lapse(&self) {
        match self.fence.valid_until() {
            Some(until) => tokio::time::sleep_until(until).await,
            None => std::future::pending().await,
        }
    }

    fn check_validity(&self) {
        if self.fence.valid_until().is_some() && !self.fence.allows(Instant::now()) {
            self.fence.close();
            lock(&self.seen).confirmed = false;
            if !self.serving.borrow().is_empty() {
                warn!(identity = %self.identity,
                    "sharding: this member's Lease was not renewed within the renew deadline: \
                     stopping every handler; writes are refused");
            }
            self.serve(RangeSet::default());
        }
    }

    /// One round: renew, read the claims, read the members, plan, write, serve.
    async fn round(&self, started: Instant) -> Result<(), kube::Error> {
        if !self.renew(started).await? {
            return Ok(());
        }
        let Some(group) = self.leases.group().await? else {
            return Ok(());
        };
        let state = GroupState::read(group.metadata.annotations.as_ref());
        let (live, expired) = self.members(&state).await?;
        if state.garbage.is_some() {
            return self.repair(group, &state, &live).await;
        }
        let claims = &state.claims;
        let mut serving = self.serving.borrow().clone();
        let held = claims.held_by(&self.identity);
        if !serving.minus(&held).is_empty() {
            // Only an edited or deleted group Lease takes ranges away from a valid member.
            warn!(identity = %self.identity, lost = %serving.minus(&held),
                "sharding: the claims no longer show ranges this member serves: stopping them");
            self.serve(serving.intersection(&held));
            serving = self.serving.borrow().clone();
        }
        let confirm = !lock(&self.seen).confirmed;
        let quiet = if self.retiring.load(Ordering::SeqCst) {
            RangeSet::default() // nothing is released or claimed while exiting
        } else {
            RangeSet::full().minus(&serving).minus(&self.busy())
        };
        if self.lift(&group, &state, &quiet, &expired).await? {
            return Ok(()); // the next round plans on what was written
        }
        let own = self.settings.lease.lease_duration;
        let valid = || self.fence.allows(Instant::now());
        let named = state.named();
        let collected = self.collector.collect(&self.leases, &named, own, valid);
        if let Err(err) = collected.await {
            debug!(error = %err, "sharding: cannot collect expired member Leases now");
        }
        let blocked = state.blocked();
        let claim = lock(&self.seen).listings > 1;
        let round = Round {
            me: &self.identity,
            claims,
            live: &live,
            expired: &expired,
            quiet: &quiet,
            blocked: &blocked,
            confirm,
            claim,
        };
        let Plan {
            write,
            serve,
            keep,
            releasing,
            waiting,
        } = plan(&round);
        // Before its first claims, a member looks again soon (as while waiting for ranges).
        let waiting = if claim { waiting } else { RangeSet::full() };
        let more = !releasing.is_empty() || !waiting.is_empty();
        lock(&self.seen).pending = more.then_some((releasing, waiting));
        if self.retiring.load(Ordering::SeqCst) {
            return Ok(()); // claims stay until the release
        }
        let Some(next) = write else {
            self.serve(serve);
            return Ok(());
        };
        match self.write_claims(group, &next).await {
            Ok(true) => {
                lock(&self.seen).confirmed = true;
                self.serve(serve);
            }
            Ok(false) => {} // lapsed: the validity check stops everything
            Err(kube::Error::Api(status)) if status.code == 409 => {
                debug!("sharding: the claims changed meanwhile; planning again");
                if !confirm {
                    self.serve(keep.intersection(&serving));
                }
            }
            Err(err) => {
                if !confirm {
                    self.serve(keep.intersection(&serving));
                }
                return Err(err);
            }
        }
        Ok(())
    }

    /// Renews this member's Lease; `Ok(true)` when it is valid now.
    async fn renew(&self, started: Instant) -> Result<bool, kube::Error> {
        let Some(written) = self.leases.renew(|current| self.may_renew(current)).await? else {
            return Ok(false);
        };
        let until = started + self.settings.lease.renew_deadline;
        if until <= Instant::now() {
            return Ok(false); // the renewal came back too late to count
        }
        if !self.fence.allows(Instant::now()) {
            lock(&self.seen).confirmed = false; // a new validity period
        }
        lock(&self.seen).own = Some(written);
        self.fence.extend(until);
        Ok(true)
    }

    /// Whether this member may renew its Lease as read: not while another process with its
    /// identity holds it (until that one's Lease expires), so two members with one identity
    /// never serve the same ranges.
    fn may_renew(&self, current: &Lease) -> bool {
        let record = Record::of(current);
        let now = Instant::now();
        let mut seen = lock(&self.seen);
        let renewed = (seen.own_read.as_ref()).is_some_and(|read| read.record != record);
        let observed = Observed::update(seen.own_read.take(), record, now);
        let decision = decide(&observed, &self.me, self.settings.lease.lease_duration, now);
        let other = observed.record.incarnation.clone().unwrap_or_default();
        seen.own_read = Some(observed);
        drop(seen);
        match decision {
            Decision::Take => {
                self.alarm.no_twin();
                true
            }
            Decision::Wait { twin, .. } => {
                if twin {
                    self.alarm.twin(&self.identity, &other, renewed);
                }
                false
            }
        }
    }

    /// Reads the members' Leases: the live members (sorted) and the expired ones.
    async fn members(
        &self,
        state: &GroupState,
    ) -> Result<(Vec<String>, BTreeSet<String>), kube::Error> {
        let records = self.leases.records(state.named()).await?;
        let own = self.settings.lease.lease_duration;
        let now = Instant::now();
        let mut seen = lock(&self.seen);
        let previous = std::mem::take(&mut seen.leases);
        let mut live = Vec::new();
        let mut expired = BTreeSet::new();
        for (member, record) in records {
            let observed = Observed::update(previous.get(&member).cloned(), record, now);
            if member == self.identity {
                if self.fence.allows(now) {
                    live.push(member.clone());
                }
            } else if expiry::live(&observed, own, now) {
                live.push(member.clone());
            } else {
                // Released, or unchanged for its (trusted) duration on this member's clock.
                let stand_in = observed.record.version.is_none();
                if stand_in && seen.warned.first_key(format!("no Lease\n{member}")) {
                    warn!(lease = %self.group_lease(), member = %member,
                        "sharding: the group's Lease is garbled: it names a member that has no \
                         Lease; that member counts as expired");
                }
                expired.insert(member.clone());
            }
            seen.leases.insert(member, observed);
        }
        live.sort();
        seen.live.clone_from(&live);
        seen.listings += 1;
        Ok((live, expired))
    }

    /// Writes the claims, guarded by the version of `group` as read; `Ok(false)` if this
    /// member's validity lapsed meanwhile (nothing sent).
    async fn write_claims(&self, group: Lease, claims: &Claims) -> Result<bool, kube::Error> {
        if !self.fence.allows(Instant::now()) {
            return Ok(false);
        }
        self.leases
            .write_group(group, &[claims.annotation()])
            .await?;
        Ok(true)
    }

    /// The ranges in which handlers of this member still run or stop.
    fn busy(&self) -> RangeSet {
        let mut busy = RangeSet::default();
        for follower in self.followers.get().into_iter().flatten() {
            for uid in follower.busy_uids() {
                busy.insert(crate::operator::ha::ranges::shard_of(&uid));
            }
        }
        busy
    }

    /// Serves `ranges` from now on (the kinds follow).
    fn serve(&self, ranges: RangeSet) {
        if **self.serving.borrow() == ranges {
            return;
        }
        info!(identity = %self.identity, ranges = %ranges, held = ranges.len(),
            of = SHARD_RANGES, "sharding: this member serves new ranges");
        self.serving.send_replace(Arc::new(ranges));
    }

    /// At shutdown, before the handlers stop: no more claims or releases until [`release`](Self::release).
    pub(crate) fn retire(&self) {
        self.retiring.store(true, Ordering::SeqCst);
    }

    /// At an exit whose handlers did not all stop or whose writes did not drain: stops serving
    /// (its writes are refused) without giving up its claims or its Lease, so that no other
    /// member starts the same handlers before the Lease expires.
    pub(crate) fn leave(&self) {
        self.fence.close();
    }
}
