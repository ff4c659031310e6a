//! Garbage in the group's Lease, and its repair. The claims annotation is written by the
//! members only, with `resourceVersion` checks; anything else that writes it (a hand edit, a
//! script, a bad merge of manifests) can leave text that is not JSON, ranges out of bounds, two
//! members claiming one range, or a quarantine (below) that does not parse. Such a group must
//! not freeze, and its repair must not let two members serve one range.
//!
//! | the group's Lease as read | what a member does |
//! |---|---|
//! | valid claims, no quarantine | plans as usual (`claims.rs`) |
//! | garbage anywhere | warns once per distinct text, serves nothing, and writes the repair: no claims, every range quarantined, waiting for every live member |
//! | a quarantine that waits for it | once none of its handlers runs or stops in those ranges, removes itself from the waiting members |
//! | a quarantine that waits for a member seen expired | removes that member |
//! | a quarantine that waits for nobody | removes it: its ranges are free |
//! | a quarantine, otherwise | claims none of its ranges |
//!
//! Nothing of a garbled annotation is trusted, not even the entries that still parse: whoever
//! broke one part may have moved the others, and a member that kept serving what such an entry
//! shows could run handlers beside the member that really held those ranges. So the repair
//! writes no claims at all and quarantines every range, in the annotation
//! [`QUARANTINE_ANNOTATION`], with the members that may still run handlers in them.
//!
//! Why no range is served twice through a repair. A member serves a range only while claims it
//! read (valid ones) show it holding the range, and only while its Lease is valid. Whoever may
//! still run handlers in a range after the garbage is therefore a member that read valid claims
//! before the garbage was written, and so had a Lease before: the repairer reads the garbage
//! *before* it lists the members' Leases, and its repair (guarded by the version of the garbage
//! it read) waits for every member it saw live. A member whose Lease was expired in that
//! listing (unchanged for its duration on the repairer's clock, or released) stopped its
//! handlers before, as for any takeover; a member whose Lease did not exist yet created it later
//! and so read the garbage or the repair, never the claims before them. Every waiting member
//! leaves the quarantine only when it is valid, serves none of its ranges and none of its
//! handlers there runs or stops any more — or when another member sees its Lease expire. Until
//! the quarantine waits for nobody, no member claims any of its ranges; after that, they are
//! claimed as free ranges are, by guarded writes. A member that read valid claims before the
//! garbage cannot write them again: the garbage changed the version. A garbled quarantine is
//! garbage too, and is repaired in the same way (every member still live waits again).
//!
//! What no member can detect is an edit that leaves the annotation valid (a range moved from one
//! member to another by hand): the docs say not to edit the group's Lease while members run.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

use super::claims::{CLAIMS_ANNOTATION, Claims};
use crate::operator::ha::ranges::RangeSet;

/// The annotation of the group's Lease that holds a quarantine after a repair: the ranges nobody
/// may claim yet, and the members that may still run handlers in them.
pub(crate) const QUARANTINE_ANNOTATION: &str = "kopf.dev/shard-quarantine";

/// Ranges nobody claims until every member of `waiting` is quiet in them or expired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Quarantine {
    pub(crate) ranges: RangeSet,
    pub(crate) waiting: BTreeSet<String>,
}

/// The annotation's form.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawQuarantine {
    ranges: String,
    waiting: BTreeSet<String>,
}

impl Quarantine {
    fn parse(text: &str) -> Result<Self, String> {
        let raw: RawQuarantine = serde_json::from_str(text)
            .map_err(|err| format!("the annotation {QUARANTINE_ANNOTATION} is not valid: {err}"))?;
        let ranges = RangeSet::parse(&raw.ranges)
            .map_err(|err| format!("the quarantined ranges are not valid: {err}"))?;
        Ok(Self {
            ranges,
            waiting: raw.waiting,
        })
    }

    /// The annotation's text.
    pub(crate) fn render(&self) -> String {
        let raw = RawQuarantine {
            ranges: self.ranges.to_string(),
            waiting: self.waiting.clone(),
        };
        serde_json::to_string(&raw).unwrap_or_else(|_| "{}".to_owned())
    }
}

/// Why the group's Lease cannot be trusted, and the text that says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Garbage {
    pub(crate) why: String,
    /// Both annotations as read.
    pub(crate) text: String,
}

/// The group's Lease as read: its claims and its quarantine, or the garbage found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct GroupState {
    pub(crate) claims: Claims,
    pub(crate) quarantine: Option<Quarantine>,
    pub(crate) garbage: Option<Garbage>,
}

