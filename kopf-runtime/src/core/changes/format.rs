//! The format rules of the two annotations: compact JSON with a version `v` ([`VERSION`]) and
//! the UID `u` of the object they were written for ([`bound`]). Reading never panics: a
//! malformed value, another version or another object's value is a [`DecodeError`], which the
//! caller logs and reads as absent. A value without `u` (written before it was added) is read
//! as this object's.

use jiff::Timestamp;
use serde_json::Value;

use super::json::{escaped_len, json_str_len};

/// The format version this build writes and reads.
pub(crate) const VERSION: u64 = 1;
/// The most bytes of a stored message, as a JSON string without its quotes.
pub(crate) const MESSAGE_CAP: usize = 200;

/// Why a stored annotation cannot be read (the caller logs it and reads it as absent).
#[derive(Debug, thiserror::Error)]
pub(crate) enum DecodeError {
    /// Not JSON at all.
    #[error("not JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// Written by another version of the format.
    #[error("format version {0} is unknown (this build reads version {VERSION})")]
    Version(u64),
    /// JSON, but not of the expected shape.
    #[error("malformed `{0}`")]
    Malformed(&'static str),
    /// Written for another object (copied, e.g. in YAML exported from it).
    #[error("written for the object with UID {0}, not this one (copied from another object?)")]
    OtherObject(String),
}

/// Parses a stored annotation and checks its `v`.
///
/// # Errors
/// Not JSON, a missing or non-integer `v`, or another version.
pub(crate) fn parse(text: &str) -> Result<Value, DecodeError> {
    let json: Value = serde_json::from_str(text)?;
    match json.get("v").map(Value::as_u64) {
        Some(Some(VERSION)) => Ok(json),
        Some(Some(other)) => Err(DecodeError::Version(other)),
        _ => Err(DecodeError::Malformed("v")),
    }
}

/// Checks that a parsed annotation was written for the object `uid` (or before UIDs were
/// written).
///
/// # Errors
/// A `u` that is not a string, or another object's UID.
pub(crate) fn check_owner(json: &Value, uid: &str) -> Result<(), DecodeError> {
    match json.get("u").map(Value::as_str) {
        None => Ok(()),
        Some(Some(owner)) if owner == uid => Ok(()),
        Some(Some(owner)) => Err(DecodeError::OtherObject(owner.to_owned())),
        Some(None) => Err(DecodeError::Malformed("u")),
    }
}

/// `doc` with the UID `u` of the object it is written for, if given.
pub(crate) fn bound(mut doc: serde_json::Map<String, Value>, uid: Option<&str>) -> Value {
    if let Some(uid) = uid {
        doc.insert("u".to_owned(), uid.into());
    }
    Value::Object(doc)
}

/// A stored time (RFC 3339).
pub(crate) fn time(json: Option<&Value>) -> Option<Timestamp> {
    json?.as_str()?.parse().ok()
}

/// `text` cut to at most [`MESSAGE_CAP`] bytes as a JSON string (a cut one ends with `…`).
#[must_use]
pub(crate) fn truncate_message(text: &str) -> String {
    if json_str_len(text) - 2 <= MESSAGE_CAP {
        return text.to_owned();
    }
    let room = MESSAGE_CAP - '…'.len_utf8();
    let mut used = 0;
    let mut out = String::new();
    for c in text.chars() {
        used += escaped_len(c);
        if used > room {
            break;
        }
        out.push(c);
    }
    out.push('…');
    out
}
