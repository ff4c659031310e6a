//! Polling with a deadline: the only way tests wait for the server (never fixed sleeps).

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// The first pause between two polls; it doubles up to [`MAX_POLL_INTERVAL`].
pub const MIN_POLL_INTERVAL: Duration = Duration::from_millis(20);

/// The longest pause between two polls.
pub const MAX_POLL_INTERVAL: Duration = Duration::from_millis(250);

/// A condition that did not hold before its deadline.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::time::Duration;
///
/// let err = kopf_tests::try_wait_for("never", Duration::from_millis(50), || async {
///     Err::<(), _>("still not")
/// })
/// .await
/// .unwrap_err();
/// assert!(err.to_string().contains("still not"));
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitTimeout {
    /// What was waited for.
    pub what: String,
    /// How long it was waited for.
    pub timeout: Duration,
    /// How many times the probe ran.
    pub attempts: u32,
    /// What the probe said the last time it ran.
    pub last: String,
}

impl Display for WaitTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "timed out after {:?} ({} attempts) waiting for {}; last observation: {}",
            self.timeout, self.attempts, self.what, self.last
        )
    }
}

impl std::error::Error for WaitTimeout {}

/// Polls `probe` until it returns `Ok`, for at most `timeout`; returns the value or a
/// [`WaitTimeout`] naming `what` and the probe's last `Err` (its "not yet, because ...").
///
/// The probe runs at least once, even with a zero timeout; pauses between polls grow from
/// [`MIN_POLL_INTERVAL`] to [`MAX_POLL_INTERVAL`].
///
/// # Errors
///
/// [`WaitTimeout`] if the probe did not return `Ok` before the deadline.
///
/// # Cancellation safety
///
/// Cancel-safe: dropping the future stops polling; a probe cancelled mid-call is simply dropped.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use std::time::Duration;
///
/// let calls = AtomicU32::new(0);
/// let n = kopf_tests::try_wait_for("three calls", Duration::from_secs(5), || async {
///     let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
///     if n >= 3 { Ok(n) } else { Err(format!("only {n} calls")) }
/// })
/// .await
/// .unwrap();
/// assert_eq!(n, 3);
/// # }
/// ```
pub async fn try_wait_for<T, E, F, Fut>(
    what: impl Display,
    timeout: Duration,
    mut probe: F,
) -> Result<T, WaitTimeout>
where
    E: Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let deadline = Instant::now() + timeout;
    let mut pause = MIN_POLL_INTERVAL;
    let mut attempts = 0;
    loop {
        attempts += 1;
        let last = match tokio::time::timeout_at(deadline, probe()).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(not_yet)) => not_yet.to_string(),
            Err(_) => "the probe itself did not finish before the deadline".to_owned(),
        };
        let now = Instant::now();
        if now >= deadline {
            return Err(WaitTimeout {
                what: what.to_string(),
                timeout,
                attempts,
                last,
            });
        }
        tokio::time::sleep(pause.min(deadline - now)).await;
        pause = (pause * 2).min(MAX_POLL_INTERVAL);
    }
}

/// Like [`try_wait_for`], but panics with the [`WaitTimeout`] message: the form tests use.
///
/// # Panics
///
/// If `probe` did not return `Ok` within `timeout`; the message names `what` and the last `Err`.
///
/// # Cancellation safety
///
/// Cancel-safe, as [`try_wait_for`].
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> anyhow::Result<()> {
/// # let client = kopf_tests::test_client().await;
/// use std::time::Duration;
/// use k8s_openapi::api::core::v1::Namespace;
/// use kube::Api;
///
/// let namespaces: Api<Namespace> = Api::all(client);
/// let ns: Namespace = kopf_tests::wait_for("namespace default", Duration::from_secs(10), || async {
///     namespaces.get_opt("default").await?.ok_or_else(|| anyhow::anyhow!("not there yet"))
/// })
/// .await;
/// assert_eq!(ns.metadata.name.as_deref(), Some("default"));
/// # Ok(()) }
/// ```
pub async fn wait_for<T, E, F, Fut>(what: impl Display, timeout: Duration, probe: F) -> T
where
    E: Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    match try_wait_for(what, timeout, probe).await {
        Ok(value) => value,
        Err(timeout) => panic!("{timeout}"),
    }
}

/// Waits until `condition` returns `true`, for at most `timeout`.
///
/// # Panics
///
/// If the condition did not hold within `timeout`; the message names `what`.
///
/// # Cancellation safety
///
/// Cancel-safe, as [`try_wait_for`].
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::time::Duration;
///
/// let start = tokio::time::Instant::now();
/// kopf_tests::wait_until("50 ms passed", Duration::from_secs(5), || async {
///     start.elapsed() >= Duration::from_millis(50)
/// })
/// .await;
/// # }
/// ```
pub async fn wait_until<F, Fut>(what: impl Display, timeout: Duration, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    wait_for(what, timeout, || {
        let fut = condition();
        async move {
            if fut.await {
                Ok(())
            } else {
                Err("condition was false")
            }
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test(start_paused = true)]
    async fn times_out_at_the_deadline_with_the_last_observation() {
        let start = Instant::now();
        let calls = AtomicU32::new(0);
        let err = try_wait_for("x", Duration::from_secs(2), || async {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            Err::<(), _>(format!("call {n}"))
        })
        .await
        .expect_err("the probe never succeeds");
        assert_eq!(start.elapsed(), Duration::from_secs(2));
        assert_eq!(err.attempts, calls.load(Ordering::SeqCst));
        assert_eq!(err.last, format!("call {}", err.attempts - 1));
        assert!(err.to_string().contains("waiting for x"));
    }

    #[tokio::test(start_paused = true)]
    async fn returns_as_soon_as_the_probe_succeeds() {
        let start = Instant::now();
        let calls = AtomicU32::new(0);
        let value = try_wait_for("y", Duration::from_secs(60), || async {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            if n == 2 { Ok(n) } else { Err("not yet") }
        })
        .await;
        assert_eq!(value, Ok(2));
        // Two pauses: 20 ms, then 40 ms.
        assert_eq!(start.elapsed(), Duration::from_millis(60));
    }

    #[tokio::test(start_paused = true)]
    async fn a_hanging_probe_is_cut_at_the_deadline() {
        let start = Instant::now();
        let err = try_wait_for("z", Duration::from_secs(1), || async {
            std::future::pending::<Result<(), &str>>().await
        })
        .await
        .expect_err("the probe never finishes");
        assert_eq!(start.elapsed(), Duration::from_secs(1));
        assert_eq!(err.attempts, 1);
    }

    #[tokio::test(start_paused = true)]
    #[should_panic(expected = "waiting for the impossible")]
    async fn wait_until_panics_on_timeout() {
        wait_until("the impossible", Duration::from_millis(100), || async {
            false
        })
        .await;
    }
}
