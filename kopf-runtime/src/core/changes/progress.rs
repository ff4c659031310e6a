//! A change in flight (`<prefix><op>.progress`): its cause, its pinned target and one record per
//! selected handler. It is absent at steady state.
//!
//! ```text
//! {"c":"update","h":{"make_bucket":{"n":1,"st":"done"},
//!                    "set_acl":{"at":"…Z","m":"403 from S3","n":2,"s":"…Z","st":"wait"},
//!                    "tag":{}},
//!  "s":"2026-06-01T10:00:00Z","t":{…the target, a diff base…},"v":1}
//! ```
//!
//! - `st` ∈ `done`, `failed`, `skip`, `wait`; absent: pending. `n`: attempts made (absent: 0).
//!   `s`: the first attempt of a waiting handler (`retry_timeout` counts from it). `at`: its
//!   next attempt. `m`: the last error of a waiting or failed handler, at most
//!   [`MESSAGE_CAP`](super::keys::MESSAGE_CAP) bytes of JSON.
//! - Everything but the target takes at most [`PROGRESS_CAP`] bytes: [`super::ChangeHandlers`]
//!   refuses a kind whose worst case ([`worst_case`]) is larger, and messages that do not fit
//!   are left out.
//!
//! [`merge`] joins two progress records, e.g. ours and the one re-read after a conflict. For one
//! change (the same cause and target) each handler's record takes the more advanced one:
//! `pending < wait(n) < wait(n+1) < skip < failed < done`. Of two different changes, a delete
//! wins, then a fixed order of cause and target; the caller then re-decides.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use jiff::Timestamp;
use serde_json::{Map, Value};

use super::base::DiffBase;
use super::essence::json_str_len;
use super::keys::{DecodeError, VERSION, parse, time, truncate_message};
use super::{ChangeKind, Outcome};

/// The most bytes of the progress annotation besides the target.
pub(crate) const PROGRESS_CAP: usize = 8 * 1024;
/// The longest timestamp `jiff` prints (`-009999-01-02T01:59:59.999999999Z`).
const TIME_MAX: usize = 33;
/// The longest record, apart from its message:
/// `{"at":"<time>","n":4294967295,"s":"<time>","st":"failed"}`.
const RECORD_MAX: usize = 45 + 2 * TIME_MAX;
/// The longest progress apart from its target and records:
/// `{"c":"create","h":{},"s":"<time>","t":,"v":1}`.
const FRAME_MAX: usize = 39 + TIME_MAX;

/// Where one handler is in a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Not run yet in this change.
    Pending,
    /// Failed, to be retried at `at`.
    Waiting {
        /// The next attempt.
        at: Timestamp,
    },
    /// Its filters did not match at its turn.
    Skipped,
    /// Failed for good (permanent, or out of retries).
    Failed,
    /// Succeeded (or an ignored error).
    Done,
}

impl State {
    /// Whether the handler is finished for this change.
    #[must_use]
    pub(crate) fn is_terminal(self) -> bool {
        matches!(self, Self::Skipped | Self::Failed | Self::Done)
    }

    /// The rank in the merge order.
    fn tier(self) -> u8 {
        match self {
            Self::Pending => 0,
            Self::Waiting { .. } => 1,
            Self::Skipped => 2,
            Self::Failed => 3,
            Self::Done => 4,
        }
    }

    fn at(self) -> Option<Timestamp> {
        match self {
            Self::Waiting { at } => Some(at),
            _ => None,
        }
    }
}

/// One handler's record in a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    /// Where it is.
    pub(crate) state: State,
    /// The attempts made.
    pub(crate) retries: u32,
    /// When its first attempt began (kept while it waits).
    pub(crate) started: Option<Timestamp>,
    /// The last error, truncated (waiting and failed handlers).
    pub(crate) message: Option<String>,
}

impl Record {
    /// A handler that has not run.
    pub(crate) const PENDING: Self = Self {
        state: State::Pending,
        retries: 0,
        started: None,
        message: None,
    };

    /// The record after an attempt that ended with `outcome` at `now` (Running → Done,
    /// Waiting or Failed; see [`super::machine`]). It never goes back: a record that became
    /// more advanced meanwhile (merged from another replica) stays.
    #[must_use]
    pub(crate) fn after(&self, outcome: Outcome<'_>, now: Timestamp) -> Self {
        let retries = self.retries.saturating_add(1);
        let (state, started, message) = match outcome {
            Outcome::Succeeded | Outcome::Ignored => (State::Done, None, None),
            Outcome::Retry { delay, message } => {
                let at = now.saturating_add(delay).unwrap_or(Timestamp::MAX);
                (State::Waiting { at }, self.started, Some(message))
            }
            Outcome::Failed { message } => (State::Failed, None, Some(message)),
        };
        let message = message.map(truncate_message);
        self.join(&Self {
            state,
            retries,
            started,
            message,
        })
    }

