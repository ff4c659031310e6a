//! Reading the shared logs of `shard_process`: the time of a line, the processes running each
//! object's daemon, timer ticks inside another process's run, the outcome of a daemon's last
//! write, and the block of ranges each member is assigned.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::time::Duration;

use kopf_runtime::ha::SHARD_RANGES;

use super::Obj;
use crate::process_common::Entry;

/// The time in a log line: the first word of its detail.
pub fn at(entry: &Entry) -> u128 {
    entry
        .detail
        .split(' ')
        .next()
        .and_then(|t| t.parse().ok())
        .unwrap_or_default()
}

pub fn since(start: u128, end: u128) -> Duration {
    Duration::from_nanos(u64::try_from(end.saturating_sub(start)).unwrap_or(u64::MAX))
}

/// The block of ranges the `i`-th of `n` members is assigned: `i·R/n .. (i+1)·R/n`.
pub fn block(i: usize, n: usize) -> (u16, u16) {
    let bound = |k: usize| u16::try_from(k * usize::from(SHARD_RANGES) / n).unwrap_or(SHARD_RANGES);
    (bound(i), bound(i + 1))
}

/// A block as the stats print it (inclusive ends).
pub fn block_text((start, end): (u16, u16)) -> String {
    match end - start {
        0 => String::new(),
        1 => start.to_string(),
        _ => format!("{start}-{}", end - 1),
    }
}

/// The outcome of the last write of `obj`'s daemon in `pid` after `begun`, when `pid` handed
/// it over gracefully: `true` if it went through, `false` if the stop ladder's end cancelled it
/// first (a slow API server); never refused by the fence nor failed.
pub fn last_write(log: &[Entry], obj: &Obj, pid: u32, begun: u128) -> anyhow::Result<bool> {
    let mine = |e: &&Entry| e.uid == obj.uid && e.pid == pid && at(e) >= begun;
    let outcome = log
        .iter()
        .filter(mine)
        .find(|e| ["written", "fenced", "failed"].contains(&e.kind.as_str()));
    let stop = log.iter().filter(mine).find(|e| e.kind == "stop");
    match (outcome.map(|e| e.kind.as_str()), stop) {
        (Some("written"), _) => Ok(true),
        (None, Some(stop)) if stop.detail.contains("cancelled") => Ok(false),
        (outcome, stop) => anyhow::bail!("{}: {pid}'s last write: {outcome:?}, {stop:?}", obj.name),
    }
}

/// Per UID, the processes running its daemon, replayed from the log.
pub fn holders(log: &[Entry]) -> BTreeMap<&str, Vec<u32>> {
    let mut holders: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for entry in log {
        match entry.kind.as_str() {
            "start" => holders.entry(&entry.uid).or_default().push(entry.pid),
            "stop" => holders
                .entry(&entry.uid)
                .or_default()
                .retain(|p| *p != entry.pid),
            "killed" => holders
                .values_mut()
                .for_each(|held| held.retain(|p| *p != entry.pid)),
            _ => {}
        }
    }
    holders
}

/// Timer ticks while another process ran the object's daemon: a tick of `pid` at `t` inside
/// another process's run of the daemon (start to stop, or to its kill) of the same UID.
pub fn ticks_inside_others(log: &[Entry], ticks: &[Entry]) -> Vec<String> {
    let mut runs: BTreeMap<&str, Vec<(u32, u128, u128)>> = BTreeMap::new();
    let mut open: BTreeMap<(&str, u32), u128> = BTreeMap::new();
    for entry in log {
        match entry.kind.as_str() {
            "start" => {
                open.insert((&entry.uid, entry.pid), at(entry));
            }
            "stop" => {
                if let Some(start) = open.remove(&(entry.uid.as_str(), entry.pid)) {
                    let run = (entry.pid, start, at(entry));
                    runs.entry(&entry.uid).or_default().push(run);
                }
            }
            "killed" => {
                let ended: Vec<_> = open.keys().filter(|k| k.1 == entry.pid).copied().collect();
                for key in ended {
                    let start = open.remove(&key).unwrap_or_default();
                    runs.entry(key.0)
                        .or_default()
                        .push((key.1, start, at(entry)));
                }
            }
            _ => {}
        }
    }
    for ((uid, pid), start) in open {
        runs.entry(uid).or_default().push((pid, start, u128::MAX));
    }
    let mut found = Vec::new();
    for tick in ticks {
        let t = at(tick);
        let inside = runs.get(tick.uid.as_str()).into_iter().flatten();
        for (pid, start, end) in inside {
            if *pid != tick.pid && *start <= t && t <= *end {
                found.push(format!(
                    "{}: tick of {} at {t} while {pid} ran its daemon ({start}..{end})",
                    tick.name, tick.pid
                ));
            }
        }
    }
    found
}
