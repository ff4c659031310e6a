//! Classifying API errors and retrying writes with backoff.

use std::sync::Arc;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
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
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => {
            Failure::Transient(None)
        }
        _ => Failure::Fatal,
    }
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
    pub(crate) fn delays(&self) -> impl Iterator<Item = Duration> + Send + use<> {
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

    /// Reads the object; `Ok(None)` if it is gone or its UID differs (a same-name recreation).
    pub(crate) async fn read(
        &self,
        object: &ObjectRef,
    ) -> Result<Option<DynamicObject>, kube::Error> {
        let _permit = self.writes.acquire().await;
        // Boxed after the permit (see `finalizer::send`).
        let found = Box::pin(self.api_for(object).get_opt(&object.name)).await?;
        Ok(found.filter(|o| o.metadata.uid.as_deref() == Some(&*object.uid)))
    }
}

/// Waits the next backoff delay, at least `min` (a server's `Retry-After`). Returns `false` when
/// the attempts are exhausted.
pub(crate) async fn pause(
    delays: &mut impl Iterator<Item = Duration>,
    min: Option<Duration>,
) -> bool {
    let Some(delay) = delays.next() else {
        return false;
    };
    tokio::time::sleep(delay.max(min.unwrap_or_default())).await;
    true
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
    fn describes_api_errors() {
        assert_eq!(describe(&api_error(409, 0)), "409 (Reason): boom");
    }

    #[tokio::test(start_paused = true)]
    async fn pause_honours_a_minimum_and_runs_out() {
        let settings = RetrySettings {
            min_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(100),
            attempts: 2,
        };
        let mut delays = settings.delays();
        let start = tokio::time::Instant::now();
        assert!(pause(&mut delays, Some(Duration::from_secs(3))).await);
        assert!(start.elapsed() >= Duration::from_secs(3));
        assert!(!pause(&mut delays, None).await);
    }
}
