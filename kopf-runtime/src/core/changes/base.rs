//! The diff base (`<prefix><op>.last-handled`): what the object looked like when its last change
//! was handled, kept bounded however big the object is. It holds the essence's digest and the
//! watched fields only:
//!
//! ```text
//! {"d":"9f2c…(16 hex)","f":{"spec.size":3,"spec.big":{"#":"a1…(16 hex)"}},"u":"<uid>","v":1}
//! ```
//!
//! - `d`: the digest of the essence ([`super::essence`]).
//! - `f`: the watched fields that are present, by path (`f` is left out when empty). A value
//!   whose JSON is over [`FIELD_CAP`] bytes, or that would take `f` over [`FIELDS_CAP`] bytes,
//!   is stored as `{"#": its digest}` (elided: a change is still seen, the old value is not
//!   known). A value that is itself an object with the single key `#` or `=` is wrapped as
//!   `{"=": value}`.
//! - `u`: the UID of the object it was written for: another object's base is read as absent
//!   (absent in bases written before it was added: read as this object's).
//! - `v`: the format version. Any other version decodes to [`DecodeError::Version`], which the
//!   caller logs and reads as absent.
//!
//! For a 1 MiB object with one watched scalar, this is about 50 bytes.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::ChangeHandler;
use super::field::Observed;
use super::format::{DecodeError, VERSION, bound, check_owner, parse};
use super::json::{json_str_len, same};
use crate::core::hash::measure;

/// The largest watched value stored as is (its compact JSON, in bytes).
pub(crate) const FIELD_CAP: usize = 16 * 1024;
/// The largest `f` (its compact JSON, in bytes), unless the keys and digests alone are larger.
pub(crate) const FIELDS_CAP: usize = 32 * 1024;
/// The length of an elided value: `{"#":"0123456789abcdef"}`.
const ELIDED_LEN: usize = 24;
/// What wrapping a value as `{"=":…}` adds.
const WRAP_LEN: usize = 6;

/// One watched field's value in the base.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Stored {
    /// The value itself.
    Value(Value),
    /// Too big to store: only its digest.
    Elided(u64),
}

impl Stored {
    /// The value, unless elided.
    #[must_use]
    pub(crate) fn value(&self) -> Option<&Value> {
        match self {
            Self::Value(value) => Some(value),
            Self::Elided(_) => None,
        }
    }

    /// Whether the value is the same as `live`.
    #[must_use]
    pub(crate) fn matches(&self, live: &Value) -> bool {
        match self {
            Self::Value(value) => same(value, live),
            Self::Elided(digest) => measure(live).1 == *digest,
        }
    }

    /// The stored JSON: the value (wrapped if it looks like a marker), or `{"#": digest}`.
    fn to_json(&self) -> Value {
        match self {
            Self::Value(value) if needs_wrap(value) => wrap(value.clone()),
            Self::Value(value) => value.clone(),
            Self::Elided(digest) => single("#", Value::String(format!("{digest:016x}"))),
        }
    }

    /// Reads the stored JSON.
    fn from_json(value: &Value) -> Result<Self, DecodeError> {
        match value.as_object().filter(|map| map.len() == 1) {
            Some(map) if map.contains_key("#") => map
                .get("#")
                .and_then(Value::as_str)
                .and_then(parse_hex)
                .map(Self::Elided)
                .ok_or(DecodeError::Malformed("f.#")),
            Some(map) if map.contains_key("=") => {
                Ok(Self::Value(map.get("=").cloned().unwrap_or_default()))
            }
            _ => Ok(Self::Value(value.clone())),
        }
    }
}

/// Whether a stored value would read as a marker: an object with the single key `#` or `=`.
fn needs_wrap(value: &Value) -> bool {
    value
        .as_object()
        .is_some_and(|map| map.len() == 1 && (map.contains_key("#") || map.contains_key("=")))
}

/// `{"=": value}`.
fn wrap(value: Value) -> Value {
    single("=", value)
}

/// An object with the one entry `key: value`.
fn single(key: &str, value: Value) -> Value {
    let mut map = Map::new();
    map.insert(key.to_owned(), value);
    Value::Object(map)
}

/// The value of exactly 16 hex digits (no sign, unlike `from_str_radix` alone).
pub(crate) fn parse_hex(text: &str) -> Option<u64> {
    let hex = text.len() == 16 && text.bytes().all(|b| b.is_ascii_hexdigit());
    hex.then(|| u64::from_str_radix(text, 16).ok()).flatten()
}

