//! Every write to the objects of a kind goes through here: [`Writer`] sends the requests (one
//! write slot each, so `max_writes_in_flight` bounds them all), [`classify`] says what an API
//! error means, and [`Retrying`] is the one guarded-retry policy that the finalizer sync
//! ([`finalizer`]) and the patch sink ([`patch`]) follow. There is exactly one retry layer: the
//! kube client's own retries are off, and every HTTP attempt passes the request counter and the
//! rate limit in the client's stack (`operator/limits.rs`).
//!
//! ```text
//!  attempt ──▶ Done(value) ───────────────────────────────▶ Ok(value)
//!     ▲  ├───▶ Progress ──── refill the immediate budget ──┐
//!     │  ├───▶ Stale ─── budget left? ── yes ──────────────┤
//!     │  │                    └── no ──┐                   │
//!     │  ├───▶ Later(min) ─────────────┴─▶ next delay? ──┐ │
//!     │  │                                   └── none ───┼─┼─▶ Err(exhausted)
//!     │  └───▶ Fail ─────────────────────────────────────┼─┼─▶ Err(failed)
//!     └──────────────────────── sleep max(delay, min) ◀──┘ │
//!     └────────────────────────────────────────────────────┘
//! ```

pub(crate) mod finalizer;
pub(crate) mod patch;
pub(crate) mod records;
pub(crate) mod resync;

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use serde_json::Value;
use tokio::sync::Semaphore;

use crate::core::object::ObjectRef;
use crate::core::resource::ResourceInfo;

/// What an API error means for the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// 404: the object (or the resource kind) does not exist.
    NotFound,
    /// 409: a conflict (resourceVersion, UID or a concurrent write).
    Conflict,
    /// 422: the request was rejected as invalid (including a failed JSON-patch `test`).
    Invalid,
    /// 403: not permitted.
    Forbidden,
    /// 429 or 5xx or a transport error: try again later, at the earliest after the given delay.
    Transient(Option<Duration>),
    /// Anything else: do not retry.
    Fatal,
}

/// Classifies a kube error.
pub(crate) fn classify(err: &kube::Error) -> Failure {
    match err {
        kube::Error::Api(status) => {
            let after = status
                .details
                .as_ref()
                .map(|d| d.retry_after_seconds)
                .filter(|s| *s > 0)
                .map(|s| Duration::from_secs(u64::from(s)));
            match status.code {
                404 => Failure::NotFound,
                409 => Failure::Conflict,
                422 => Failure::Invalid,
                403 => Failure::Forbidden,
                429 | 500..=599 => Failure::Transient(after),
                _ => Failure::Fatal,
            }
        }
        kube::Error::Discovery(_) => Failure::NotFound,
        // Refused by this replica's own fence: it no longer leads (or serves the object). No
        // retry can pass until it leads again, and then it syncs every object anew; retrying
        // would only hold the object's queue (and a shard range's release) for the retries.
        kube::Error::Service(e) if is_fenced(&**e) => Failure::Fatal,
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => {
            Failure::Transient(None)
        }
        _ => Failure::Fatal,
    }
}

/// Whether `err`, or an error it wraps, is the fence's refusal.
fn is_fenced(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(err);
    while let Some(err) = cause {
        if err.is::<crate::operator::ha::fence::Fenced>() {
            return true;
        }
        cause = err.source();
    }
    false
}

/// A short description of a kube error for logs and [`crate::PatchError`] messages.
pub(crate) fn describe(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) if status.code == 401 => format!(
            "401 ({}): the API server rejected the operator's credentials (the token or client \
             certificate is invalid, expired or revoked); renew them in the kubeconfig or the \
             service account",
            status.reason
        ),
        kube::Error::Api(status) if !status.message.is_empty() => {
            format!("{} ({}): {}", status.code, status.reason, status.message)
        }
        other => other.to_string(),
    }
}

/// How writes are retried.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RetrySettings {
    /// The first delay.
    pub(crate) min_delay: Duration,
    /// The longest delay.
    pub(crate) max_delay: Duration,
    /// Attempts in total (the first one included).
    pub(crate) attempts: usize,
}

impl Default for RetrySettings {
    fn default() -> Self {
        Self {
            min_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(10),
            attempts: 8,
        }
    }
}