impl GroupState {
    /// Reads the annotations of the group's Lease: all or nothing (see the module's doc).
    pub(crate) fn read(annotations: Option<&BTreeMap<String, String>>) -> Self {
        let get = |key: &str| annotations.and_then(|a| a.get(key)).map(String::as_str);
        let (claims_text, quarantine_text) = (get(CLAIMS_ANNOTATION), get(QUARANTINE_ANNOTATION));
        let read = Claims::parse(claims_text).and_then(|claims| {
            let quarantine = quarantine_text.map(Quarantine::parse).transpose()?;
            if let Some(q) = &quarantine {
                let held = (claims.members())
                    .fold(RangeSet::default(), |all, m| all.union(&claims.held_by(m)));
                if !held.intersection(&q.ranges).is_empty() {
                    return Err(format!(
                        "the claims hold quarantined ranges ({})",
                        held.intersection(&q.ranges)
                    ));
                }
            }
            Ok((claims, quarantine))
        });
        match read {
            Ok((claims, quarantine)) => Self {
                claims,
                quarantine,
                garbage: None,
            },
            Err(why) => Self {
                garbage: Some(Garbage {
                    why,
                    text: format!(
                        "{}\n{}",
                        claims_text.unwrap_or_default(),
                        quarantine_text.unwrap_or_default()
                    ),
                }),
                ..Self::default()
            },
        }
    }

    /// The members that may hold or run anything: those with claims and those waited for.
    pub(crate) fn named(&self) -> BTreeSet<&str> {
        let waiting = self.quarantine.iter().flat_map(|q| &q.waiting);
        (self.claims.members())
            .chain(waiting.map(String::as_str))
            .collect()
    }

    /// The ranges no member may claim now.
    pub(crate) fn blocked(&self) -> RangeSet {
        self.quarantine
            .as_ref()
            .map(|q| q.ranges.clone())
            .unwrap_or_default()
    }
}