/// What differs between a base and an observed version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Delta {
    /// The essence's digest differs.
    pub(crate) essence: bool,
    /// The watched fields that differ (appeared, vanished or changed), by path.
    pub(crate) fields: Vec<&'static str>,
}

impl Delta {
    #[cfg(test)]
    /// Whether nothing differs.
    #[must_use]
    pub(crate) fn is_empty(&self) -> bool {
        !self.essence && self.fields.is_empty()
    }

    /// Whether the field at `path` differs.
    #[must_use]
    pub(crate) fn field(&self, path: &str) -> bool {
        self.fields.contains(&path)
    }

    /// Whether an update `handler` runs for this delta: one without `field` when the essence
    /// changed, one with `field` when its field did.
    #[must_use]
    pub(crate) fn selects(&self, handler: &ChangeHandler) -> bool {
        handler
            .watch
            .map_or(self.essence, |field| self.field(field.path))
    }
}

/// The diff base: the essence's digest and the watched fields.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DiffBase {
    /// The digest of the essence.
    pub(crate) digest: u64,
    /// The watched fields that are present, by path.
    pub(crate) fields: BTreeMap<String, Stored>,
}

impl DiffBase {
    /// The base of an observed version: its digest, and its watched values within the caps
    /// (the others elided, in path order).
    #[must_use]
    pub(crate) fn capture(observed: &Observed<'_>) -> Self {
        let present: Vec<(&str, &Value)> = observed
            .fields
            .iter()
            .filter_map(|(path, value)| Some((*path, (*value)?)))
            .collect();
        // `f` with every field elided: braces, commas, keys and digests.
        let mut total = 2 + present.len().saturating_sub(1);
        total += present
            .iter()
            .map(|(path, _)| json_str_len(path) + 1 + ELIDED_LEN)
            .sum::<usize>();
        let mut fields = BTreeMap::new();
        for (path, value) in present {
            let (len, digest) = measure(value);
            let len = len + if needs_wrap(value) { WRAP_LEN } else { 0 };
            let grown = total - ELIDED_LEN + len;
            let stored = if len <= FIELD_CAP && grown <= FIELDS_CAP {
                total = grown;
                Stored::Value(value.clone())
            } else {
                Stored::Elided(digest)
            };
            fields.insert(path.to_owned(), stored);
        }
        Self {
            digest: observed.digest,
            fields,
        }
    }

    /// What differs in `observed`: the digest, and each watched field it has.
    #[must_use]
    pub(crate) fn delta(&self, observed: &Observed<'_>) -> Delta {
        let fields = observed
            .fields
            .iter()
            .filter(|(path, live)| match (self.fields.get(**path), live) {
                (None, None) => false,
                (Some(stored), Some(live)) => !stored.matches(live),
                _ => true,
            })
            .map(|(path, _)| *path)
            .collect();
        Delta {
            essence: self.digest != observed.digest,
            fields,
        }
    }

    /// The annotation's value (compact JSON) without the object's UID.
    #[must_use]
    pub(crate) fn encode(&self) -> String {
        self.encode_bound(None)
    }

    /// The annotation's value (compact JSON) for the object `uid` (`None`: unbound).
    #[must_use]
    pub(crate) fn encode_bound(&self, uid: Option<&str>) -> String {
        let mut json = self.to_json();
        if let Value::Object(map) = &mut json {
            map.insert("v".to_owned(), Value::from(VERSION));
            json = bound(std::mem::take(map), uid);
        }
        json.to_string()
    }

    #[cfg(test)]
    /// Reads an annotation's value (whichever object it was written for).
    ///
    /// # Errors
    /// Not JSON, another version, or a malformed field.
    pub(crate) fn decode(text: &str) -> Result<Self, DecodeError> {
        Self::from_json(&parse(text)?)
    }

    /// Reads the annotation's value on the object `uid`.
    ///
    /// # Errors
    /// As `decode`, and [`DecodeError::OtherObject`] for another object's value.
    pub(crate) fn decode_for(text: &str, uid: &str) -> Result<Self, DecodeError> {
        let json = parse(text)?;
        check_owner(&json, uid)?;
        Self::from_json(&json)
    }

    /// The base as a JSON object without the version (also the target inside a progress).
    #[must_use]
    pub(crate) fn to_json(&self) -> Value {
        let mut map = Map::new();
        map.insert("d".to_owned(), format!("{:016x}", self.digest).into());
        if !self.fields.is_empty() {
            let fields = self.fields.iter();
            let fields = fields.map(|(path, stored)| (path.clone(), stored.to_json()));
            map.insert("f".to_owned(), Value::Object(fields.collect()));
        }
        Value::Object(map)
    }

