//! The demo operator's log, as the scenario sees it: every JSON line of the operator process is
//! shown in a short human form, and the handlers' `demo` events are kept with their arrival
//! instants for the checks and the summary.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt as _, AsyncRead, BufReader};
use tokio::time::Instant;

/// One handler event from the operator's log.
#[derive(Debug, Clone)]
pub(crate) struct Event {
    /// When the line arrived (always after the event happened).
    pub(crate) at: Instant,
    /// The `demo` field: `daemon-started`, `timer-fired`, ...
    pub(crate) kind: String,
    /// The object's name.
    pub(crate) object: String,
    /// The `reason` field (daemon stops), if any.
    pub(crate) reason: Option<String>,
}

/// The events seen so far, shared by the log reader and the scenario.
#[derive(Debug, Clone)]
pub(crate) struct Journal {
    events: Arc<Mutex<Vec<Event>>>,
    /// The scenario's start, for the `+12.3s` stamps.
    pub(crate) t0: Instant,
}

impl Journal {
    pub(crate) fn new(t0: Instant) -> Self {
        Self {
            events: Arc::default(),
            t0,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Event>> {
        self.events.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The events of `kind` for `object` (any object if `None`).
    pub(crate) fn events(&self, kind: &str, object: Option<&str>) -> Vec<Event> {
        self.lock()
            .iter()
            .filter(|e| e.kind == kind && object.is_none_or(|o| e.object == o))
            .cloned()
            .collect()
    }

    /// How many events of `kind` for `object` (any object if `None`).
    pub(crate) fn count(&self, kind: &str, object: Option<&str>) -> usize {
        self.events(kind, object).len()
    }

    /// Waits until `ready` holds, polling every 100 ms, for at most `timeout`. `true` if it held.
    pub(crate) async fn wait(&self, timeout: Duration, ready: impl Fn(&Self) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if ready(self) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A `+12.3s` stamp for now.
    pub(crate) fn stamp(&self) -> String {
        format!("+{:5.1}s", self.t0.elapsed().as_secs_f64())
    }

    /// Reads the operator's log lines until the stream ends, recording and printing them.
    pub(crate) async fn follow(self, stream: impl AsyncRead + Unpin) {
        let mut lines = BufReader::new(stream).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            self.line(&line);
        }
    }

    fn line(&self, line: &str) {
        let Ok(json) = serde_json::from_str::<Value>(line) else {
            println!("  {} │ {line}", self.stamp());
            return;
        };
        let fields = &json["fields"];
        let text = |v: &Value| v.as_str().map(str::to_owned);
        let level = json["level"].as_str().unwrap_or("INFO");
        let message = fields["message"].as_str().unwrap_or_default();
        if let (Some(kind), Some(object)) = (text(&fields["demo"]), text(&fields["object"])) {
            let mut detail = String::new();
            for key in ["beats", "reason", "field"] {
                if let Some(v) = fields.get(key) {
                    let v = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                    detail.push_str(&format!(" {key}={v}"));
                }
            }
            println!("  {} │ {object:<7} {message}{detail}", self.stamp());
            self.lock().push(Event {
                at: Instant::now(),
                kind,
                object,
                reason: text(&fields["reason"]),
            });
        } else if level != "DEBUG" && level != "TRACE" {
            let mut extra = String::new();
            if let Some(map) = fields.as_object() {
                for (key, value) in map.iter().filter(|(k, _)| *k != "message") {
                    extra.push_str(&format!(" {key}={value}"));
                }
            }
            println!("  {} │ [operator {level}] {message}{extra}", self.stamp());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn handler_events_are_recorded_and_other_lines_only_shown() {
        let journal = Journal::new(Instant::now());
        let lines = [
            r#"{"level":"INFO","fields":{"message":"daemon stopped","demo":"daemon-stopped","object":"demo-c","reason":"resource deleted","beats":6},"target":"demo::handlers"}"#,
            r#"{"level":"INFO","fields":{"message":"the operator has started","resources":1},"target":"kopf_runtime"}"#,
            "not json at all",
        ];
        journal.clone().follow(lines.join("\n").as_bytes()).await;
        let stops = journal.events("daemon-stopped", Some("demo-c"));
        assert_eq!(stops.len(), 1);
        assert_eq!(stops[0].reason.as_deref(), Some("resource deleted"));
        assert_eq!(journal.count("daemon-stopped", None), 1);
        assert_eq!(journal.count("daemon-started", None), 0);
        assert!(
            journal
                .wait(Duration::ZERO, |j| j.count("daemon-stopped", None) == 1)
                .await
        );
    }
}
