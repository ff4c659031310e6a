//! Scenario 9's view of a sharded group, from the files its members write: each member's fire log
//! gives its daemon runs (the first tick of a run to its stop), and its log gives the ranges it
//! serves ("sharding: this member serves new ranges … ranges=…") and its watch mode. Across the
//! members: whether every object's daemon runs exactly once, on the holder of its range; the
//! overlaps (a daemon started before its previous run elsewhere stopped); and which daemons
//! moved, with the gap between their stop and their restart.

use std::collections::HashMap;
use std::path::Path;

use kopf_bench::Tag;
use kopf_runtime::ha::SHARD_RANGES;

use crate::fires::{Follow, parse_line};

/// One finished daemon run on one member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Run {
    pub(crate) object: usize,
    /// Its first tick (unix ns).
    pub(crate) start: u128,
    /// Its stop (unix ns).
    pub(crate) stop: u128,
}

/// What one member's files say so far.
pub(crate) struct Member {
    fires: Follow,
    log: Follow,
    /// Per object: the first tick of the run going on here, if one is.
    pub(crate) open: Vec<Option<u128>>,
    /// The finished runs, in stop order.
    pub(crate) closed: Vec<Run>,
    /// The ranges it serves, as last logged (`None`: nothing logged yet).
    pub(crate) ranges: Option<Vec<bool>>,
    /// Whether it logged that the API server filters its watches.
    pub(crate) server_side: bool,
    /// Per object: its latest tick here.
    last_tick: Vec<u128>,
    /// The window ticks are counted in (set with [`count_from`](Self::count_from)).
    window: (u128, u128),
    /// In the window: the objects that ticked, and the sum and count of their gaps.
    ticked: Vec<bool>,
    gaps: (u128, usize),
}

/// The ranges in `ranges=0-340,682-1023` (empty: none).
pub(crate) fn parse_ranges(text: &str) -> Option<Vec<bool>> {
    let mut set = vec![false; usize::from(SHARD_RANGES)];
    for part in text.split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
        set.get_mut(a..=b)?.iter_mut().for_each(|r| *r = true);
    }
    Some(set)
}

impl Member {
    /// Follows the fire log and the log (`stderr.log`) in `dir`.
    pub(crate) fn new(dir: &Path, n: usize) -> Self {
        Self {
            fires: Follow::new(&dir.join("fires.txt")),
            log: Follow::new(&dir.join("stderr.log")),
            open: vec![None; n],
            closed: Vec::new(),
            ranges: None,
            server_side: false,
            last_tick: vec![0; n],
            window: (u128::MAX, u128::MAX),
            ticked: vec![false; n],
            gaps: (0, 0),
        }
    }

    /// Counts the ticks stamped in `[from, to)` from now on.
    pub(crate) fn count_from(&mut self, from: u128, to: u128) {
        if self.window.0 != from {
            self.ticked.fill(false);
            self.gaps = (0, 0);
        }
        self.window = (from, to);
    }

    /// The ticks per second in the window: the objects that ticked there, each once per its
    /// mean gap there (as `fires::Tail::rate`: a raw count is quantised, since the daemons
    /// started together tick in phase).
    pub(crate) fn tick_rate(&self) -> f64 {
        let (sum, count) = self.gaps;
        if count == 0 {
            return 0.0;
        }
        #[allow(clippy::cast_precision_loss)]
        let mean_gap_s = sum as f64 / count as f64 / 1e9;
        #[allow(clippy::cast_precision_loss)]
        let objects = self.ticked.iter().filter(|t| **t).count() as f64;
        objects / mean_gap_s
    }

    /// Reads what both files gained.
    pub(crate) fn poll(&mut self) -> std::io::Result<()> {
        let Self {
            fires,
            log,
            open,
            closed,
            ranges,
            server_side,
            last_tick,
            window,
            ticked,
            gaps,
        } = self;
        fires.read(|line| {
            let Some(f) = parse_line(line) else { return };
            let Some(slot) = open.get_mut(f.object) else {
                return;
            };
            match (f.tag, slot.take()) {
                (Tag::Stop, Some(start)) => closed.push(Run {
                    object: f.object,
                    start,
                    stop: f.at,
                }),
                // A daemon ticks before it can stop: a stop without a run is not one.
                (Tag::Stop, None) => {}
                (_, start) => *slot = Some(start.unwrap_or(f.at)),
            }
            if f.tag == Tag::Stop {
                return;
            }
            let prev = std::mem::replace(&mut last_tick[f.object], f.at);
            if f.at >= window.0 && f.at < window.1 {
                ticked[f.object] = true;
                if prev > 0 {
                    gaps.0 += f.at.saturating_sub(prev);
                    gaps.1 += 1;
                }
            }
        })?;
        log.read(|line| {
            if line.contains("sharding: this member serves new ranges") {
                let text = line
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("ranges="))
                    .unwrap_or("");
                *ranges = parse_ranges(text).or(ranges.take());
            } else if line.contains("the API server filters the watches (shardSelector)") {
                *server_side = true;
            }
        })
    }

    /// The latest start or stop stamped here.
    pub(crate) fn last_change(&self) -> u128 {
        let opens = self.open.iter().flatten().copied();
        let stops = self.closed.iter().map(|r| r.stop);
        opens.chain(stops).max().unwrap_or(0)
    }
}

