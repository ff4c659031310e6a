//! Reading the fire logs the arms write: following them live, and lateness afterwards.

use std::fs::File;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::{Path, PathBuf};

use kopf_bench::Tag;
use kopf_bench::names::object_index;

/// One parsed line.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fire {
    /// Unix nanoseconds.
    pub(crate) at: u128,
    pub(crate) tag: Tag,
    pub(crate) object: usize,
}

pub(crate) fn parse_line(line: &str) -> Option<Fire> {
    let mut it = line.split(' ');
    let at = it.next()?.parse().ok()?;
    let tag = Tag::parse(it.next()?)?;
    let object = object_index(it.next()?)?;
    Some(Fire { at, tag, object })
}

/// Follows a file another process appends lines to.
pub(crate) struct Follow {
    path: PathBuf,
    offset: u64,
    partial: String,
}

impl Follow {
    pub(crate) fn new(path: &Path) -> Self {
        Self {
            path: path.to_owned(),
            offset: 0,
            partial: String::new(),
        }
    }

    /// Calls `f` with every complete line appended since the last call (none while the file
    /// does not exist).
    pub(crate) fn read(&mut self, mut f: impl FnMut(&str)) -> std::io::Result<()> {
        let mut file = match File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        file.seek(SeekFrom::Start(self.offset))?;
        let mut buf = String::new();
        let read = file.read_to_string(&mut buf)?;
        self.offset += read as u64;
        self.partial.push_str(&buf);
        let Some(end) = self.partial.rfind('\n') else {
            return Ok(());
        };
        let complete: String = self.partial.drain(..=end).collect();
        complete.lines().for_each(&mut f);
        Ok(())
    }
}

/// Follows a fire log as the arm writes it, counting lines per object and tag.
pub(crate) struct Tail {
    file: Follow,
    /// Per object: fires/ticks seen.
    pub(crate) runs: Vec<u32>,
    /// Per object: stops seen.
    pub(crate) stops: Vec<u32>,
    /// Every line parsed so far.
    pub(crate) all: Vec<Fire>,
}

impl Tail {
    pub(crate) fn new(path: &Path, n: usize) -> Self {
        Self {
            file: Follow::new(path),
            runs: vec![0; n],
            stops: vec![0; n],
            all: Vec::new(),
        }
    }

    /// Reads what was appended since the last call.
    pub(crate) fn poll(&mut self) -> std::io::Result<()> {
        let Self {
            file,
            runs,
            stops,
            all,
        } = self;
        file.read(|line| {
            if let Some(f) = parse_line(line) {
                let counts = if f.tag == Tag::Stop {
                    &mut *stops
                } else {
                    &mut *runs
                };
                if let Some(c) = counts.get_mut(f.object) {
                    *c += 1;
                }
                all.push(f);
            }
        })
    }

    /// How many objects have at least `k` runs.
    pub(crate) fn objects_with_runs(&self, k: u32) -> usize {
        self.runs.iter().filter(|c| **c >= k).count()
    }

    /// How many objects recorded a stop.
    pub(crate) fn objects_stopped(&self) -> usize {
        self.stops.iter().filter(|c| **c > 0).count()
    }

    /// The instant by which every object had its first run (`None` if some never ran).
    pub(crate) fn all_first_runs_by(&self) -> Option<u128> {
        let mut first = vec![None::<u128>; self.runs.len()];
        for f in &self.all {
            if f.tag != Tag::Stop
                && let Some(slot) = first.get_mut(f.object)
                && slot.is_none()
            {
                *slot = Some(f.at);
            }
        }
        first
            .into_iter()
            .try_fold(0, |acc, t| t.map(|t| acc.max(t)))
    }

    /// Lateness (seconds) of every run in `[from, to)` that follows an earlier run of the same
    /// object: the gap minus `interval`. With a handler that does ~nothing, the ideal gap of a
    /// kopf-style soft interval is exactly `interval`.
    pub(crate) fn lateness(&self, from: u128, to: u128, interval_s: f64) -> Vec<f64> {
        let mut last = vec![None::<u128>; self.runs.len()];
        let mut out = Vec::new();
        for f in &self.all {
            if f.tag == Tag::Stop {
                continue;
            }
            let Some(slot) = last.get_mut(f.object) else {
                continue;
            };
            if let Some(prev) = *slot
                && f.at >= from
                && f.at < to
            {
                #[allow(clippy::cast_precision_loss)]
                let gap = f.at.saturating_sub(prev) as f64 / 1e9;
                out.push(gap - interval_s);
            }
            *slot = Some(f.at);
        }
        out
    }

