//! What the proxy does with a request: the faults, the request matchers, and the rule table.

use std::time::Duration;

use http::Method;

/// Which requests a [`Rule`] applies to: an optional method, and substrings the request's
/// path-and-query must contain.
///
/// # Examples
///
/// ```
/// use http::Method;
/// use kopf_tests::proxy::Match;
///
/// let patches = Match::method(Method::PATCH).path("/configmaps/");
/// assert!(patches.matches(&Method::PATCH, "/api/v1/namespaces/a/configmaps/x"));
/// assert!(!patches.matches(&Method::GET, "/api/v1/namespaces/a/configmaps/x"));
/// assert!(Match::watches().matches(&Method::GET, "/api/v1/configmaps?watch=true&x=1"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Match {
    method: Option<Method>,
    contains: Vec<String>,
    watch: Option<bool>,
}

impl Match {
    /// Every request.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(kopf_tests::proxy::Match::any().matches(&http::Method::DELETE, "/api"));
    /// ```
    #[must_use]
    pub fn any() -> Self {
        Self::default()
    }

    /// Requests with this method.
    ///
    /// # Examples
    ///
    /// ```
    /// let m = kopf_tests::proxy::Match::method(http::Method::PUT);
    /// assert!(!m.matches(&http::Method::GET, "/api"));
    /// ```
    #[must_use]
    pub fn method(method: Method) -> Self {
        Self {
            method: Some(method),
            ..Self::default()
        }
    }

    /// Watch requests (`GET` with `watch=true` or `watch=1` in the query).
    ///
    /// # Examples
    ///
    /// ```
    /// let m = kopf_tests::proxy::Match::watches();
    /// assert!(m.matches(&http::Method::GET, "/apis/g/v1/xs?watch=1"));
    /// assert!(!m.matches(&http::Method::GET, "/apis/g/v1/xs?limit=500"));
    /// ```
    #[must_use]
    pub fn watches() -> Self {
        Self {
            method: Some(Method::GET),
            watch: Some(true),
            ..Self::default()
        }
    }

    /// Also requires `needle` in the path-and-query (all such substrings must be present).
    ///
    /// # Examples
    ///
    /// ```
    /// let m = kopf_tests::proxy::Match::any().path("/status").path("ns-1");
    /// assert!(m.matches(&http::Method::PATCH, "/apis/g/v1/namespaces/ns-1/xs/a/status"));
    /// assert!(!m.matches(&http::Method::PATCH, "/apis/g/v1/namespaces/ns-1/xs/a"));
    /// ```
    #[must_use]
    pub fn path(mut self, needle: impl Into<String>) -> Self {
        self.contains.push(needle.into());
        self
    }

    /// Also requires the request to be (or not to be) a watch.
    ///
    /// # Examples
    ///
    /// ```
    /// let lists = kopf_tests::proxy::Match::method(http::Method::GET).watch(false);
    /// assert!(lists.matches(&http::Method::GET, "/api/v1/pods?limit=1"));
    /// assert!(!lists.matches(&http::Method::GET, "/api/v1/pods?watch=true"));
    /// ```
    #[must_use]
    pub fn watch(mut self, watch: bool) -> Self {
        self.watch = Some(watch);
        self
    }

    /// Whether a request with `method` and `path_and_query` matches.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(kopf_tests::proxy::Match::any().matches(&http::Method::GET, "/version"));
    /// ```
    #[must_use]
    pub fn matches(&self, method: &Method, path_and_query: &str) -> bool {
        self.method.as_ref().is_none_or(|m| m == method)
            && self
                .contains
                .iter()
                .all(|c| path_and_query.contains(c.as_str()))
            && self
                .watch
                .is_none_or(|w| w == is_watch(method, path_and_query))
    }
}

/// Whether a request is a watch (`GET` with `watch=true`/`watch=1`).
pub(crate) fn is_watch(method: &Method, path_and_query: &str) -> bool {
    method == Method::GET
        && path_and_query.split_once('?').is_some_and(|(_, query)| {
            query
                .split('&')
                .any(|kv| kv == "watch=true" || kv == "watch=1")
        })
}

