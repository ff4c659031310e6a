//! What follows a failed invocation: a retry after a delay, or the end of the cycle.

use std::time::Duration;

use tokio::time::Instant;

use super::verdict::Verdict;
use crate::core::outcome::ErrorKind;
use crate::core::spec::{ErrorsMode, HandlerSpec};

/// The shortest delay before a retry, so a failing handler cannot busy-loop.
pub(crate) const MIN_RETRY_DELAY: Duration = Duration::from_secs(1);

/// Decides what follows a failure of kind `kind` at attempt `retry` (from 0) of a cycle that
/// began at `started`.
///
/// `retries = N` allows N attempts in total; `retry_timeout` ends the cycle when the next
/// attempt would begin at or after `started + retry_timeout`.
pub(crate) fn judge(
    kind: ErrorKind,
    spec: &HandlerSpec,
    backoff: Duration,
    retry: u32,
    started: Instant,
    now: Instant,
) -> Verdict {
    let delay = match (kind, spec.errors) {
        (ErrorKind::Permanent, _) => return Verdict::Permanent,
        (ErrorKind::Temporary { delay }, _) => delay,
        (ErrorKind::Other | ErrorKind::Timeout, ErrorsMode::Temporary) => backoff,
        (ErrorKind::Other | ErrorKind::Timeout, ErrorsMode::Permanent) => {
            return Verdict::Permanent;
        }
        (ErrorKind::Other | ErrorKind::Timeout, ErrorsMode::Ignored) => return Verdict::Ignored,
    };
    let delay = delay.max(MIN_RETRY_DELAY);
    if spec.retries.is_some_and(|n| retry.saturating_add(1) >= n) {
        return Verdict::Exhausted;
    }
    if spec
        .retry_timeout
        .is_some_and(|limit| now + delay >= started + limit)
    {
        return Verdict::Exhausted;
    }
    Verdict::Retry { delay }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::spec::HandlerKind;

    const S: fn(u64) -> Duration = Duration::from_secs;
    const SPEC: HandlerSpec = HandlerSpec::new("h", HandlerKind::Daemon);

    fn tmp(secs: u64) -> ErrorKind {
        ErrorKind::Temporary { delay: S(secs) }
    }

    #[test]
    fn temporary_errors_retry_after_their_delay_clamped_to_a_second() {
        let t = Instant::now();
        assert_eq!(
            judge(tmp(5), &SPEC, SPEC.backoff, 0, t, t),
            Verdict::Retry { delay: S(5) }
        );
        assert_eq!(
            judge(tmp(0), &SPEC, SPEC.backoff, 7, t, t),
            Verdict::Retry { delay: S(1) }
        );
        let half = ErrorKind::Temporary {
            delay: Duration::from_millis(500),
        };
        assert_eq!(
            judge(half, &SPEC, SPEC.backoff, 0, t, t),
            Verdict::Retry { delay: S(1) }
        );
    }

    #[test]
    fn arbitrary_errors_follow_the_errors_mode() {
        let t = Instant::now();
        let spec = HandlerSpec {
            backoff: S(7),
            ..SPEC
        };
        assert_eq!(
            judge(ErrorKind::Other, &spec, spec.backoff, 0, t, t),
            Verdict::Retry { delay: S(7) }
        );
        assert_eq!(
            judge(ErrorKind::Timeout, &spec, spec.backoff, 0, t, t),
            Verdict::Retry { delay: S(7) }
        );
        let zero = HandlerSpec {
            backoff: Duration::ZERO,
            ..SPEC
        };
        assert_eq!(
            judge(ErrorKind::Other, &zero, zero.backoff, 0, t, t),
            Verdict::Retry { delay: S(1) }
        );
        let perm = HandlerSpec {
            errors: ErrorsMode::Permanent,
            ..SPEC
        };
        assert_eq!(
            judge(ErrorKind::Other, &perm, perm.backoff, 0, t, t),
            Verdict::Permanent
        );
        assert_eq!(
            judge(ErrorKind::Timeout, &perm, perm.backoff, 0, t, t),
            Verdict::Permanent
        );
        assert_eq!(
            judge(tmp(3), &perm, perm.backoff, 0, t, t),
            Verdict::Retry { delay: S(3) }
        );
        let ign = HandlerSpec {
            errors: ErrorsMode::Ignored,
            ..SPEC
        };
        assert_eq!(
            judge(ErrorKind::Other, &ign, ign.backoff, 0, t, t),
            Verdict::Ignored
        );
        assert_eq!(
            judge(ErrorKind::Permanent, &ign, ign.backoff, 0, t, t),
            Verdict::Permanent
        );
    }

    #[test]
    fn retries_n_means_n_attempts_in_total() {
        let t = Instant::now();
        let spec = HandlerSpec {
            retries: Some(3),
            ..SPEC
        };
        assert_eq!(
            judge(tmp(1), &spec, spec.backoff, 0, t, t),
            Verdict::Retry { delay: S(1) }
        );
        assert_eq!(
            judge(tmp(1), &spec, spec.backoff, 1, t, t),
            Verdict::Retry { delay: S(1) }
        );
        assert_eq!(
            judge(tmp(1), &spec, spec.backoff, 2, t, t),
            Verdict::Exhausted
        );
        let one = HandlerSpec {
            retries: Some(1),
            ..SPEC
        };
        assert_eq!(
            judge(ErrorKind::Other, &one, one.backoff, 0, t, t),
            Verdict::Exhausted
        );
    }

    #[test]
    fn retry_timeout_looks_ahead_at_the_next_attempt() {
        let t = Instant::now();
        let spec = HandlerSpec {
            retry_timeout: Some(S(10)),
            ..SPEC
        };
        assert_eq!(
            judge(tmp(5), &spec, spec.backoff, 0, t, t),
            Verdict::Retry { delay: S(5) }
        );
        assert_eq!(
            judge(tmp(5), &spec, spec.backoff, 1, t, t + S(4)),
            Verdict::Retry { delay: S(5) }
        );
        assert_eq!(
            judge(tmp(5), &spec, spec.backoff, 1, t, t + S(5)),
            Verdict::Exhausted
        );
        assert_eq!(
            judge(tmp(5), &spec, spec.backoff, 1, t, t + S(6)),
            Verdict::Exhausted
        );
    }
}