    /// The record of a handler whose filters did not match at its turn.
    #[must_use]
    pub(crate) fn skipped(&self) -> Self {
        Self {
            state: State::Skipped,
            retries: self.retries,
            ..Self::PENDING
        }
    }

    /// The merge order: the state, then the attempts, then the rest (a total order).
    fn rank(&self) -> (u8, u32, Option<Timestamp>, Option<Timestamp>, Option<&str>) {
        let state = self.state;
        let message = self.message.as_deref();
        (
            state.tier(),
            self.retries,
            state.at(),
            self.started,
            message,
        )
    }

    /// The more advanced of two records.
    #[must_use]
    pub(crate) fn join(&self, other: &Self) -> Self {
        if other.rank() > self.rank() {
            other.clone()
        } else {
            self.clone()
        }
    }

    fn to_json(&self) -> Map<String, Value> {
        let mut map = Map::new();
        let name = match self.state {
            State::Pending => None,
            State::Waiting { at } => {
                map.insert("at".to_owned(), at.to_string().into());
                Some("wait")
            }
            State::Skipped => Some("skip"),
            State::Failed => Some("failed"),
            State::Done => Some("done"),
        };
        if let Some(name) = name {
            map.insert("st".to_owned(), name.into());
        }
        if self.retries > 0 {
            map.insert("n".to_owned(), self.retries.into());
        }
        if let Some(started) = self.started {
            map.insert("s".to_owned(), started.to_string().into());
        }
        map
    }

    fn from_json(json: &Value) -> Result<Self, DecodeError> {
        let map = json.as_object().ok_or(DecodeError::Malformed("h"))?;
        let state = match map.get("st").map(Value::as_str) {
            None => State::Pending,
            Some(Some("wait")) => State::Waiting {
                at: time(map.get("at")).ok_or(DecodeError::Malformed("h.at"))?,
            },
            Some(Some("skip")) => State::Skipped,
            Some(Some("failed")) => State::Failed,
            Some(Some("done")) => State::Done,
            Some(_) => return Err(DecodeError::Malformed("h.st")),
        };
        let retries = match map.get("n") {
            None => 0,
            Some(n) => n
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or(DecodeError::Malformed("h.n"))?,
        };
        let started = match map.get("s") {
            None => None,
            some => Some(time(some).ok_or(DecodeError::Malformed("h.s"))?),
        };
        let message = match map.get("m") {
            None => None,
            Some(Value::String(m)) => Some(truncate_message(m)),
            Some(_) => return Err(DecodeError::Malformed("h.m")),
        };
        Ok(Self {
            state,
            retries,
            started,
            message,
        })
    }
}

/// A change in flight.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Progress {
    /// The cause: the kind of the handlers it runs.
    pub(crate) cause: ChangeKind,
    /// The version the change is pinned to (for create and update, the next base).
    pub(crate) target: DiffBase,
    /// When the change began.
    pub(crate) started: Timestamp,
    /// One record per selected handler, by id.
    pub(crate) handlers: BTreeMap<String, Record>,
}

impl Progress {
    /// Whether every handler is finished.
    #[must_use]
    pub(crate) fn is_finished(&self) -> bool {
        self.handlers.values().all(|r| r.state.is_terminal())
    }

    /// Whether `other` is the same change (cause and target).
    #[must_use]
    pub(crate) fn same_change(&self, other: &Self) -> bool {
        self.cause == other.cause && self.target == other.target
    }

    /// The annotation's value (compact JSON; messages that do not fit are left out).
    #[must_use]
    pub(crate) fn encode(&self) -> String {
        let target = self.target.to_json();
        let target_len = target.to_string().len();
        let mut records: Map<String, Value> = self
            .handlers
            .iter()
            .map(|(id, record)| (id.clone(), Value::Object(record.to_json())))
            .collect();
        let mut doc = Map::new();
        doc.insert("c".to_owned(), self.cause.as_str().into());
        doc.insert("s".to_owned(), self.started.to_string().into());
        doc.insert("t".to_owned(), target);
        doc.insert("v".to_owned(), VERSION.into());
        doc.insert("h".to_owned(), Value::Object(records.clone()));
        let bare = Value::Object(doc.clone()).to_string().len() - target_len;
        let mut room = PROGRESS_CAP.saturating_sub(bare);
        // The waiting handler's message first, then the failed ones'.
        let mut messages: Vec<(&String, &Record)> = self.handlers.iter().collect();
        messages.sort_by_key(|(_, r)| !matches!(r.state, State::Waiting { .. }));
        for (id, record) in messages {
            let (Some(message), Some(Value::Object(json))) = (&record.message, records.get_mut(id))
            else {
                continue;
            };
            let message = truncate_message(message);
            // `,"m":"…"` (without the comma when the record was empty: one byte to spare).
            let cost = 5 + json_str_len(&message);
            if cost <= room {
                room -= cost;
                json.insert("m".to_owned(), message.into());
            }
        }
        doc.insert("h".to_owned(), Value::Object(records));
        Value::Object(doc).to_string()
    }