/// The annotations of the group's Lease that say `claims` and `quarantine` (`None`: the
/// quarantine annotation is removed).
pub(crate) fn annotations(
    claims: &Claims,
    quarantine: Option<&Quarantine>,
) -> [(&'static str, Option<String>); 2] {
    let quarantine = (QUARANTINE_ANNOTATION, quarantine.map(Quarantine::render));
    [claims.annotation(), quarantine]
}

/// The repair of garbage: no claims, every range quarantined until every member in `live` is
/// quiet in them or expired.
pub(crate) fn repair(live: &[String]) -> Quarantine {
    Quarantine {
        ranges: RangeSet::full(),
        waiting: live.iter().cloned().collect(),
    }
}

/// The quarantine after a round of `me` (`quiet`: none of its handlers runs, stops or is
/// served in the quarantined ranges): without `me` if quiet, and without the members seen
/// expired; `Some(None)` lifts it, `None`: nothing changes.
pub(crate) fn lift(
    quarantine: &Quarantine,
    me: &str,
    quiet: bool,
    expired: &BTreeSet<String>,
) -> Option<Option<Quarantine>> {
    let waiting: BTreeSet<String> = (quarantine.waiting.iter())
        .filter(|m| (!quiet || m.as_str() != me) && !expired.contains(*m))
        .cloned()
        .collect();
    if waiting == quarantine.waiting {
        return None;
    }
    Some((!waiting.is_empty()).then(|| Quarantine {
        ranges: quarantine.ranges.clone(),
        waiting,
    }))
}

/// The garbage a member has warned about (the last few, by the version of the group's Lease and
/// the text: each write of garbage is warned about once, however often it is read).
#[derive(Debug, Default)]
pub(crate) struct Warned(VecDeque<String>);

impl Warned {
    const KEPT: usize = 8;

    /// Whether `garbage`, read at `version`, is new (then it is remembered).
    pub(crate) fn first(&mut self, version: Option<&str>, garbage: &Garbage) -> bool {
        self.first_key(format!("{}\n{}", version.unwrap_or_default(), garbage.text))
    }

    /// Whether `key` is new (then it is remembered).
    pub(crate) fn first_key(&mut self, key: String) -> bool {
        if self.0.contains(&key) {
            return false;
        }
        if self.0.len() >= Self::KEPT {
            self.0.pop_front();
        }
        self.0.push_back(key);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(claims: Option<&str>, quarantine: Option<&str>) -> GroupState {
        let mut annotations = BTreeMap::new();
        if let Some(text) = claims {
            annotations.insert(CLAIMS_ANNOTATION.to_owned(), text.to_owned());
        }
        if let Some(text) = quarantine {
            annotations.insert(QUARANTINE_ANNOTATION.to_owned(), text.to_owned());
        }
        GroupState::read(Some(&annotations))
    }

    fn names(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    /// What `annotations` writes is what `GroupState::read` reads back; `None` removes the
    /// quarantine, and a quarantine written before is gone afterwards.
    #[test]
    fn written_annotations_read_back() {
        let claims = Claims::parse(Some(r#"{"a":"0-9","b":"20-29"}"#)).unwrap();
        let quarantine = Quarantine {
            ranges: RangeSet::parse("10-19").unwrap(),
            waiting: names(&["c"]),
        };
        let mut current = BTreeMap::new();
        let apply = |current: &mut BTreeMap<String, String>, set: [(&str, Option<String>); 2]| {
            for (key, value) in set {
                match value {
                    Some(value) => current.insert(key.to_owned(), value),
                    None => current.remove(key),
                };
            }
            GroupState::read(Some(&*current))
        };
        let read = apply(&mut current, annotations(&claims, Some(&quarantine)));
        assert_eq!(read.garbage, None);
        assert_eq!(read.claims, claims);
        assert_eq!(read.quarantine, Some(quarantine));
        let read = apply(&mut current, annotations(&claims, None));
        assert_eq!((read.garbage, read.quarantine), (None, None));
        assert_eq!(read.claims, claims);
        assert!(!current.contains_key(QUARANTINE_ANNOTATION));
    }

    #[test]
    fn garbage_is_recognised_and_nothing_of_it_trusted() {
        // (name, claims, quarantine, what the garbage says, if garbage)
        type Case = (
            &'static str,
            Option<&'static str>,
            Option<&'static str>,
            Option<&'static str>,
        );
        let cases: [Case; 10] = [
            ("absent", None, None, None),
            ("valid", Some(r#"{"a":"0-511","b":"512-1023"}"#), None, None),
            ("not JSON", Some("not json {"), None, Some("not valid")),
            ("empty text", Some(""), None, Some("not valid")),
            ("not an object", Some(r#"["a"]"#), None, Some("not valid")),
            ("not a string", Some(r#"{"a":5}"#), None, Some("not valid")),
            (
                "overlap",
                Some(r#"{"a":"0-600","b":"500-1023"}"#),
                None,
                Some("too"),
            ),
            (
                "out of bounds",
                Some(r#"{"a":"0-2000"}"#),
                None,
                Some("below 1024"),
            ),
            (
                "bad quarantine",
                Some("{}"),
                Some("{]"),
                Some(QUARANTINE_ANNOTATION),
            ),
            (
                "claims in quarantine",
                Some(r#"{"a":"0-9"}"#),
                Some(r#"{"ranges":"5-1023","waiting":["a"]}"#),
                Some("quarantined ranges (5-9)"),
            ),
        ];
        for (name, claims, quarantine, want) in cases {
            let read = state(claims, quarantine);
            match (want, &read.garbage) {
                (None, None) => {}
                (Some(want), Some(garbage)) => {
                    assert!(garbage.why.contains(want), "{name}: {}", garbage.why);
                    assert_eq!(read.claims, Claims::default(), "{name}");
                    assert_eq!(read.quarantine, None, "{name}");
                }
                _ => panic!("{name}: {read:?}"),
            }
        }
    }

    #[test]
    fn a_quarantine_round_trips_and_blocks_its_ranges() {
        let q = Quarantine {
            ranges: RangeSet::span(0, 512),
            waiting: names(&["a", "b"]),
        };
        let read = state(Some(r#"{"c":"512-1023"}"#), Some(&q.render()));
        assert_eq!(read.garbage, None);
        assert_eq!(read.quarantine.as_ref(), Some(&q));
        assert_eq!(read.blocked().to_string(), "0-511");
        assert_eq!(read.named(), ["a", "b", "c"].into_iter().collect());
    }

    #[test]
    fn the_quarantine_lifts_only_when_every_waited_member_is_quiet_or_expired() {
        let q = repair(&["a".to_owned(), "b".to_owned()]);
        assert_eq!(q.ranges, RangeSet::full());
        let none = BTreeSet::new();
        let cases = [
            ("a busy", "a", false, &none, None),
            ("c quiet, not waited for", "c", true, &none, None),
            ("a quiet", "a", true, &none, Some(Some(&["b"][..]))),
            (
                "b expired",
                "a",
                false,
                &names(&["b"]),
                Some(Some(&["a"][..])),
            ),
            ("a quiet, b expired", "a", true, &names(&["b"]), Some(None)),
        ];
        for (name, me, quiet, expired, want) in cases {
            let got = lift(&q, me, quiet, expired);
            let want = want.map(|w: Option<&[&str]>| {
                w.map(|w| Quarantine {
                    ranges: RangeSet::full(),
                    waiting: names(w),
                })
            });
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn each_distinct_garbage_is_warned_about_once() {
        let mut warned = Warned::default();
        let garbage = |text: &str| Garbage {
            why: String::new(),
            text: text.to_owned(),
        };
        assert!(warned.first(Some("1"), &garbage("x")));
        assert!(!warned.first(Some("1"), &garbage("x")), "read again");
        assert!(warned.first(Some("1"), &garbage("y")));
        assert!(warned.first(Some("2"), &garbage("x")), "written again");
        for i in 0..Warned::KEPT {
            assert!(warned.first(Some("3"), &garbage(&i.to_string())));
        }
        assert!(warned.first(Some("1"), &garbage("x")), "forgotten");
    }
}
