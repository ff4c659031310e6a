//! A change in flight (`<prefix><op>.progress`): its cause, its pinned target and one record per
//! selected handler. It is absent at steady state.
//!
//! ```text
//! {"c":"update","h":{"make_bucket":{"n":1,"st":"done"},
//!  "set_acl":{"at":"…Z","m":"403 from S3","n":2,"s":"…Z","st":"wait"},"tag":{}},
//!  "s":"2026-06-01T10:00:00Z","t":{…the target, a diff base…},"u":"<uid>","v":1}
//! ```
//!
//! - `u`: the UID of the object it was written for: another object's progress is ignored
//!   (absent in progress written before it was added: read as this object's). A delete
//!   progress is only ever resumed on an object being deleted (see `change_state`).
//! - `st` ∈ `done`, `failed`, `skip`, `wait`; absent: pending. `n`: attempts made (absent: 0).
//!   `s`: the first attempt of a waiting handler (`retry_timeout` counts from it). `at`: its
//!   next attempt. `m`: the last error of a waiting or failed handler, at most
//!   [`MESSAGE_CAP`](super::format::MESSAGE_CAP) bytes of JSON.
//! - Everything but the target takes at most [`PROGRESS_CAP`] bytes: a kind whose worst case
//!   is larger is refused ([`super::worst_case`]); messages that do not fit are left out.
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
use super::format::{DecodeError, VERSION, check_owner, parse, time, truncate_message};
use super::json::json_str_len;
use super::{ChangeKind, Outcome};

/// The most bytes of the progress annotation besides the target.
pub(crate) const PROGRESS_CAP: usize = 8 * 1024;

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

    /// The rank in the merge order (then a waiting handler's next attempt).
    fn rank(self) -> (u8, Option<Timestamp>) {
        match self {
            Self::Pending => (0, None),
            Self::Waiting { at } => (1, Some(at)),
            Self::Skipped => (2, None),
            Self::Failed => (3, None),
            Self::Done => (4, None),
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
    fn rank(&self) -> impl Ord + '_ {
        let message = self.message.as_deref();
        (self.state.rank(), self.retries, self.started, message)
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

    /// The record's JSON (`st`, `n`, `s`, `at`; the message is added by [`Progress::encode`]).
    fn to_json(&self) -> Map<String, Value> {
        let (name, at) = match self.state {
            State::Pending => (None, None),
            State::Waiting { at } => (Some("wait"), Some(at)),
            State::Skipped => (Some("skip"), None),
            State::Failed => (Some("failed"), None),
            State::Done => (Some("done"), None),
        };
        let fields = [
            ("at", at.map(|at| at.to_string().into())),
            ("n", (self.retries > 0).then(|| self.retries.into())),
            ("s", self.started.map(|s| s.to_string().into())),
            ("st", name.map(Value::from)),
        ];
        let fields = fields.into_iter();
        fields
            .filter_map(|(key, value)| Some((key.to_owned(), value?)))
            .collect()
    }

    /// Reads a record's JSON.
    fn from_json(json: &Value) -> Result<Self, DecodeError> {
        let bad = DecodeError::Malformed;
        let map = json.as_object().ok_or(bad("h"))?;
        let state = match map.get("st").map(Value::as_str) {
            None => State::Pending,
            Some(Some("wait")) => State::Waiting {
                at: time(map.get("at")).ok_or(bad("h.at"))?,
            },
            Some(Some("skip")) => State::Skipped,
            Some(Some("failed")) => State::Failed,
            Some(Some("done")) => State::Done,
            Some(_) => return Err(bad("h.st")),
        };
        let n = map
            .get("n")
            .map(|n| n.as_u64().and_then(|n| u32::try_from(n).ok()));
        let started = map.get("s").map(|s| time(Some(s)).ok_or(bad("h.s")));
        let message = map
            .get("m")
            .map(|m| m.as_str().map(truncate_message).ok_or(bad("h.m")));
        Ok(Self {
            state,
            retries: n.unwrap_or(Some(0)).ok_or(bad("h.n"))?,
            started: started.transpose()?,
            message: message.transpose()?,
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

    #[cfg(test)]
    /// The annotation's value (compact JSON; messages that do not fit are left out), without
    /// the object's UID.
    #[must_use]
    pub(crate) fn encode(&self) -> String {
        self.encode_bound(None)
    }

    /// The annotation's value for the object `uid` (`None`: unbound).
    #[must_use]
    pub(crate) fn encode_bound(&self, uid: Option<&str>) -> String {
        let target = self.target.to_json();
        let target_len = target.to_string().len();
        let records = self.handlers.iter();
        let records = records.map(|(id, r)| (id.clone(), Value::Object(r.to_json())));
        let mut records: Map<String, Value> = records.collect();
        let mut doc = Map::new();
        doc.insert("c".to_owned(), self.cause.as_str().into());
        doc.insert("s".to_owned(), self.started.to_string().into());
        doc.insert("t".to_owned(), target);
        doc.insert("v".to_owned(), VERSION.into());
        doc.insert("h".to_owned(), Value::Object(records.clone()));
        if let Some(uid) = uid {
            doc.insert("u".to_owned(), uid.into());
        }
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

    /// Reads the annotation's value on the object `uid`.
    ///
    /// # Errors
    /// As [`Self::decode`], and [`DecodeError::OtherObject`] for another object's value.
    pub(crate) fn decode_for(text: &str, uid: &str) -> Result<Self, DecodeError> {
        let json = parse(text)?;
        check_owner(&json, uid)?;
        Self::from_json(&json)
    }

    #[cfg(test)]
    /// Reads an annotation's value (whichever object it was written for).
    ///
    /// # Errors
    /// Not JSON, another version, or a malformed field.
    pub(crate) fn decode(text: &str) -> Result<Self, DecodeError> {
        Self::from_json(&parse(text)?)
    }

    /// Reads the parsed JSON of an annotation's value.
    fn from_json(json: &Value) -> Result<Self, DecodeError> {
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
    let mut merged = a.clone();
    for (id, theirs) in &b.handlers {
        let ours = merged.handlers.entry(id.clone());
        ours.and_modify(|ours| *ours = ours.join(theirs))
            .or_insert_with(|| theirs.clone());
    }
    merged.started = merged.started.min(b.started);
    merged
}

#[cfg(test)]
#[path = "progress_tests.rs"]
mod tests;