    /// The achieved rate: the objects that ran in `[from, to)`, each at one run per its mean
    /// gap there (robust against where the window cuts the bursts).
    pub(crate) fn rate(&self, from: u128, to: u128, interval_s: f64) -> f64 {
        let gaps = self.lateness(from, to, interval_s);
        if gaps.is_empty() {
            return 0.0;
        }
        let mut active = vec![false; self.runs.len()];
        for f in &self.all {
            if f.tag != Tag::Stop
                && f.at >= from
                && f.at < to
                && let Some(a) = active.get_mut(f.object)
            {
                *a = true;
            }
        }
        let objects = active.iter().filter(|a| **a).count();
        #[allow(clippy::cast_precision_loss)]
        let mean_gap = gaps.iter().map(|l| l + interval_s).sum::<f64>() / gaps.len() as f64;
        #[allow(clippy::cast_precision_loss)]
        let rate = objects as f64 / mean_gap;
        rate
    }

    /// Runs recorded in `[from, to)`.
    pub(crate) fn runs_between(&self, from: u128, to: u128) -> usize {
        self.all
            .iter()
            .filter(|f| f.tag != Tag::Stop && f.at >= from && f.at < to)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    fn temp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("kopf-bench-fires-{name}-{}", std::process::id()))
    }

    #[test]
    fn follows_partial_lines_and_measures_lateness() {
        let path = temp("tail");
        let mut f = File::create(&path).unwrap();
        // obj 0 fires at 0 s, 1.010 s, 2.030 s; obj 1 at 0.5 s and stops at 1.5 s.
        write!(
            f,
            "0 F obj-0000000\n500000000 F obj-0000001\n1010000000 F obj-00"
        )
        .unwrap();
        f.flush().unwrap();
        let mut tail = Tail::new(&path, 2);
        tail.poll().unwrap();
        assert_eq!(
            tail.all.len(),
            2,
            "the partial third line waits for its end"
        );
        write!(
            f,
            "00000\n1500000000 S obj-0000001\n2030000000 F obj-0000000\n"
        )
        .unwrap();
        f.flush().unwrap();
        tail.poll().unwrap();
        assert_eq!(tail.runs, vec![3, 1]);
        assert_eq!(tail.objects_with_runs(2), 1);
        assert_eq!(tail.objects_stopped(), 1);
        assert_eq!(tail.all_first_runs_by(), Some(500_000_000));
        let late = tail.lateness(0, 3_000_000_000, 1.0);
        assert_eq!(late.len(), 2);
        assert!(
            (late[0] - 0.010).abs() < 1e-9 && (late[1] - 0.020).abs() < 1e-9,
            "{late:?}"
        );
        // Only fires inside the window count; the gap before them may start earlier.
        assert_eq!(tail.lateness(1_500_000_000, 3_000_000_000, 1.0).len(), 1);
        assert_eq!(tail.runs_between(0, 1_000_000_000), 2);
        // One object firing in the window, once per 1.015 s on average.
        let rate = tail.rate(1_000_000_000, 3_000_000_000, 1.0);
        assert!((rate - 1.0 / 1.015).abs() < 1e-9, "{rate}");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_missing_file_is_empty_and_bad_lines_are_skipped() {
        let path = temp("missing");
        let mut tail = Tail::new(&path, 1);
        tail.poll().unwrap();
        assert!(tail.all.is_empty());
        std::fs::write(
            &path,
            "garbage\n1 X obj-0000000\n2 F other\n3 F obj-0000000\n",
        )
        .unwrap();
        tail.poll().unwrap();
        assert_eq!(tail.all.len(), 1);
        assert_eq!(tail.all_first_runs_by(), Some(3));
        std::fs::remove_file(&path).unwrap();
    }
}