    /// Reads an annotation's value.
    ///
    /// # Errors
    /// Not JSON, another version, or a malformed field.
    pub(crate) fn decode(text: &str) -> Result<Self, DecodeError> {
        let json = parse(text)?;
        let cause = json
            .get("c")
            .and_then(Value::as_str)
            .and_then(ChangeKind::parse)
            .ok_or(DecodeError::Malformed("c"))?;
        let target = DiffBase::from_json(json.get("t").ok_or(DecodeError::Malformed("t"))?)?;
        let started = time(json.get("s")).ok_or(DecodeError::Malformed("s"))?;
        let handlers = json
            .get("h")
            .and_then(Value::as_object)
            .ok_or(DecodeError::Malformed("h"))?
            .iter()
            .map(|(id, record)| Ok((id.clone(), Record::from_json(record)?)))
            .collect::<Result<_, DecodeError>>()?;
        Ok(Self {
            cause,
            target,
            started,
            handlers,
        })
    }
}

/// The order of two different changes: a delete first, then by cause and target.
fn change_order(a: &Progress, b: &Progress) -> Ordering {
    let key = |p: &Progress| (p.cause == ChangeKind::Delete, p.cause, p.target.digest);
    key(a)
        .cmp(&key(b))
        .then_with(|| a.target.encode().cmp(&b.target.encode()))
}

/// The join of two progress records: commutative, idempotent, associative, and never behind
/// either input (see the module docs).
#[must_use]
pub(crate) fn merge(a: &Progress, b: &Progress) -> Progress {
    if !a.same_change(b) {
        return match change_order(a, b) {
            Ordering::Less => b.clone(),
            _ => a.clone(),
        };
    }
    let mut handlers = a.handlers.clone();
    for (id, theirs) in &b.handlers {
        handlers
            .entry(id.clone())
            .and_modify(|ours| *ours = ours.join(theirs))
            .or_insert_with(|| theirs.clone());
    }
    Progress {
        cause: a.cause,
        target: a.target.clone(),
        started: a.started.min(b.started),
        handlers,
    }
}

