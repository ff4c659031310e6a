//! The hash space of sharding: the 64-bit FNV-1a hash of an object's UID — the hash the API
//! server's `shardSelector` uses, so that client and server agree bit for bit — split into
//! [`SHARD_RANGES`] equal ranges (an object's range is the hash's top ten bits), and the
//! deterministic assignment of ranges to members: contiguous blocks, in identity order.
//!
//! ```text
//!  hash  0x0000…           0x5540…           0xaa80…           0x1_0000…  (2^64)
//!        │ ranges 0‥340     │ ranges 341‥681    │ ranges 682‥1023  │
//!        └── member "a" ────┴── member "b" ─────┴── member "c" ─────┘
//! ```

use std::fmt;

use crate::core::hash::fnv64;

/// How many equal ranges the hash space is split into.
pub const SHARD_RANGES: u16 = 1024;

/// Bits of the hash below the range index.
const SHIFT: u32 = 64 - SHARD_RANGES.trailing_zeros();
const WORDS: usize = SHARD_RANGES as usize / 64;

/// The range of an object: the top bits of the 64-bit FNV-1a hash of its UID, as the API
/// server's `shardRange(object.metadata.uid, …)` hashes it.
///
/// ```
/// let range = kopf_runtime::ha::shard_of("8e06a4ba-b99a-4d39-8177-99cd7b21ddd6");
/// assert!(range < kopf_runtime::ha::SHARD_RANGES);
/// ```
#[must_use]
pub fn shard_of(uid: &str) -> u16 {
    u16::try_from(fnv64(uid.as_bytes()) >> SHIFT).unwrap_or(SHARD_RANGES - 1)
}

/// A set of ranges.
#[derive(Clone, PartialEq, Eq, Default)]
pub(crate) struct RangeSet {
    bits: [u64; WORDS],
}

impl RangeSet {
    /// Every range.
    pub(crate) fn full() -> Self {
        Self::span(0, SHARD_RANGES)
    }

    /// The ranges `start..end`.
    pub(crate) fn span(start: u16, end: u16) -> Self {
        let mut set = Self::default();
        (start..end.min(SHARD_RANGES)).for_each(|r| set.insert(r));
        set
    }

    pub(crate) fn insert(&mut self, range: u16) {
        if range < SHARD_RANGES {
            self.bits[usize::from(range / 64)] |= 1 << (range % 64);
        }
    }

    pub(crate) fn contains(&self, range: u16) -> bool {
        range < SHARD_RANGES && self.bits[usize::from(range / 64)] & (1 << (range % 64)) != 0
    }

    /// Whether the object with this UID is in one of the ranges.
    pub(crate) fn covers(&self, uid: &str) -> bool {
        self.contains(shard_of(uid))
    }

    /// How many ranges.
    pub(crate) fn len(&self) -> usize {
        self.bits.iter().map(|w| w.count_ones() as usize).sum()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.bits.iter().all(|w| *w == 0)
    }

    fn zip(&self, other: &Self, f: impl Fn(u64, u64) -> u64) -> Self {
        let mut bits = [0; WORDS];
        for (i, word) in bits.iter_mut().enumerate() {
            *word = f(self.bits[i], other.bits[i]);
        }
        Self { bits }
    }

    pub(crate) fn union(&self, other: &Self) -> Self {
        self.zip(other, |a, b| a | b)
    }

    pub(crate) fn intersection(&self, other: &Self) -> Self {
        self.zip(other, |a, b| a & b)
    }

    pub(crate) fn minus(&self, other: &Self) -> Self {
        self.zip(other, |a, b| a & !b)
    }

    /// The ranges in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = u16> + '_ {
        (0..SHARD_RANGES).filter(|r| self.contains(*r))
    }

    /// The maximal runs of consecutive ranges, as `start..end`.
    pub(crate) fn spans(&self) -> Vec<(u16, u16)> {
        let mut spans: Vec<(u16, u16)> = Vec::new();
        for range in self.iter() {
            match spans.last_mut() {
                Some((_, end)) if *end == range => *end = range + 1,
                _ => spans.push((range, range + 1)),
            }
        }
        spans
    }

    /// The API server's `shardSelector` for these ranges (`None` when empty: no selector selects
    /// nothing).
    pub(crate) fn selector(&self) -> Option<String> {
        let bound = |range: u16| {
            if range >= SHARD_RANGES {
                "0x10000000000000000".to_owned()
            } else {
                format!("0x{:016x}", u64::from(range) << SHIFT)
            }
        };
        let spans = self.spans();
        (!spans.is_empty()).then(|| {
            let parts: Vec<String> = spans
                .iter()
                .map(|&(start, end)| {
                    format!(
                        "shardRange(object.metadata.uid, '{}', '{}')",
                        bound(start),
                        bound(end)
                    )
                })
                .collect();
            parts.join(" || ")
        })
    }

    /// Reads the form [`Display`](fmt::Display) writes: `0-340,682-1023` (inclusive ends).
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let mut set = Self::default();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let number = |s: &str| {
                s.parse::<u16>()
                    .ok()
                    .filter(|r| *r < SHARD_RANGES)
                    .ok_or_else(|| format!("{s:?} is not a range index below {SHARD_RANGES}"))
            };
            let (start, last) = match part.split_once('-') {
                Some((a, b)) => (number(a)?, number(b)?),
                None => (number(part)?, number(part)?),
            };
            if start > last {
                return Err(format!("{part:?} ends before it starts"));
            }
            (start..=last).for_each(|r| set.insert(r));
        }
        Ok(set)
    }
}