impl RetrySettings {
    /// The delays between attempts (with jitter), `attempts - 1` of them.
    pub(crate) fn delays(&self) -> ExponentialBackoff {
        ExponentialBuilder::default()
            .with_min_delay(self.min_delay)
            .with_max_delay(self.max_delay)
            .with_max_times(self.attempts.saturating_sub(1))
            .with_jitter()
            .build()
    }
}

/// Everything needed to write to objects of one resource kind: the client, the dynamic resource,
/// the field manager, the limit on writes in flight and the retry settings.
#[derive(Clone)]
pub(crate) struct Writer {
    pub(crate) client: Client,
    pub(crate) resource: Arc<ApiResource>,
    pub(crate) info: ResourceInfo,
    pub(crate) field_manager: Arc<str>,
    pub(crate) writes: Arc<Semaphore>,
    pub(crate) retry: RetrySettings,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("resource", &self.info.to_string())
            .finish_non_exhaustive()
    }
}

/// Builds a kube [`ApiResource`] from the core's [`ResourceInfo`].
pub(crate) fn api_resource(info: &ResourceInfo) -> ApiResource {
    ApiResource {
        group: info.group.to_string(),
        version: info.version.to_string(),
        api_version: info.api_version(),
        kind: info.kind.to_string(),
        plural: info.plural.to_string(),
    }
}

/// How one attempt of a write came out, for [`Retrying::after`].
#[derive(Debug)]
pub(crate) enum Next<T, E> {
    /// Finished: the loop returns `Ok(value)`.
    Done(T),
    /// A step succeeded and another one is due: attempt again at once (the immediate budget is
    /// refilled).
    Progress,
    /// A guard failed because the object changed under it; its fresh state has been read.
    /// Attempt again at once while the immediate budget lasts, then after a backoff delay (a
    /// guard that keeps failing, e.g. through an admission policy, must not spin).
    Stale(E),
    /// Attempt again after the next backoff delay, and not before `min` (a server's
    /// `Retry-After`).
    Later { min: Option<Duration>, error: E },
    /// Give up now.
    Fail(E),
}

/// Why a write gave up.
#[derive(Debug)]
pub(crate) struct GaveUp<E> {
    /// The last attempt's error.
    pub(crate) error: E,
    /// `true`: the attempts ran out; `false`: an attempt failed for good ([`Next::Fail`]).
    pub(crate) exhausted: bool,
}

/// The one guarded-retry policy of every write, as a loop's step: each attempt's outcome goes
/// to [`Retrying::after`], which says whether to return or attempt again — at once after
/// [`Next::Progress`] and for up to `immediate` consecutive [`Next::Stale`] outcomes, after the
/// next of the settings' backoff delays otherwise (see the module's diagram).
///
/// ```ignore
/// let mut retrying = Retrying::new(&settings, 1);
/// loop {
///     let next = attempt().await;
///     if let ControlFlow::Break(result) = retrying.after(next).await {
///         return result;
///     }
/// }
/// ```
#[derive(Debug)]
pub(crate) struct Retrying {
    delays: ExponentialBackoff,
    immediate: u32,
    budget: u32,
}

impl Retrying {
    pub(crate) fn new(settings: &RetrySettings, immediate: u32) -> Self {
        Self {
            delays: settings.delays(),
            immediate,
            budget: immediate,
        }
    }

    /// What follows an attempt that came out as `next`: `Break` with the result, or `Continue`
    /// once the next attempt is due (after sleeping, when it must wait).
    ///
    /// # Cancellation safety
    /// Cancel-safe: dropping it while it sleeps skips the attempt.
    pub(crate) async fn after<T, E>(
        &mut self,
        next: Next<T, E>,
    ) -> ControlFlow<Result<T, GaveUp<E>>> {
        let (min, error) = match next {
            Next::Done(value) => return ControlFlow::Break(Ok(value)),
            Next::Progress => {
                self.budget = self.immediate;
                return ControlFlow::Continue(());
            }
            Next::Stale(_) if self.budget > 0 => {
                self.budget -= 1;
                return ControlFlow::Continue(());
            }
            Next::Stale(error) => (None, error),
            Next::Later { min, error } => (min, error),
            Next::Fail(error) => {
                let exhausted = false;
                return ControlFlow::Break(Err(GaveUp { error, exhausted }));
            }
        };
        let Some(delay) = self.delays.next() else {
            let exhausted = true;
            return ControlFlow::Break(Err(GaveUp { error, exhausted }));
        };
        tokio::time::sleep(delay.max(min.unwrap_or_default())).await;
        ControlFlow::Continue(())
    }
}

