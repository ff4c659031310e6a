//! Who holds which ranges: the claims recorded in the group's Lease (one annotation, written
//! only with the `resourceVersion` it was read at), and what one member does with them in one
//! round ([`plan`]), as a pure function.
//!
//! | a range … | of the member's target | not of its target |
//! |---|---|---|
//! | held by it | served | stopped, then released once nothing of it runs |
//! | free, or held by an expired member | claimed, served once the claim is written | left alone |
//! | held by another live member | waited for (that member releases it) | left alone |
//!
//! Two members never both hold a range: a claim takes only a free range or one of a member
//! whose Lease expired, and is written with the `resourceVersion` of the claims it was planned
//! on, read *before* the Leases that showed the expiry; a member whose validity lapsed serves
//! nothing until a write of its own confirms its claims again (which fails if they changed).

use std::collections::{BTreeMap, BTreeSet};

use crate::operator::ha::ranges::{RangeSet, assigned};

/// The annotation of the group's Lease that holds the claims: a JSON object from member
/// identity to ranges (`{"pod-a": "0-340", "pod-b": "341-1023"}`).
pub(crate) const CLAIMS_ANNOTATION: &str = "kopf.dev/shard-claims";

/// The claims, as read from or written to the group's Lease.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Claims(BTreeMap<String, RangeSet>);

impl Claims {
    /// Reads the annotation (absent: no claims).
    pub(crate) fn parse(annotation: Option<&str>) -> Result<Self, String> {
        let Some(text) = annotation else {
            return Ok(Self::default());
        };
        let raw: BTreeMap<String, String> = serde_json::from_str(text)
            .map_err(|err| format!("the annotation {CLAIMS_ANNOTATION} is not valid: {err}"))?;
        let mut claims = Self::default();
        for (member, ranges) in raw {
            let ranges = RangeSet::parse(&ranges)
                .map_err(|err| format!("the claims of {member:?} are not valid: {err}"))?;
            claims.0.insert(member, ranges);
        }
        claims.check()?;
        Ok(claims)
    }

    /// Two members claiming one range: only a hand-edited annotation can say so.
    fn check(&self) -> Result<(), String> {
        let mut seen = RangeSet::default();
        for (member, ranges) in &self.0 {
            if !seen.intersection(ranges).is_empty() {
                return Err(format!(
                    "{member:?} claims ranges another member claims too"
                ));
            }
            seen = seen.union(ranges);
        }
        Ok(())
    }

    /// The annotation's text.
    pub(crate) fn render(&self) -> String {
        let raw: BTreeMap<&str, String> = self
            .0
            .iter()
            .filter(|(_, r)| !r.is_empty())
            .map(|(m, r)| (m.as_str(), r.to_string()))
            .collect();
        serde_json::to_string(&raw).unwrap_or_else(|_| "{}".to_owned())
    }

    /// The claims annotation that says these claims, for the group's Lease.
    pub(crate) fn annotation(&self) -> (&'static str, Option<String>) {
        (CLAIMS_ANNOTATION, Some(self.render()))
    }

    /// The ranges `member` holds.
    pub(crate) fn held_by(&self, member: &str) -> RangeSet {
        self.0.get(member).cloned().unwrap_or_default()
    }

    /// The member holding `range`, if any.
    fn owner(&self, range: u16) -> Option<&str> {
        self.0
            .iter()
            .find(|(_, r)| r.contains(range))
            .map(|(m, _)| m.as_str())
    }

    /// The members with claims.
    pub(crate) fn members(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// `member` gives up `ranges`.
    pub(crate) fn release(&mut self, member: &str, ranges: &RangeSet) {
        if let Some(held) = self.0.get_mut(member) {
            *held = held.minus(ranges);
            if held.is_empty() {
                self.0.remove(member);
            }
        }
    }

    /// `member` takes `ranges` (from whoever held them).
    fn take(&mut self, member: &str, ranges: &RangeSet) {
        if ranges.is_empty() {
            return;
        }
        let others: Vec<String> = self.0.keys().filter(|m| *m != member).cloned().collect();
        for other in others {
            self.release(&other, ranges);
        }
        let held = self.0.entry(member.to_owned()).or_default();
        *held = held.union(ranges);
    }
}

/// What one member knows at the start of a round.
#[derive(Debug)]
pub(crate) struct Round<'a> {
    pub(crate) me: &'a str,
    /// The claims as read this round.
    pub(crate) claims: &'a Claims,
    /// The live members, sorted, this one included.
    pub(crate) live: &'a [String],
    /// The members whose Lease expired: their ranges may be taken.
    pub(crate) expired: &'a BTreeSet<String>,
    /// The ranges in which none of this member's handlers runs or stops any more.
    pub(crate) quiet: &'a RangeSet,
    /// The ranges no member may claim now (quarantined after a repair, see `repair.rs`).
    pub(crate) blocked: &'a RangeSet,
    /// Whether the claims must be written even if unchanged: this member's validity is new
    /// (first round, or after a lapse), so its claims count only once a write confirms them.
    pub(crate) confirm: bool,
    /// Whether free ranges may be claimed (not in a member's first round: members started
    /// together see each other only at their second listing).
    pub(crate) claim: bool,
}