/// What the proxy does to a matching request.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use kopf_tests::proxy::Fault;
///
/// let throttle = Fault::too_many_requests(2);
/// assert_eq!(throttle.status_code(), Some(429));
/// assert_eq!(Fault::Delay(Duration::from_secs(1)).status_code(), None);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Answer with this HTTP status and a `Status` body, without forwarding.
    Status {
        /// The HTTP status code (e.g. 409, 422, 500, 503, 410).
        code: u16,
        /// The `Status.reason` (e.g. `Conflict`).
        reason: &'static str,
        /// Adds a `Retry-After` header and `details.retryAfterSeconds` with this many seconds.
        retry_after: Option<u32>,
    },
    /// Answer a watch with `200` and a single watch `ERROR` event carrying a 410 `Expired`
    /// status, then end the stream (what the API server does for a too-old resourceVersion).
    WatchGone,
    /// Forward, then cut the response stream in the middle of the event after the first
    /// `after_events` complete events (newline-delimited), without the closing chunk.
    CutWatch {
        /// How many whole events get through before the cut.
        after_events: usize,
    },
    /// Wait this long, then forward.
    Delay(Duration),
    /// Hold the request without an answer until [`ProxyHandle::release_stalled`] or
    /// [`ProxyHandle::drop_connections`]; then it is forwarded (release) or dropped.
    ///
    /// [`ProxyHandle::release_stalled`]: super::ProxyHandle::release_stalled
    /// [`ProxyHandle::drop_connections`]: super::ProxyHandle::drop_connections
    Stall,
    /// Like [`Stall`](Self::Stall), but the request (read in full first) is kept even when its
    /// client gives up and closes the connection: released, it reaches the API server late, as
    /// the bytes of a request in a partitioned TCP send buffer would; its answer is counted (see
    /// [`ProxyHandle::received`]) and reaches the client only if it still waits.
    /// [`ProxyHandle::drop_connections`] does not drop it.
    ///
    /// [`ProxyHandle::received`]: super::ProxyHandle::received
    /// [`ProxyHandle::drop_connections`]: super::ProxyHandle::drop_connections
    Hold,
    /// Close the request's connection without an answer.
    Reset,
}

impl Fault {
    /// `429 Too Many Requests` with `Retry-After: seconds`.
    ///
    /// # Examples
    ///
    /// ```
    /// let f = kopf_tests::proxy::Fault::too_many_requests(3);
    /// assert!(matches!(f, kopf_tests::proxy::Fault::Status { retry_after: Some(3), .. }));
    /// ```
    #[must_use]
    pub fn too_many_requests(seconds: u32) -> Self {
        Self::Status {
            code: 429,
            reason: "TooManyRequests",
            retry_after: Some(seconds),
        }
    }

    /// `409 Conflict`.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(kopf_tests::proxy::Fault::conflict().status_code(), Some(409));
    /// ```
    #[must_use]
    pub fn conflict() -> Self {
        Self::status(409, "Conflict")
    }

    /// `422 Unprocessable Entity`, as for a JSON patch whose `test` operation failed.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(kopf_tests::proxy::Fault::failed_test_guard().status_code(), Some(422));
    /// ```
    #[must_use]
    pub fn failed_test_guard() -> Self {
        Self::status(422, "Invalid")
    }

    /// `500 Internal Server Error`.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(kopf_tests::proxy::Fault::internal_error().status_code(), Some(500));
    /// ```
    #[must_use]
    pub fn internal_error() -> Self {
        Self::status(500, "InternalError")
    }

    /// `503 Service Unavailable`.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(kopf_tests::proxy::Fault::unavailable().status_code(), Some(503));
    /// ```
    #[must_use]
    pub fn unavailable() -> Self {
        Self::status(503, "ServiceUnavailable")
    }

    /// `410 Gone` as a plain response (e.g. to a list with an expired continue token).
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(kopf_tests::proxy::Fault::gone().status_code(), Some(410));
    /// ```
    #[must_use]
    pub fn gone() -> Self {
        Self::status(410, "Expired")
    }

    /// An answer with `code` and `reason` (no `Retry-After`).
    ///
    /// # Examples
    ///
    /// ```
    /// let f = kopf_tests::proxy::Fault::status(504, "Timeout");
    /// assert_eq!(f.status_code(), Some(504));
    /// ```
    #[must_use]
    pub fn status(code: u16, reason: &'static str) -> Self {
        Self::Status {
            code,
            reason,
            retry_after: None,
        }
    }

    /// The HTTP status the proxy answers with instead of forwarding, if any.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(kopf_tests::proxy::Fault::WatchGone.status_code(), Some(200));
    /// assert_eq!(kopf_tests::proxy::Fault::Stall.status_code(), None);
    /// ```
    #[must_use]
    pub fn status_code(&self) -> Option<u16> {
        match self {
            Self::Status { code, .. } => Some(*code),
            Self::WatchGone => Some(200),
            Self::CutWatch { .. } | Self::Delay(_) | Self::Stall | Self::Hold | Self::Reset => None,
        }
    }
}

/// A fault for the requests a [`Match`] selects, applied at most `times` times (or forever).
///
/// # Examples
///
/// ```
/// use kopf_tests::proxy::{Fault, Match, Rule};
///
/// // The next two status patches are answered 409, later ones are forwarded.
/// let rule = Rule::new(Match::method(http::Method::PATCH).path("/status"), Fault::conflict())
///     .times(2);
/// assert_eq!(rule.remaining(), Some(2));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    matcher: Match,
    fault: Fault,
    remaining: Option<u64>,
}