impl Writer {
    /// The API for the object's namespace (or the cluster).
    pub(crate) fn api_for(&self, object: &ObjectRef) -> Api<DynamicObject> {
        match &object.namespace {
            Some(ns) if self.info.namespaced => {
                Api::namespaced_with(self.client.clone(), ns, &*self.resource)
            }
            _ => Api::all_with(self.client.clone(), &*self.resource),
        }
    }

    fn params(&self) -> PatchParams {
        PatchParams {
            field_manager: Some(self.field_manager.to_string()),
            ..Default::default()
        }
    }

    /// Reads the object; `Ok(None)` if it is gone or its UID differs (a same-name recreation).
    ///
    /// # Cancellation safety
    /// Cancel-safe: it only reads.
    pub(crate) async fn read(
        &self,
        object: &ObjectRef,
    ) -> Result<Option<DynamicObject>, kube::Error> {
        let _permit = self.writes.acquire().await;
        // Boxed after the permit: the request future is large (several KB), and an object's job
        // waiting for a write slot (thousands at start-up) should not hold one.
        let found = Box::pin(self.api_for(object).get_opt(&object.name)).await?;
        Ok(found.filter(|o| o.metadata.uid.as_deref() == Some(&*object.uid)))
    }

    /// Sends one JSON patch (a list of operations, `test`s included), once.
    ///
    /// # Cancellation safety
    /// Dropping the future may or may not leave the patch applied.
    pub(crate) async fn json_patch(
        &self,
        object: &ObjectRef,
        patch: Value,
    ) -> Result<DynamicObject, kube::Error> {
        let patch: json_patch::Patch =
            serde_json::from_value(patch).map_err(kube::Error::SerdeError)?;
        let params = self.params();
        let _permit = self.writes.acquire().await;
        // Boxed after the permit (see `read`).
        Box::pin(
            self.api_for(object)
                .patch(&object.name, &params, &Patch::Json::<()>(patch)),
        )
        .await
    }