/// Per object, the member serving its range, if the members' ranges are a balanced partition:
/// disjoint, covering every range, each member holding ⌊R/k⌋ or ⌈R/k⌉ of them.
fn partition(members: &[&Member]) -> Option<Vec<usize>> {
    let all = usize::from(SHARD_RANGES);
    let k = members.len();
    let mut holder = vec![usize::MAX; all];
    for (m, member) in members.iter().enumerate() {
        let ranges = member.ranges.as_ref()?;
        let held = ranges.iter().filter(|r| **r).count();
        if held < all / k || held > all.div_ceil(k) {
            return None;
        }
        for (range, _) in ranges.iter().enumerate().filter(|(_, r)| **r) {
            if holder[range] != usize::MAX {
                return None;
            }
            holder[range] = m;
        }
    }
    holder.iter().all(|h| *h != usize::MAX).then_some(holder)
}

/// Per object, the member whose daemon runs it, if every object's daemon runs on exactly one
/// member, the one holding its range, and the ranges are a balanced partition over `members`.
pub(crate) fn settled(members: &[&Member], shards: &[u16]) -> Option<Vec<usize>> {
    let holder = partition(members)?;
    let mut out = Vec::with_capacity(shards.len());
    for (object, shard) in shards.iter().enumerate() {
        let h = holder[usize::from(*shard)];
        let running = members.iter().map(|m| m.open[object].is_some());
        if !running.enumerate().all(|(m, on)| on == (m == h)) {
            return None;
        }
        out.push(h);
    }
    Some(out)
}

/// The instant by which every object's daemon had started somewhere (`None`: some never did).
pub(crate) fn first_runs_by(members: &[&Member], n: usize) -> Option<u128> {
    let mut first = vec![u128::MAX; n];
    for m in members {
        let opens = m
            .open
            .iter()
            .enumerate()
            .filter_map(|(o, s)| Some((o, (*s)?)));
        let closed = m.closed.iter().map(|r| (r.object, r.start));
        for (object, start) in opens.chain(closed) {
            first[object] = first[object].min(start);
        }
    }
    first
        .into_iter()
        .try_fold(0, |acc, t| (t != u128::MAX).then_some(acc.max(t)))
}

/// How many objects whose daemon runs nowhere, and how many on more than one member.
pub(crate) fn coverage(members: &[&Member], n: usize) -> (usize, usize) {
    let mut none = 0;
    let mut many = 0;
    for object in 0..n {
        match members.iter().filter(|m| m.open[object].is_some()).count() {
            0 => none += 1,
            1 => {}
            _ => many += 1,
        }
    }
    (none, many)
}

/// The objects whose daemon ran on two members at once: a run started before another member's
/// run of the same object had stopped. Returns the count and a description of the first.
pub(crate) fn overlaps(members: &[&Member], names: &[&str]) -> (usize, Option<String>) {
    let mut runs: HashMap<usize, Vec<(u128, u128, usize)>> = HashMap::new();
    for (m, member) in members.iter().enumerate() {
        for r in &member.closed {
            runs.entry(r.object).or_default().push((r.start, r.stop, m));
        }
        for (object, start) in member.open.iter().enumerate() {
            if let Some(start) = start {
                runs.entry(object).or_default().push((*start, u128::MAX, m));
            }
        }
    }
    let mut count = 0;
    let mut first = None;
    for (object, mut list) in runs {
        list.sort_unstable();
        // The run that ends last among those started so far.
        let mut latest = list[0];
        for &run in &list[1..] {
            if run.0 < latest.1 && run.2 != latest.2 {
                count += 1;
                first.get_or_insert_with(|| {
                    format!(
                        "obj {object}: on {} from {} to {}, on {} from {}",
                        names[latest.2], latest.0, latest.1, names[run.2], run.0
                    )
                });
                break;
            }
            if run.1 > latest.1 {
                latest = run;
            }
        }
    }
    (count, first)
}

