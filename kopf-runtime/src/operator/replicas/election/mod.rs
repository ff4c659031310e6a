//! Leader election over a `coordination.k8s.io/v1` Lease: several replicas run, one leads. The
//! leader runs the handlers and writes; a standby watches (its cache stays warm) and writes
//! nothing. See `docs/high-availability.md` for the timelines.
//!
//! ```text
//!  standby ── attempt every retry_period ──▶ Take ──▶ leader (handlers resume, fence open
//!     ▲                                                until attempt start + renew_deadline)
//!     │                                                   │ renew every retry_period
//!     └── pause, fence closed ◀── renew_deadline passed on the local clock,
//!                                 or the Lease seen held by another replica
//!  leader, graceful exit: handlers stopped (ladders) ──▶ Lease released ──▶ a standby takes it
//!                                                                         at its next attempt
//! ```
//!
//! "Another replica" includes another process with this replica's identity: each process
//! writes its own incarnation beside the identity (`ha/lease.rs`), so two processes given one
//! identity never both lead. What keeps a replica from leading for good (a Lease it cannot read
//! or write, a twin identity) is warned about and reported in `/readyz` and the metrics
//! (`ha/alarm.rs`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::core::sync::lock;
use crate::operator::ha::alarm::{LeaseAlarm, describe};
use crate::operator::ha::election::LeaderElection;
use crate::operator::ha::fence::Fence;
use crate::operator::ha::lease::{
    Claimant, Decision, LeaseApi, Observed, Record, claimed, decide, released,
};
use crate::operator::ha::report::{Leadership, Role};
use crate::operator::scope::Scope;

/// What a replica in this role serves.
pub(crate) fn scope_of(role: Role) -> Scope {
    match role {
        Role::Leader => Scope::All,
        Role::Standby => Scope::Nothing,
    }
}

/// Runs the election of one replica.
#[derive(Debug)]
pub(crate) struct Elector {
    settings: LeaderElection,
    /// This replica's identity and this process's incarnation.
    me: Claimant,
    lease: LeaseApi,
    /// The Lease's problems.
    pub(crate) alarm: LeaseAlarm,
    /// The fence of the operator's own client.
    pub(crate) fence: Arc<Fence>,
    role: watch::Sender<Role>,
    holder: Mutex<Option<String>>,
    /// The Lease as last written by this replica (for the release).
    written: Mutex<Option<Lease>>,
    /// Set at shutdown: a standby no longer acquires.
    retiring: AtomicBool,
}

impl Elector {
    pub(crate) fn new(settings: LeaderElection, client: Client, fence: Arc<Fence>) -> Self {
        let me = Claimant::random(settings.resolved_identity());
        let lease = LeaseApi::new(client, &settings.namespace, &settings.name);
        let alarm = LeaseAlarm::new(&settings.namespace, &settings.name);
        Self {
            settings,
            me,
            lease,
            alarm,
            fence,
            role: watch::Sender::new(Role::Standby),
            holder: Mutex::new(None),
            written: Mutex::new(None),
            retiring: AtomicBool::new(false),
        }
    }

    /// The role now and its changes.
    pub(crate) fn roles(&self) -> watch::Receiver<Role> {
        self.role.subscribe()
    }

    /// Where this replica stands.
    pub(crate) fn leadership(&self) -> Leadership {
        let report = self.alarm.report();
        Leadership {
            role: *self.role.borrow(),
            identity: self.me.identity.clone(),
            holder: lock(&self.holder).clone(),
            lease_errors: report.errors,
            lease_error: report.failing,
            identity_conflict: report.twin,
        }
    }

    /// What `/readyz` adds: the role, and the Lease's problems if any.
    pub(crate) fn detail(&self) -> String {
        let role = match *self.role.borrow() {
            Role::Leader => "leader",
            Role::Standby => "standby",
        };
        let mut line = format!("leader election {}: {role}", self.me.identity);
        if let Some(problem) = self.alarm.line() {
            line.push_str("; ");
            line.push_str(&problem);
        }
        line
    }

    fn leading(&self) -> bool {
        *self.role.borrow() == Role::Leader
    }