impl fmt::Display for RangeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (start, end)) in self.spans().into_iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if end - start == 1 {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{}", end - 1)?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for RangeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RangeSet({self})")
    }
}

/// The ranges `me` is assigned among `members` (sorted, without duplicates): the `i`-th of `n`
/// members gets the contiguous block `i·R/n .. (i+1)·R/n`. Empty if `me` is not a member.
pub(crate) fn assigned(members: &[String], me: &str) -> RangeSet {
    let Some(i) = members.iter().position(|m| m == me) else {
        return RangeSet::default();
    };
    let (n, total) = (members.len(), usize::from(SHARD_RANGES));
    let bound = |k: usize| u16::try_from(k * total / n).unwrap_or(SHARD_RANGES);
    RangeSet::span(bound(i), bound(i + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_range_is_the_hash_top_bits() {
        // FNV-1a-64("a") = 0xaf63dc4c8601ec8c: its top ten bits.
        assert_eq!(shard_of("a"), 0x2bd);
        assert_eq!(
            shard_of("a"),
            u16::try_from(0xaf63_dc4c_8601_ec8c_u64 >> 54).unwrap()
        );
    }

    #[test]
    fn sets_print_parse_and_select() {
        let table: [(RangeSet, &str, Option<&str>); 4] = [
            (RangeSet::default(), "", None),
            (
                RangeSet::full(),
                "0-1023",
                Some(
                    "shardRange(object.metadata.uid, '0x0000000000000000', '0x10000000000000000')",
                ),
            ),
            (
                RangeSet::span(0, 512).union(&RangeSet::span(768, 769)),
                "0-511,768",
                Some(
                    "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || \
                     shardRange(object.metadata.uid, '0xc000000000000000', '0xc040000000000000')",
                ),
            ),
            (
                RangeSet::span(1023, 1024),
                "1023",
                Some(
                    "shardRange(object.metadata.uid, '0xffc0000000000000', '0x10000000000000000')",
                ),
            ),
        ];
        for (set, text, selector) in table {
            assert_eq!(set.to_string(), text);
            assert_eq!(RangeSet::parse(text), Ok(set.clone()));
            assert_eq!(set.selector().as_deref(), selector);
        }
        for bad in ["1024", "5-3", "x", "-1"] {
            assert!(RangeSet::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn set_algebra() {
        let a = RangeSet::span(0, 100);
        let b = RangeSet::span(50, 150);
        assert_eq!(a.union(&b), RangeSet::span(0, 150));
        assert_eq!(a.intersection(&b), RangeSet::span(50, 100));
        assert_eq!(a.minus(&b), RangeSet::span(0, 50));
        assert_eq!(a.len(), 100);
        assert!(a.minus(&a).is_empty());
    }

    #[test]
    fn assignment_is_contiguous_complete_and_balanced() {
        let names = |n: usize| (0..n).map(|i| format!("m{i}")).collect::<Vec<_>>();
        for n in 1..=7 {
            let members = names(n);
            let mut all = RangeSet::default();
            for m in &members {
                let mine = assigned(&members, m);
                assert_eq!(mine.spans().len(), 1, "{n} members: {m} has one block");
                assert!(all.intersection(&mine).is_empty(), "no range twice");
                let share = mine.len();
                let ideal = usize::from(SHARD_RANGES) / n;
                assert!(share == ideal || share == ideal + 1, "{n}: {share}");
                all = all.union(&mine);
            }
            assert_eq!(all, RangeSet::full());
        }
        assert!(assigned(&names(3), "stranger").is_empty());
        assert_eq!(assigned(&names(3), "m0").to_string(), "0-340");
        assert_eq!(assigned(&names(3), "m2").to_string(), "682-1023");
    }
}