/// The most bytes a progress with the handlers `ids` can take besides its target,
/// without messages (which are only added while they fit).
pub(crate) fn worst_case<'a>(ids: impl Iterator<Item = &'a str>) -> usize {
    let records: usize = ids.map(|id| json_str_len(id) + 1 + RECORD_MAX + 1).sum();
    FRAME_MAX + records
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use std::time::Duration;

    use super::super::base::Stored;
    use super::super::keys::MESSAGE_CAP;
    use super::super::tests::t;
    use super::*;

    fn target(digest: u64) -> DiffBase {
        let size = ("spec.size".to_owned(), Stored::Value(json!(digest % 3)));
        DiffBase {
            digest,
            fields: [size].into_iter().collect(),
        }
    }

    fn rec(state: State, retries: u32, started: Option<i64>, message: Option<&str>) -> Record {
        let (started, message) = (started.map(t), message.map(str::to_owned));
        Record {
            state,
            retries,
            started,
            message,
        }
    }

    fn sample() -> Progress {
        let waiting = rec(
            State::Waiting { at: t(60) },
            2,
            Some(1),
            Some("403 from S3"),
        );
        let handlers = [
            ("make_bucket", rec(State::Done, 1, None, None)),
            ("set_acl", waiting),
            ("tag", Record::PENDING),
        ];
        let handlers = handlers.into_iter().map(|(id, r)| (id.to_owned(), r));
        Progress {
            cause: ChangeKind::Update,
            target: target(0x9f2c),
            started: t(0),
            handlers: handlers.collect(),
        }
    }

    #[test]
    fn the_encoding_is_compact_and_round_trips() {
        let text = sample().encode();
        assert_eq!(
            text,
            r#"{"c":"update","h":{"make_bucket":{"n":1,"st":"done"},"set_acl":{"at":"2026-05-28T20:27:40Z","m":"403 from S3","n":2,"s":"2026-05-28T20:26:41Z","st":"wait"},"tag":{}},"s":"2026-05-28T20:26:40Z","t":{"d":"0000000000009f2c","f":{"spec.size":2}},"v":1}"#
        );
        assert_eq!(Progress::decode(&text).unwrap(), sample());
        assert!(!sample().is_finished());
    }

    /// The rows "Running(n) | outcome" of the transition table ([`super::super::machine`]).
    #[test]
    fn an_attempt_moves_a_record_out_of_running() {
        let retry = Outcome::Retry {
            delay: Duration::from_secs(5),
            message: "503",
        };
        let failed = Outcome::Failed { message: "403" };
        let waiting = rec(State::Waiting { at: t(10) }, 1, Some(2), Some("503"));
        let running = rec(State::Pending, 0, Some(10), None);
        #[rustfmt::skip]
        let rows = [
            ("Running(0), succeeded", &running, Outcome::Succeeded, rec(State::Done, 1, None, None)),
            ("Running(1), succeeded", &waiting, Outcome::Succeeded, rec(State::Done, 2, None, None)),
            ("Running(0), retry", &running, retry, rec(State::Waiting { at: t(15) }, 1, Some(10), Some("503"))),
            ("Running(1), retry", &waiting, retry, rec(State::Waiting { at: t(15) }, 2, Some(2), Some("503"))),
            ("Running(0), failed", &running, failed, rec(State::Failed, 1, None, Some("403"))),
            ("Running(0), ignored", &running, Outcome::Ignored, rec(State::Done, 1, None, None)),
            ("already done elsewhere", &rec(State::Done, 1, None, None), retry, rec(State::Done, 1, None, None)),
        ];
        for (row, from, outcome, to) in rows {
            assert_eq!(from.after(outcome, t(10)), to, "row {row}");
        }
        assert_eq!(waiting.skipped(), rec(State::Skipped, 1, None, None));
        let long = "e".repeat(500);
        let cut = running.after(Outcome::Failed { message: &long }, t(10));
        assert!(cut.message.is_some_and(|m| m.len() <= MESSAGE_CAP));
    }

    #[test]
    fn the_worst_case_bounds_the_encoding_and_messages_give_way() {
        // 56 handlers with 28-character ids fit; 57 do not.
        let ids: Vec<String> = (0..57).map(|i| format!("handler-{i:0>20}")).collect();
        assert!(worst_case(ids.iter().map(String::as_str)) > PROGRESS_CAP);
        let ids = &ids[..56];
        let worst = worst_case(ids.iter().map(String::as_str));
        assert!(worst <= PROGRESS_CAP, "{worst}");
        let nanos = jiff::SignedDuration::new(0, 999_999_999);
        let at = Timestamp::MIN.saturating_add(nanos).unwrap();
        assert_eq!(at.to_string().len(), TIME_MAX, "the longest time");
        assert!(Timestamp::MAX.to_string().len() <= TIME_MAX);
        let heavy = Record {
            state: State::Waiting { at },
            retries: u32::MAX,
            started: Some(at),
            message: Some("\"".repeat(MESSAGE_CAP)),
        };
        let mut progress = Progress {
            cause: ChangeKind::Create,
            target: target(1),
            started: at,
            handlers: ids.iter().map(|id| (id.clone(), heavy.clone())).collect(),
        };
        let text = progress.encode();
        let target_len = progress.target.to_json().to_string().len();
        assert!(text.len() - target_len <= PROGRESS_CAP, "{}", text.len());
        let decoded = Progress::decode(&text).unwrap();
        let kept = decoded.handlers.values().filter(|r| r.message.is_some());
        assert_eq!(kept.count(), 1, "room for one message only");
        progress
            .handlers
            .values_mut()
            .for_each(|r| r.message = None);
        assert!(progress.encode().len() - target_len <= worst);
    }

    #[test]
    fn bad_input_is_an_error_value() {
        let ok = sample().encode();
        #[rustfmt::skip]
        let cases = [
            ("{", "not JSON"),
            (r#"{"v":7}"#, "format version 7 is unknown"),
            (r#"{"v":1.5}"#, "malformed `v`"),
            (&ok.replace(r#""c":"update""#, r#""c":"upgrade""#), "malformed `c`"),
            (&ok.replace(r#""t":{"d":"0000000000009f2c","#, r#""t":{"#), "malformed `d`"),
            (&ok.replace(r#""s":"2026-05-28T20:26:40Z""#, r#""s":"today""#), "malformed `s`"),
            (&ok.replace(r#""tag":{}"#, r#""tag":[]"#), "malformed `h`"),
            (&ok.replace(r#""st":"done""#, r#""st":"gone""#), "malformed `h.st`"),
            (&ok.replace(r#""n":1"#, r#""n":-1"#), "malformed `h.n`"),
            (&ok.replace(r#""n":2"#, r#""n":4294967296"#), "malformed `h.n`"),
            (&ok.replace(r#""at":"2026-05-28T20:27:40Z","#, ""), "malformed `h.at`"),
            (&ok.replace(r#""s":"2026-05-28T20:26:41Z""#, r#""s":1"#), "malformed `h.s`"),
            (&ok.replace(r#""m":"403 from S3""#, r#""m":403"#), "malformed `h.m`"),
        ];
        for (text, error) in cases {
            let err = Progress::decode(text).unwrap_err().to_string();
            assert!(err.starts_with(error), "{text}: {err}");
        }
    }

    #[test]
    fn of_two_changes_a_delete_wins_and_one_change_joins() {
        let delete = Progress {
            cause: ChangeKind::Delete,
            target: target(1),
            ..sample()
        };
        assert_eq!(merge(&sample(), &delete), delete);
        assert_eq!(merge(&delete, &sample()), delete);
        let mut done = sample();
        let finished = rec(State::Done, 3, None, None);
        done.handlers.insert("set_acl".to_owned(), finished.clone());
        done.started = t(-5);
        let merged = merge(&sample(), &done);
        assert_eq!(
            (&merged.handlers["set_acl"], merged.started),
            (&finished, t(-5))
        );
    }

    fn arb_record() -> impl Strategy<Value = Record> {
        let state = prop_oneof![
            Just(State::Pending),
            (0..3_i64).prop_map(|s| State::Waiting { at: t(s) }),
            Just(State::Skipped),
            Just(State::Failed),
            Just(State::Done),
        ];
        let message = prop::option::of(prop_oneof![Just("a"), Just("b\n\"")]);
        (state, 0..3_u32, prop::option::of(0..2_i64), message)
            .prop_map(|(state, n, started, message)| rec(state, n, started, message))
    }

    fn arb_progress() -> impl Strategy<Value = Progress> {
        let cause = prop_oneof![Just(ChangeKind::Update), Just(ChangeKind::Delete)];
        let handlers = prop::collection::btree_map("[abc]", arb_record(), 0..4);
        (cause, 0..2_u64, 0..3_i64, handlers).prop_map(|(cause, digest, started, handlers)| {
            let (target, started) = (target(digest), t(started));
            Progress {
                cause,
                target,
                started,
                handlers,
            }
        })
    }

    proptest! {
        #[test]
        fn decoding_never_panics(text in "\\PC{0,80}", json in r#"[{}\[\]":,0-9a-z#=TZ .-]{0,80}"#) {
            let _ = Progress::decode(&text);
            let _ = Progress::decode(&json);
            let ok = sample().encode();
            let _ = Progress::decode(&format!("{}{json}", &ok[..ok.len() / 2]));
            let _ = Progress::decode(&ok.replace("tag", &json));
            let _ = Progress::decode(&ok.replace("{}", &json));
        }

        #[test]
        fn progress_round_trips(p in arb_progress()) {
            prop_assert_eq!(Progress::decode(&p.encode()).unwrap(), p);
        }

        #[test]
        fn merge_is_commutative_idempotent_and_associative(
            a in arb_progress(), b in arb_progress(), c in arb_progress(),
        ) {
            prop_assert_eq!(merge(&a, &b), merge(&b, &a));
            prop_assert_eq!(merge(&a, &a), a.clone());
            prop_assert_eq!(merge(&merge(&a, &b), &c), merge(&a, &merge(&b, &c)));
        }

        #[test]
        fn merge_is_monotone(a in arb_progress(), b in arb_progress(), c in arb_progress()) {
            let ab = merge(&a, &b);
            // Never behind an input: merging an input again changes nothing.
            prop_assert_eq!(merge(&ab, &a), ab.clone());
            prop_assert_eq!(merge(&ab, &b), ab.clone());
            if ab.same_change(&a) {
                for (id, mine) in &a.handlers {
                    prop_assert_eq!(mine.join(&ab.handlers[id]), ab.handlers[id].clone());
                }
            }
            // Order-preserving: a ≤ a ∨ b implies a ∨ c ≤ (a ∨ b) ∨ c.
            prop_assert_eq!(merge(&merge(&a, &c), &merge(&ab, &c)), merge(&ab, &c));
        }
    }
}