impl Rule {
    /// A rule that applies `fault` to every request `matcher` selects, until removed.
    ///
    /// # Examples
    ///
    /// ```
    /// use kopf_tests::proxy::{Fault, Match, Rule};
    /// assert_eq!(Rule::new(Match::any(), Fault::unavailable()).remaining(), None);
    /// ```
    #[must_use]
    pub fn new(matcher: Match, fault: Fault) -> Self {
        Self {
            matcher,
            fault,
            remaining: None,
        }
    }

    /// Applies the fault only to the next `n` matching requests.
    ///
    /// # Examples
    ///
    /// ```
    /// use kopf_tests::proxy::{Fault, Match, Rule};
    /// let once = Rule::new(Match::watches(), Fault::WatchGone).times(1);
    /// assert_eq!(once.remaining(), Some(1));
    /// ```
    #[must_use]
    pub fn times(mut self, n: u64) -> Self {
        self.remaining = Some(n);
        self
    }

    /// How many more requests this rule applies to (`None`: unlimited).
    ///
    /// # Examples
    ///
    /// ```
    /// use kopf_tests::proxy::{Fault, Match, Rule};
    /// assert_eq!(Rule::new(Match::any(), Fault::Stall).times(5).remaining(), Some(5));
    /// ```
    #[must_use]
    pub fn remaining(&self) -> Option<u64> {
        self.remaining
    }
}

/// The installed rules, first match wins; exhausted rules are removed.
#[derive(Debug, Default)]
pub(crate) struct RuleTable {
    rules: Vec<(u64, Rule)>,
    next_id: u64,
}

impl RuleTable {
    /// Installs `rule` (a rule limited to zero uses is not installed) and returns its id.
    pub(crate) fn add(&mut self, rule: Rule) -> u64 {
        self.next_id += 1;
        if rule.remaining != Some(0) {
            self.rules.push((self.next_id, rule));
        }
        self.next_id
    }

    pub(crate) fn remove(&mut self, id: u64) -> bool {
        let before = self.rules.len();
        self.rules.retain(|(rule_id, _)| *rule_id != id);
        self.rules.len() != before
    }

    pub(crate) fn clear(&mut self) {
        self.rules.clear();
    }

    pub(crate) fn len(&self) -> usize {
        self.rules.len()
    }

    /// The fault for this request, consuming one use of the first matching rule.
    pub(crate) fn take(&mut self, method: &Method, path_and_query: &str) -> Option<Fault> {
        let index = self
            .rules
            .iter()
            .position(|(_, rule)| rule.matcher.matches(method, path_and_query))?;
        let rule = &mut self.rules[index].1;
        let fault = rule.fault.clone();
        if let Some(left) = rule.remaining.as_mut() {
            *left = left.saturating_sub(1);
            if *left == 0 {
                self.rules.remove(index);
            }
        }
        Some(fault)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limited_rules_run_out_and_the_next_rule_applies() {
        let mut table = RuleTable::default();
        table.add(Rule::new(Match::method(Method::PATCH), Fault::conflict()).times(2));
        table.add(Rule::new(Match::any(), Fault::unavailable()));
        let path = "/api/v1/namespaces/a/configmaps/x";
        assert_eq!(table.take(&Method::PATCH, path), Some(Fault::conflict()));
        assert_eq!(table.take(&Method::PATCH, path), Some(Fault::conflict()));
        assert_eq!(table.take(&Method::PATCH, path), Some(Fault::unavailable()));
        assert_eq!(table.len(), 1);
    }

    #[test]
    fn zero_times_never_applies_and_removal_works() {
        let mut table = RuleTable::default();
        let zero = table.add(Rule::new(Match::any(), Fault::Stall).times(0));
        assert_eq!(table.take(&Method::GET, "/"), None);
        assert!(!table.remove(zero));
        let forever = table.add(Rule::new(Match::any(), Fault::Reset));
        assert_eq!(table.take(&Method::GET, "/"), Some(Fault::Reset));
        assert!(table.remove(forever));
        assert_eq!(table.take(&Method::GET, "/"), None);
    }

    #[test]
    fn watch_detection_reads_only_the_query() {
        assert!(is_watch(
            &Method::GET,
            "/api/v1/pods?labelSelector=a&watch=true"
        ));
        assert!(!is_watch(
            &Method::GET,
            "/api/v1/namespaces/watch=true/pods"
        ));
        assert!(!is_watch(&Method::POST, "/api/v1/pods?watch=true"));
        assert!(!is_watch(&Method::GET, "/api/v1/pods?watch=false"));
    }
}