/// What a member does after a round.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The claims to write (guarded by the version read), if anything changed or must be
    /// confirmed.
    pub(crate) write: Option<Claims>,
    /// What it serves once the write succeeded (or at once, without a write).
    pub(crate) serve: RangeSet,
    /// What it may go on serving if the write fails: the ranges it held and keeps.
    pub(crate) keep: RangeSet,
    /// Ranges it holds and hands over, once nothing of them runs any more.
    pub(crate) releasing: RangeSet,
    /// Ranges of its target it does not hold yet.
    pub(crate) waiting: RangeSet,
}

/// The plan of one round (see the module's table).
pub(crate) fn plan(round: &Round<'_>) -> Plan {
    let Round {
        me,
        claims,
        live,
        expired,
        quiet,
        blocked,
        confirm,
        claim,
    } = round;
    let target = assigned(live, me);
    let mine = claims.held_by(me);
    let keep = mine.intersection(&target);
    let release = mine.minus(&target).intersection(quiet);
    let mut free = RangeSet::default();
    for range in target.minus(&mine).minus(blocked).iter().filter(|_| *claim) {
        match claims.owner(range) {
            None => free.insert(range),
            Some(owner) if expired.contains(owner) => free.insert(range),
            Some(_) => {}
        }
    }
    let mut next = (*claims).clone();
    next.release(me, &release);
    next.take(me, &free);
    // An expired member left with nothing is forgotten.
    for gone in expired.iter() {
        if next.held_by(gone).is_empty() {
            next.0.remove(gone);
        }
    }
    let write = (next != **claims || *confirm).then_some(next);
    Plan {
        write,
        serve: keep.union(&free),
        releasing: mine.minus(&target).minus(&release),
        waiting: target.minus(&mine).minus(&free),
        keep,
    }
}

