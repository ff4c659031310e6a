//! Request accounting: counts per method and path, and a bounded log of recent requests.

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use http::Method;

use super::rules::{Fault, Match, is_watch};

/// At most this many distinct (method, path) keys are counted separately; the rest are summed
/// under [`OTHER_KEY`].
pub(crate) const MAX_KEYS: usize = 50_000;
/// The key of requests beyond [`MAX_KEYS`].
pub(crate) const OTHER_KEY: &str = "(other)";
/// The request log keeps the most recent this many requests.
pub const LOG_CAPACITY: usize = 20_000;

/// One request as the proxy saw it.
///
/// # Examples
///
/// ```no_run
/// # async fn doc(proxy: &kopf_tests::proxy::FaultProxy) {
/// for record in proxy.handle().log() {
///     println!("{:?} {} {} -> {:?}", record.at, record.method, record.path, record.fault);
/// }
/// # }
/// # let _ = doc;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    /// When the request arrived at the proxy.
    pub at: Instant,
    /// Its method.
    pub method: Method,
    /// Its path and query.
    pub path: String,
    /// The fault applied to it, if any (`None`: forwarded unchanged).
    pub fault: Option<Fault>,
}

/// Counters of the proxy's traffic.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    /// Requests per `(method, path without query, is watch)`.
    counts: BTreeMap<(Method, String, bool), u64>,
    log: VecDeque<RequestRecord>,
    pub(crate) total: u64,
    pub(crate) faults: u64,
    pub(crate) connections: u64,
    pub(crate) drops: u64,
}

impl Stats {
    pub(crate) fn record(&mut self, method: &Method, path_and_query: &str, fault: Option<&Fault>) {
        self.total += 1;
        if fault.is_some() {
            self.faults += 1;
        }
        let path = path_and_query
            .split_once('?')
            .map_or(path_and_query, |(path, _)| path);
        let watch = is_watch(method, path_and_query);
        let mut key = (method.clone(), path.to_owned(), watch);
        if !self.counts.contains_key(&key) && self.counts.len() >= MAX_KEYS {
            key = (method.clone(), OTHER_KEY.to_owned(), watch);
        }
        *self.counts.entry(key).or_default() += 1;
        if self.log.len() == LOG_CAPACITY {
            self.log.pop_front();
        }
        self.log.push_back(RequestRecord {
            at: Instant::now(),
            method: method.clone(),
            path: path_and_query.to_owned(),
            fault: fault.cloned(),
        });
    }

    /// The number of requests `matcher` selects, matching it against the path without the
    /// query (a watch is presented as `path?watch=true`).
    pub(crate) fn count(&self, matcher: &Match) -> u64 {
        self.counts
            .iter()
            .filter(|((method, path, watch), _)| {
                let shown = if *watch {
                    format!("{path}?watch=true")
                } else {
                    path.clone()
                };
                matcher.matches(method, &shown)
            })
            .map(|(_, n)| *n)
            .sum()
    }

    pub(crate) fn log(&self) -> Vec<RequestRecord> {
        self.log.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_path_and_watch_and_bounds_the_log() {
        let mut stats = Stats::default();
        for _ in 0..LOG_CAPACITY + 5 {
            stats.record(&Method::GET, "/api/v1/pods?watch=true&rv=1", None);
        }
        stats.record(&Method::GET, "/api/v1/pods?limit=500", None);
        stats.record(&Method::PATCH, "/api/v1/pods/a", Some(&Fault::conflict()));
        assert_eq!(stats.count(&Match::watches()), LOG_CAPACITY as u64 + 5);
        assert_eq!(stats.count(&Match::method(Method::GET).watch(false)), 1);
        assert_eq!(stats.count(&Match::any().path("/pods/a")), 1);
        assert_eq!(stats.faults, 1);
        assert_eq!(stats.log().len(), LOG_CAPACITY);
        assert_eq!(
            stats.log().last().map(|r| r.method.clone()),
            Some(Method::PATCH)
        );
    }
}