    /// Sends one merge patch, once: to the status subresource when `version` is given (guarded
    /// by that `metadata.resourceVersion`), to the main resource otherwise.
    ///
    /// # Cancellation safety
    /// Dropping the future may or may not leave the patch applied.
    pub(crate) async fn merge_patch(
        &self,
        object: &ObjectRef,
        body: &Value,
        version: Option<&str>,
    ) -> Result<DynamicObject, kube::Error> {
        let api = self.api_for(object);
        let params = self.params();
        let _permit = self.writes.acquire().await;
        // Boxed after the permit (see `read`).
        match version {
            Some(version) => {
                let mut body = body.clone();
                body["metadata"]["resourceVersion"] = Value::String(version.to_owned());
                Box::pin(api.patch_status(&object.name, &params, &Patch::Merge(&body))).await
            }
            None => Box::pin(api.patch(&object.name, &params, &Patch::Merge(body))).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::response::{Status, StatusDetails};

    fn api_error(code: u16, retry_after: u32) -> kube::Error {
        let mut status = Status::failure("boom", "Reason").with_code(code);
        if retry_after > 0 {
            let details = serde_json::json!({"retryAfterSeconds": retry_after});
            status.details = Some(serde_json::from_value::<StatusDetails>(details).unwrap());
        }
        kube::Error::Api(status.boxed())
    }

    #[test]
    fn an_unauthorized_error_says_the_credentials_are_the_cause() {
        let text = describe(&api_error(401, 0));
        assert!(text.starts_with("401 (Reason)"), "{text}");
        assert!(text.contains("credentials"), "{text}");
        // Positive control: other errors keep the server's own message.
        assert_eq!(describe(&api_error(403, 0)), "403 (Reason): boom");
    }

    #[test]
    fn classifies_status_codes() {
        assert_eq!(classify(&api_error(404, 0)), Failure::NotFound);
        assert_eq!(classify(&api_error(409, 0)), Failure::Conflict);
        assert_eq!(classify(&api_error(422, 0)), Failure::Invalid);
        assert_eq!(classify(&api_error(403, 0)), Failure::Forbidden);
        assert_eq!(classify(&api_error(400, 0)), Failure::Fatal);
        assert_eq!(classify(&api_error(503, 0)), Failure::Transient(None));
        assert_eq!(
            classify(&api_error(429, 7)),
            Failure::Transient(Some(Duration::from_secs(7)))
        );
    }

    #[test]
    fn a_request_that_timed_out_is_transient() {
        let after = Duration::from_secs(30);
        let timed_out = crate::operator::transport::RequestTimedOut { after };
        let err = kube::Error::Service(Box::new(timed_out));
        assert_eq!(classify(&err), Failure::Transient(None));
        assert!(describe(&err).contains("30s"), "{}", describe(&err));
    }

    /// A write refused by the replica's own fence is not retried (it cannot pass until the
    /// replica leads again), also when a layer wrapped the refusal.
    #[test]
    fn a_write_refused_by_the_fence_is_not_retried() {
        #[derive(Debug)]
        struct Wrapped(crate::operator::ha::fence::Fenced);
        impl std::fmt::Display for Wrapped {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "wrapped: {}", self.0)
            }
        }
        impl std::error::Error for Wrapped {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let fenced = crate::operator::ha::fence::Fenced;
        let direct = kube::Error::Service(Box::new(fenced));
        let wrapped = kube::Error::Service(Box::new(Wrapped(fenced)));
        assert_eq!(classify(&direct), Failure::Fatal);
        assert_eq!(classify(&wrapped), Failure::Fatal);
    }

    #[test]
    fn describes_api_errors() {
        assert_eq!(describe(&api_error(409, 0)), "409 (Reason): boom");
    }

    fn fast(attempts: usize) -> RetrySettings {
        RetrySettings {
            min_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(100),
            attempts,
        }
    }

    /// Runs the retry loop over a script of outcomes; returns its result, the attempts made and the
    /// paused time it took.
    async fn run(
        settings: RetrySettings,
        immediate: u32,
        script: Vec<Next<u32, &'static str>>,
    ) -> (Result<u32, GaveUp<&'static str>>, usize, Duration) {
        let start = tokio::time::Instant::now();
        let mut script = script.into_iter();
        let mut retrying = Retrying::new(&settings, immediate);
        let mut attempts = 0;
        loop {
            attempts += 1;
            let next = script.next().expect("the script ran out");
            if let ControlFlow::Break(result) = retrying.after(next).await {
                return (result, attempts, start.elapsed());
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_retry_loop_follows_each_outcome() {
        use Next::{Done, Fail, Later, Progress, Stale};
        let ms = Duration::from_millis;
        let later = |min| Later { min, error: "busy" };
        // (immediate budget, script, Ok value or (error, exhausted), attempts, at least)
        type Row = (
            u32,
            Vec<Next<u32, &'static str>>,
            Result<u32, (&'static str, bool)>,
            usize,
            Duration,
        );
        let table: Vec<Row> = vec![
            (0, vec![Done(7)], Ok(7), 1, ms(0)),
            (0, vec![later(None), Done(1)], Ok(1), 2, ms(100)),
            (
                0,
                vec![later(Some(Duration::from_secs(3))), Done(1)],
                Ok(1),
                2,
                ms(3000),
            ),
            (
                0,
                vec![later(None), later(None), later(None)],
                Err(("busy", true)),
                3,
                ms(200),
            ),
            (0, vec![Fail("no")], Err(("no", false)), 1, ms(0)),
            // one stale at once, the second after a delay
            (1, vec![Stale("g"), Stale("g"), Done(2)], Ok(2), 3, ms(100)),
            // progress refills the budget: every stale is immediate
            (
                1,
                vec![Stale("g"), Progress, Stale("g"), Done(3)],
                Ok(3),
                4,
                ms(0),
            ),
            // a budget of three, then the delays (two attempts' worth) run out
            (
                3,
                vec![
                    Stale("g"),
                    Stale("g"),
                    Stale("g"),
                    Stale("g"),
                    Stale("g"),
                    Stale("g"),
                ],
                Err(("g", true)),
                6,
                ms(200),
            ),
        ];
        for (i, (immediate, script, want, attempts, least)) in table.into_iter().enumerate() {
            let (got, made, took) = run(fast(3), immediate, script).await;
            let got = got.map_err(|g| (g.error, g.exhausted));
            assert_eq!((got, made), (want, attempts), "row {i}");
            assert!(
                took >= least && took < least + ms(1000),
                "row {i}: {took:?}"
            );
        }
    }
}