/// Every range is held by exactly one member.
#[cfg(test)]
fn complete(claims: &Claims) -> bool {
    let all = claims
        .0
        .values()
        .fold(RangeSet::default(), |acc, r| acc.union(r));
    all.len() == usize::from(crate::operator::ha::ranges::SHARD_RANGES)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(pairs: &[(&str, &str)]) -> Claims {
        let json: BTreeMap<&str, &str> = pairs.iter().copied().collect();
        Claims::parse(Some(&serde_json::to_string(&json).unwrap())).unwrap()
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    fn set(text: &str) -> RangeSet {
        RangeSet::parse(text).unwrap()
    }

    struct Case {
        name: &'static str,
        claims: Claims,
        live: &'static [&'static str],
        expired: &'static [&'static str],
        quiet: &'static str,
        confirm: bool,
        want_write: Option<&'static [(&'static str, &'static str)]>,
        want_serve: &'static str,
    }

    #[test]
    fn rounds_follow_the_table() {
        let cases = [
            Case {
                name: "alone: claims everything",
                claims: Claims::default(),
                live: &["a"],
                expired: &[],
                quiet: "",
                confirm: false,
                want_write: Some(&[("a", "0-1023")]),
                want_serve: "0-1023",
            },
            Case {
                name: "steady: nothing to write",
                claims: claims(&[("a", "0-511"), ("b", "512-1023")]),
                live: &["a", "b"],
                expired: &[],
                quiet: "",
                confirm: false,
                want_write: None,
                want_serve: "0-511",
            },
            Case {
                name: "a new validity confirms the claims",
                claims: claims(&[("a", "0-511"), ("b", "512-1023")]),
                live: &["a", "b"],
                expired: &[],
                quiet: "",
                confirm: true,
                want_write: Some(&[("a", "0-511"), ("b", "512-1023")]),
                want_serve: "0-511",
            },
            Case {
                name: "b joined, a still runs handlers in 512-1023: nothing released yet",
                claims: claims(&[("a", "0-1023")]),
                live: &["a", "b"],
                expired: &[],
                quiet: "0-600",
                confirm: false,
                want_write: Some(&[("a", "0-511,601-1023")]),
                want_serve: "0-511",
            },
            Case {
                name: "b joined, a's handlers there stopped: released",
                claims: claims(&[("a", "0-1023")]),
                live: &["a", "b"],
                expired: &[],
                quiet: "512-1023",
                confirm: false,
                want_write: Some(&[("a", "0-511")]),
                want_serve: "0-511",
            },
            Case {
                name: "a expired: b takes its ranges",
                claims: claims(&[("a", "0-511"), ("b", "512-1023")]),
                live: &["b"],
                expired: &["a"],
                quiet: "",
                confirm: false,
                want_write: Some(&[("b", "0-1023")]),
                want_serve: "0-1023",
            },
            Case {
                name: "a not live but not expired yet: b waits",
                claims: claims(&[("a", "0-511"), ("b", "512-1023")]),
                live: &["b"],
                expired: &[],
                quiet: "",
                confirm: false,
                want_write: None,
                want_serve: "512-1023",
            },
        ];
        for case in cases {
            let me = if case.name.starts_with("a expired") || case.name.starts_with("a not") {
                "b"
            } else {
                "a"
            };
            let live = names(case.live);
            let expired: BTreeSet<String> = names(case.expired).into_iter().collect();
            let quiet = set(case.quiet);
            let got = plan(&Round {
                me,
                claims: &case.claims,
                live: &live,
                expired: &expired,
                quiet: &quiet,
                blocked: &RangeSet::default(),
                confirm: case.confirm,
                claim: true,
            });
            assert_eq!(got.write, case.want_write.map(claims), "{}", case.name);
            assert_eq!(got.serve, set(case.want_serve), "{}", case.name);
        }
    }

    #[test]
    fn quarantined_ranges_are_not_claimed() {
        let blocked = set("0-99");
        let round = Round {
            me: "a",
            claims: &Claims::default(),
            live: &names(&["a"]),
            expired: &BTreeSet::new(),
            quiet: &RangeSet::full(),
            blocked: &blocked,
            confirm: false,
            claim: true,
        };
        let got = plan(&round);
        assert_eq!(got.write, Some(claims(&[("a", "100-1023")])));
        assert_eq!(got.serve, set("100-1023"));
        assert_eq!(got.waiting, set("0-99"));
    }

    #[test]
    fn claims_round_trip_and_refuse_overlaps() {
        let c = claims(&[("a", "0-511"), ("b", "512-1023")]);
        assert!(complete(&c));
        assert_eq!(Claims::parse(Some(&c.render())), Ok(c));
        assert_eq!(Claims::parse(None), Ok(Claims::default()));
        assert!(Claims::parse(Some(r#"{"a":"0-10","b":"5"}"#)).is_err());
        assert!(Claims::parse(Some("not json")).is_err());
        assert!(Claims::parse(Some(r#"{"a":"0-2000"}"#)).is_err());
    }

    #[test]
    fn members_converge_without_ever_sharing_a_range() {
        // Three members joining one by one, each round each member plans on the claims as
        // written by the previous one, with its handlers stopping within one round.
        let members = ["a", "b", "c"];
        let mut claims = Claims::default();
        let mut live: Vec<String> = Vec::new();
        for joining in members {
            live.push(joining.to_owned());
            for _round in 0..4 {
                for me in &live {
                    let held = claims.held_by(me);
                    let quiet = RangeSet::full().minus(&held.intersection(&assigned(&live, me)));
                    let round = Round {
                        me,
                        claims: &claims,
                        live: &live,
                        expired: &BTreeSet::new(),
                        quiet: &quiet,
                        blocked: &RangeSet::default(),
                        confirm: false,
                        claim: true,
                    };
                    if let Some(next) = plan(&round).write {
                        next.check().unwrap();
                        claims = next;
                    }
                }
            }
            assert!(complete(&claims), "{joining}: {claims:?}");
        }
        assert_eq!(claims.held_by("a").to_string(), "0-340");
        assert_eq!(claims.held_by("c").to_string(), "682-1023");
    }
}