/// The daemons that moved between two settled states, `before` and `after` (the holder per
/// object), the second reached after `since`.
pub(crate) struct Moves {
    /// How many objects changed holder.
    pub(crate) moved: usize,
    /// Per moved object: its first tick on the new holder minus its stop on the old one (s;
    /// negative: an overlap). Missing stops or starts are counted in `unmatched`.
    pub(crate) gaps_s: Vec<f64>,
    pub(crate) unmatched: usize,
    /// Stops after `since` of daemons that did not move (restarted in place).
    pub(crate) stopped_in_place: usize,
}

pub(crate) fn moves(members: &[&Member], before: &[usize], after: &[usize], since: u128) -> Moves {
    let stops: Vec<HashMap<usize, u128>> = members
        .iter()
        .map(|m| {
            let late = m.closed.iter().filter(|r| r.stop >= since);
            late.map(|r| (r.object, r.stop)).collect()
        })
        .collect();
    let mut out = Moves {
        moved: 0,
        gaps_s: Vec::new(),
        unmatched: 0,
        stopped_in_place: 0,
    };
    for (object, (&old, &new)) in before.iter().zip(after).enumerate() {
        if old == new {
            out.stopped_in_place += usize::from(stops[old].contains_key(&object));
            continue;
        }
        out.moved += 1;
        match (stops[old].get(&object), members[new].open[object]) {
            (Some(&stop), Some(start)) => {
                #[allow(clippy::cast_precision_loss)]
                let gap = (start as f64 - stop as f64) / 1e9;
                out.gaps_s.push(gap);
            }
            _ => out.unmatched += 1,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(ranges: &str, open: &[Option<u128>], closed: &[Run]) -> Member {
        let mut m = Member::new(Path::new("/nonexistent"), open.len());
        m.ranges = parse_ranges(ranges);
        m.open = open.to_vec();
        m.closed = closed.to_vec();
        m
    }

    #[test]
    fn ranges_parse_as_logged() {
        let r = parse_ranges("0-1,1023").unwrap();
        assert_eq!(r.iter().filter(|x| **x).count(), 3);
        assert!(r[0] && r[1] && !r[2] && r[1023]);
        assert_eq!(parse_ranges("").unwrap().iter().filter(|x| **x).count(), 0);
        assert!(parse_ranges("5-1024").is_none());
    }

    #[test]
    fn settled_needs_a_balanced_partition_and_one_run_per_object() {
        // Object 0 in range 10 (member a), object 1 in range 900 (member b).
        let shards = [10, 900];
        let a = member("0-511", &[Some(1), None], &[]);
        let b = member("512-1023", &[None, Some(2)], &[]);
        assert_eq!(settled(&[&a, &b], &shards), Some(vec![0, 1]));
        assert_eq!(first_runs_by(&[&a, &b], 2), Some(2));
        let a = member("0-511", &[Some(1), Some(3)], &[]);
        let b = member("512-1023", &[None, Some(2)], &[]);
        assert_eq!(settled(&[&a, &b], &shards), None, "object 1 runs twice");
        assert_eq!(coverage(&[&a, &b], 2), (0, 1));
        let a = member("0-1023", &[Some(1), Some(3)], &[]);
        let b = member("", &[None, None], &[]);
        assert_eq!(settled(&[&a, &b], &shards), None, "not balanced");
        let a = member("0-1023", &[Some(1), None], &[]);
        assert_eq!(coverage(&[&a], 2), (1, 0));
        assert_eq!(first_runs_by(&[&a], 2), None);
    }

    #[test]
    fn overlaps_and_moves_come_from_the_stamps() {
        let stop = |object, start, stop| Run {
            object,
            start,
            stop,
        };
        // Object 0 moves from a to b with a 2 s gap; object 1 moves with b starting 1 s early.
        let a = member(
            "0-511",
            &[None, None],
            &[stop(0, 0, 10_000_000_000), stop(1, 0, 12_000_000_000)],
        );
        let b = member(
            "512-1023",
            &[Some(12_000_000_000), Some(11_000_000_000)],
            &[],
        );
        let members = [&a, &b];
        let (count, first) = overlaps(&members, &["a", "b"]);
        assert_eq!(count, 1);
        assert!(first.unwrap().starts_with("obj 1: on a"));
        let m = moves(&members, &[0, 0], &[1, 1], 5_000_000_000);
        assert_eq!((m.moved, m.unmatched, m.stopped_in_place), (2, 0, 0));
        assert_eq!(m.gaps_s.len(), 2);
        assert!((m.gaps_s[0] - 2.0).abs() < 1e-9 && (m.gaps_s[1] + 1.0).abs() < 1e-9);
    }
}
