//! The watch deadline: a watch request is long-running, but not unbounded. Its answer's headers
//! must arrive within the read deadline like any request's, and its body must not stay silent
//! for longer than the request's own `timeoutSeconds` plus [`WATCH_GRACE`]: the API server ends
//! every watch after its `timeoutSeconds` (and sends bookmarks in between), so a watch that has
//! delivered nothing — no event, no bookmark, not its end — for that long is on a dead
//! connection (half-open TCP, a stuck proxy or load balancer). Its body fails with
//! [`WatchSilent`], and the watcher restarts it from its last resourceVersion (relisting if the
//! server answers 410 Gone).
//!
//! ```text
//!  watch request ──▶ headers by the read deadline? ── no ──▶ Err(RequestTimedOut)
//!                            │ yes
//!                            ▼
//!  each frame (or the end) within timeoutSeconds + grace of the previous? ── no ──▶ WatchSilent
//! ```
//!
//! The bound needs no bookmarks (an API server without the watch cache may send none): a
//! healthy watch always ends by its `timeoutSeconds`. A watch without `timeoutSeconds` (the
//! server then picks 30 to 60 minutes) keeps only its headers' deadline. The operator's own
//! watches ask for `watch_idle_timeout − grace` seconds, so that their silences are bounded by
//! `watch_idle_timeout`.

use std::fmt;
use std::time::Duration;

use http::Uri;

/// How long after its `timeoutSeconds` a watch may still deliver its end (the server's
/// timeout starts before it sends the headers; the end then only has to cross the network).
pub(crate) const WATCH_GRACE: Duration = Duration::from_secs(3);

/// The error of a watch response body that delivered nothing for longer than its request's
/// `timeoutSeconds` plus [`WATCH_GRACE`]: the connection is taken as dead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WatchSilent {
    /// The silence that was not allowed.
    pub(crate) after: Duration,
}

impl fmt::Display for WatchSilent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the watch delivered nothing (no event, no bookmark, not its end) for {:?}, longer \
             than its timeoutSeconds allow: its connection is taken as dead and the watch restarts",
            self.after
        )
    }
}

impl std::error::Error for WatchSilent {}

/// What bounds a watch request besides its headers' deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WatchBound {
    /// The longest silence of its body (`None`: the request has no `timeoutSeconds`).
    pub(crate) idle: Option<Duration>,
}

/// The bound of a request to `uri` if it is a watch (`watch=true`/`watch=1`, or a legacy
/// `/watch/` path); `None` for any other request.
pub(crate) fn watch_bound(uri: &Uri) -> Option<WatchBound> {
    let pairs = || uri.query().unwrap_or_default().split('&');
    let flagged = pairs().any(|p| p == "watch=true" || p == "watch=1");
    let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    let legacy = match segments.first() {
        Some(&"api") => segments.get(2) == Some(&"watch"),
        Some(&"apis") => segments.get(3) == Some(&"watch"),
        _ => false,
    };
    if !flagged && !legacy {
        return None;
    }
    let timeout = pairs()
        .filter_map(|p| p.strip_prefix("timeoutSeconds="))
        .find_map(|v| v.parse::<u64>().ok())
        .filter(|&seconds| seconds > 0);
    Some(WatchBound {
        idle: timeout.map(|seconds| Duration::from_secs(seconds) + WATCH_GRACE),
    })
}

#[cfg(test)]
#[path = "watch_deadline_tests.rs"]
mod tests;