    /// Reads the JSON of [`Self::to_json`] (a version, if any, is not checked here).
    ///
    /// # Errors
    /// A missing or malformed `d`, or a malformed `f`.
    pub(crate) fn from_json(json: &Value) -> Result<Self, DecodeError> {
        let digest = json
            .get("d")
            .and_then(Value::as_str)
            .and_then(parse_hex)
            .ok_or(DecodeError::Malformed("d"))?;
        let fields = match json.get("f") {
            None => BTreeMap::new(),
            Some(Value::Object(map)) => map
                .iter()
                .map(|(path, value)| Ok((path.clone(), Stored::from_json(value)?)))
                .collect::<Result<_, DecodeError>>()?,
            Some(_) => return Err(DecodeError::Malformed("f")),
        };
        Ok(Self { digest, fields })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::super::FieldPath;
    use super::super::essence::{EssenceCfg, observe};
    use super::super::tests::SIZE;
    use super::*;

    const BIG: FieldPath = FieldPath {
        path: "spec.big",
        segments: &["spec", "big"],
    };

    fn observed(body: &Value, watched: &[FieldPath]) -> DiffBase {
        let cfg = EssenceCfg {
            own_prefix: "kopf.dev/",
            watched,
        };
        DiffBase::capture(&observe(body, &cfg))
    }

    #[test]
    fn a_one_mib_object_with_one_watched_scalar_has_a_tiny_base() {
        let body = json!({
            "metadata": {"name": "big", "labels": {"app": "x"}},
            "spec": {"size": 3, "blob": "x".repeat(1 << 20)},
        });
        assert!(serde_json::to_string(&body).unwrap().len() > 1 << 20);
        let base = observed(&body, &[SIZE]);
        let text = base.encode();
        assert!(text.len() < 200, "{} bytes: {text}", text.len());
        assert!(text.contains(r#""f":{"spec.size":3}"#), "{text}");
        assert_eq!(DiffBase::decode(&text).unwrap(), base);
    }

    #[test]
    fn big_values_are_elided_and_f_stays_within_its_cap() {
        let big = "y".repeat(FIELD_CAP);
        let body = json!({"spec": {"big": big, "size": 1}});
        let base = observed(&body, &[BIG, SIZE]);
        assert!(matches!(base.fields["spec.big"], Stored::Elided(_)));
        assert_eq!(base.fields["spec.size"], Stored::Value(json!(1)));
        assert!(base.fields["spec.big"].value().is_none());
        assert!(base.fields["spec.big"].matches(&json!(big)));
        assert!(!base.fields["spec.big"].matches(&json!("y")));
        // Many fields of 15 KiB: the first two fit, the rest are elided.
        let paths: Vec<&'static str> = (0..6)
            .map(|i| &*Box::leak(format!("spec.f{i}").into_boxed_str()))
            .collect();
        let fields: Vec<FieldPath> = paths
            .iter()
            .map(|path| FieldPath {
                path,
                segments: Box::leak(path.split('.').collect::<Vec<_>>().into_boxed_slice()),
            })
            .collect();
        let value = "z".repeat(15 * 1024);
        let spec: Map<String, Value> = (0..6).map(|i| (format!("f{i}"), json!(value))).collect();
        let base = observed(&json!({ "spec": spec }), &fields);
        let kept = base.fields.values().filter(|s| s.value().is_some()).count();
        assert_eq!(kept, 2);
        let f = base.to_json()["f"].to_string();
        assert!(f.len() <= FIELDS_CAP, "{}", f.len());
        assert_eq!(DiffBase::decode(&base.encode()).unwrap(), base);
    }

    #[test]
    fn deltas_see_the_digest_and_each_field() {
        let old = json!({"spec": {"size": 1, "other": 1}});
        let base = observed(&old, &[SIZE, BIG]);
        let cfg = EssenceCfg {
            own_prefix: "",
            watched: &[SIZE, BIG],
        };
        assert!(base.delta(&observe(&old, &cfg)).is_empty());
        let other = json!({"spec": {"size": 1, "other": 2}});
        let delta = base.delta(&observe(&other, &cfg));
        assert!(delta.essence && delta.fields.is_empty());
        let resized = json!({"spec": {"size": 2, "big": 0, "other": 1}});
        let delta = base.delta(&observe(&resized, &cfg));
        assert_eq!(delta.fields, ["spec.big", "spec.size"]);
        assert!(delta.field("spec.size") && !delta.field("spec.other"));
        let gone = json!({"spec": {"other": 1}});
        assert_eq!(base.delta(&observe(&gone, &cfg)).fields, ["spec.size"]);
    }

    #[test]
    fn marker_shaped_values_are_wrapped() {
        let body = json!({"spec": {"size": {"#": "0123456789abcdef"}, "big": {"=": 1}}});
        let base = observed(&body, &[SIZE, BIG]);
        let text = base.encode();
        assert!(
            text.contains(r##"{"=":{"#":"0123456789abcdef"}}"##),
            "{text}"
        );
        assert_eq!(DiffBase::decode(&text).unwrap(), base);
        assert_eq!(base.fields["spec.big"].value(), Some(&json!({"=": 1})));
    }

    #[test]
    fn bad_input_is_an_error_value() {
        let cases = [
            ("", "not JSON"),
            ("[1]", "malformed `v`"),
            (
                r#"{"v":2,"d":"0000000000000000"}"#,
                "format version 2 is unknown",
            ),
            (r#"{"v":"1","d":"0000000000000000"}"#, "malformed `v`"),
            (r#"{"v":1}"#, "malformed `d`"),
            (r#"{"v":1,"d":"+000000000000000"}"#, "malformed `d`"),
            (r#"{"v":1,"d":"0000000000000000","f":[]}"#, "malformed `f`"),
            (
                r##"{"v":1,"d":"0000000000000000","f":{"a":{"#":1}}}"##,
                "malformed `f.#`",
            ),
        ];
        for (text, error) in cases {
            let err = DiffBase::decode(text).unwrap_err().to_string();
            assert!(err.starts_with(error), "{text}: {err}");
        }
        assert_eq!(parse_hex("00000000000000FF"), Some(255));
    }

    /// The base is written by every create and by updates, which run the handlers their delta
    /// selects: `field`-less ones on a change of the essence, `field=` ones on their field.
    #[test]
    fn creates_and_selected_updates_write_the_base() {
        use super::super::machine::{ChangeRun, Step};
        use super::super::tests::{base_of, body, seen, set, t};
        use super::super::{ChangeKind, Outcome};
        let set = set();
        let (old, new, churn) = (body("x", 1), body("x", 2), body("y", 1));
        let (observed, labels) = (seen(&set, &new), seen(&set, &churn));
        let mut run = ChangeRun::start(ChangeKind::Create, &set, None, &observed, t(0));
        assert!(matches!(
            run.next(t(0), &|_| true),
            Step::Run { index: 0, .. }
        ));
        assert_eq!(
            run.complete(1, Outcome::Succeeded, t(1)),
            None,
            "not running"
        );
        let first = run.complete(0, Outcome::Succeeded, t(1)).unwrap();
        assert!(matches!(first.progress, Some(Some(_))) && !first.writes_base());
        run.next(t(1), &|_| true);
        let last = run.complete(1, Outcome::Failed { message: "x" }, t(2));
        let target = DiffBase::capture(&observed);
        let last = last.unwrap();
        assert_eq!((last.progress, last.base), (Some(None), Some(target)));
        assert!(run.is_finished() && run.running().is_none());
        assert_eq!(run.next(t(3), &|_| true), Step::Finished(None));
        let base = base_of(&set, &old);
        let ids = |run: &ChangeRun| run.progress().handlers.keys().cloned().collect::<Vec<_>>();
        let update = |seen| ChangeRun::start(ChangeKind::Update, &set, Some(&base), seen, t(0));
        assert_eq!(ids(&update(&observed)), ["f", "u"]);
        let mut run = update(&labels);
        assert_eq!(ids(&run), ["u"]);
        // Every handler skipped: the base is still written, once.
        let Step::Finished(Some(write)) = run.next(t(0), &|_| false) else {
            panic!("not finished");
        };
        assert_eq!(write.base, Some(DiffBase::capture(&labels)));
        assert_eq!(run.next(t(0), &|_| false), Step::Finished(None));
    }

    proptest! {
        #[test]
        fn bases_round_trip(digest: u64, size in any::<Option<i64>>(), big in any::<Option<String>>()) {
            let mut fields = BTreeMap::new();
            if let Some(size) = size {
                fields.insert("spec.size".to_owned(), Stored::Value(json!(size)));
            }
            if let Some(big) = big {
                fields.insert("spec.big".to_owned(), Stored::Value(json!({"#": big})));
                fields.insert("spec.x".to_owned(), Stored::Elided(digest.rotate_left(7)));
            }
            let base = DiffBase { digest, fields };
            prop_assert_eq!(DiffBase::decode(&base.encode()).unwrap(), base);
        }
    }
}