    /// Attempts to acquire or renew every retry period until `stop`; leads while renewals
    /// succeed, and stops leading the moment the renew deadline passes on the local clock or the
    /// Lease is seen held by another replica.
    ///
    /// # Cancellation safety
    /// Meant to run in its own task; cancelling it leaves the Lease to expire (the fence closes
    /// on time by itself).
    pub(crate) async fn run(self: Arc<Self>, stop: CancellationToken) {
        info!(lease = %self.settings.name, namespace = %self.settings.namespace,
            identity = %self.me.identity, incarnation = %self.me.incarnation,
            "leader election: standing by until this replica leads");
        let mut observed = None;
        loop {
            let started = Instant::now();
            let attempt =
                tokio::time::timeout(self.settings.renew_deadline, self.attempt(&mut observed));
            let outcome = tokio::select! {
                () = stop.cancelled() => return,
                outcome = attempt => Some(outcome),
                () = self.lapse() => None,
            };
            match &outcome {
                Some(Ok(Ok(_))) => self.alarm.worked(),
                Some(Ok(Err(err))) => self.alarm.failed(&describe(err, &self.settings.namespace)),
                Some(Err(_)) => self.alarm.failed("the Lease request timed out"),
                None => {}
            }
            match outcome {
                Some(Ok(Ok(true))) => self.lead(started + self.settings.renew_deadline),
                Some(Ok(Ok(false))) if self.leading() => {
                    self.step_down("the Lease is held by another replica");
                }
                _ => {}
            }
            self.check_validity();
            let next = self.next_attempt(observed.as_ref());
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep_until(next) => {}
                () = self.lapse() => {}
            }
            self.check_validity();
        }
    }

    /// When to attempt next: after the retry period, or — for a standby waiting on another
    /// holder — at the moment that holder's Lease expires on the local clock, if sooner (a crashed
    /// leader is then replaced within a retry period of its last renewal plus the lease duration,
    /// not one retry period later).
    fn next_attempt(&self, observed: Option<&Observed>) -> Instant {
        let now = Instant::now();
        let retry = now + self.settings.retry_period;
        match observed.map(|seen| seen.expiry(self.settings.lease_duration)) {
            // Only a future expiry: one that passed already was attempted (and failed).
            Some(expiry) if !self.leading() && expiry > now => retry.min(expiry),
            _ => retry,
        }
    }

    /// Resolves when the leader's validity lapses (never for a standby).
    async fn lapse(&self) {
        match self.fence.valid_until() {
            Some(until) if self.leading() => tokio::time::sleep_until(until).await,
            _ => std::future::pending().await,
        }
    }

    fn check_validity(&self) {
        if self.leading() && !self.fence.allows(Instant::now()) {
            self.step_down("the Lease was not renewed within the renew deadline");
        }
    }

    /// One acquire-or-renew: `Ok(true)` when this replica holds the Lease now.
    async fn attempt(&self, observed: &mut Option<Observed>) -> Result<bool, kube::Error> {
        let duration = self.settings.lease_duration;
        let Some(current) = self.lease.get().await? else {
            if self.retiring.load(Ordering::SeqCst) {
                return Ok(false);
            }
            return match self.lease.create(&self.me, duration).await {
                Ok(written) => Ok(self.wrote(written)),
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
                Err(err) => Err(err),
            };
        };
        let now = Instant::now();
        let record = Record::of(&current);
        let renewed = observed.as_ref().is_some_and(|seen| seen.record != record);
        let seen = Observed::update(observed.take(), record, now);
        let decision = decide(&seen, &self.me, self.settings.lease_duration, now);
        *lock(&self.holder) = seen.record.holder.clone();
        if let Decision::Wait { twin: true, .. } = decision {
            let other = seen.record.incarnation.as_deref().unwrap_or_default();
            self.alarm.twin(&self.me.identity, other, renewed);
        } else {
            self.alarm.no_twin();
        }
        *observed = Some(seen);
        match decision {
            Decision::Wait { .. } => Ok(false),
            Decision::Take if !self.leading() && self.retiring.load(Ordering::SeqCst) => Ok(false),
            // A renewal read before a freeze and sent after it would only meet a conflict;
            // past its validity a leader sends none.
            Decision::Take if self.leading() && !self.fence.allows(Instant::now()) => Ok(false),
            Decision::Take => {
                let claim = claimed(&current, &self.me, duration, Timestamp::now());
                match self.lease.replace(&claim).await {
                    Ok(written) => Ok(self.wrote(written)),
                    Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
                    Err(err) => Err(err),
                }
            }
        }
    }

    fn wrote(&self, written: Lease) -> bool {
        *lock(&self.holder) = Some(self.me.identity.clone());
        *lock(&self.written) = Some(written);
        true
    }

    fn lead(&self, until: Instant) {
        if until <= Instant::now() {
            return; // the renewal came back too late to count
        }
        self.fence.extend(until);
        if !self.leading() {
            info!(identity = %self.me.identity, lease = %self.settings.name, "this replica leads now");
            self.role.send_replace(Role::Leader);
        }
    }

    fn step_down(&self, why: &str) {
        self.fence.close();
        if self.leading() {
            warn!(identity = %self.me.identity, reason = why,
                "this replica no longer leads: pausing every handler; writes are refused");
            self.role.send_replace(Role::Standby);
        }
    }

    /// At shutdown, before the handlers stop: a standby no longer acquires the Lease (a leader
    /// keeps renewing it while its handlers stop).
    pub(crate) fn retire(&self) {
        self.retiring.store(true, Ordering::SeqCst);
    }

    /// At an exit whose handlers did not all stop (some were abandoned at the shutdown timeout)
    /// or whose writes did not drain: stops leading without giving the Lease up, so that no
    /// standby starts the same handlers before it expires.
    pub(crate) fn leave(&self) {
        self.step_down("the operator exits with handlers or writes still running");
    }

    /// After the handlers have stopped: gives the Lease up if this replica still leads, so that
    /// a standby takes it at its next attempt instead of after the lease duration.
    ///
    /// # Cancellation safety
    /// Dropping the future may or may not leave the Lease released (it then expires).
    pub(crate) async fn release(&self) {
        if !self.leading() || !self.fence.allows(Instant::now()) {
            return;
        }
        let Some(written) = lock(&self.written).clone() else {
            return;
        };
        self.step_down("the operator is exiting");
        let free = released(&written, Timestamp::now());
        match tokio::time::timeout(self.settings.renew_deadline, self.lease.replace(&free)).await {
            Ok(Ok(_)) => info!(lease = %self.settings.name, "released the Lease"),
            Ok(Err(err)) => warn!(error = %err, "cannot release the Lease; it expires instead"),
            Err(_) => warn!("releasing the Lease timed out; it expires instead"),
        }
    }
}
