//! CPU time and memory of a process, read from `/proc` from the outside.

use std::fs;
use std::io;
use std::sync::OnceLock;

/// One reading of a process's counters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcSample {
    /// User + system CPU time consumed so far, in seconds (all threads).
    pub cpu_s: f64,
    /// Resident set size now, in bytes.
    pub rss: u64,
    /// Peak resident set size so far (`VmHWM`), in bytes.
    pub hwm: u64,
    /// On-CPU time of the live threads, in seconds, from `/proc/<pid>/task/*/schedstat`
    /// (nanosecond precision, unlike the 10 ms ticks of `cpu_s`; `None` if unavailable).
    pub cpu_precise_s: Option<f64>,
}

fn schedstat_s(pid: u32) -> Option<f64> {
    let mut total: u64 = 0;
    for entry in fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let path = entry.ok()?.path().join("schedstat");
        let text = fs::read_to_string(path).ok()?;
        total += text.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    #[allow(clippy::cast_precision_loss)]
    Some(total as f64 / 1e9)
}

fn clock_ticks() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

fn bad(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("unexpected /proc format: {what}"),
    )
}

/// Reads `/proc/<pid>/stat` and `/proc/<pid>/status`.
///
/// # Errors
/// If the process does not exist (any more) or the files do not parse.
///
/// ```
/// let s = kopf_bench::procstat::read(std::process::id()).unwrap();
/// assert!(s.rss > 0 && s.hwm >= s.rss && s.cpu_s >= 0.0);
/// ```
pub fn read(pid: u32) -> io::Result<ProcSample> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let rest = stat.rsplit_once(')').ok_or_else(|| bad("stat"))?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state(0) ppid(1) ... utime(11) stime(12).
    let ticks = |i: usize| -> io::Result<f64> {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .ok_or_else(|| bad("utime/stime"))
    };
    let cpu_s = (ticks(11)? + ticks(12)?) / clock_ticks();
    let status = fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb = |key: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    Ok(ProcSample {
        cpu_s,
        rss: kb("VmRSS:"),
        hwm: kb("VmHWM:"),
        cpu_precise_s: schedstat_s(pid),
    })
}

/// The 1-, 5- and 15-minute load averages of the machine.
///
/// ```
/// let [one, _, _] = kopf_bench::procstat::load_average();
/// assert!(one >= 0.0);
/// ```
#[must_use]
pub fn load_average() -> [f64; 3] {
    let text = fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut it = text
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(f64::NAN));
    [
        it.next().unwrap_or(f64::NAN),
        it.next().unwrap_or(f64::NAN),
        it.next().unwrap_or(f64::NAN),
    ]
}

/// CPU seconds between two samples of one process: from `schedstat` when both have it and it
/// did not go backwards (a thread exited in between), else from the ticks.
///
/// ```
/// use kopf_bench::procstat::{ProcSample, cpu_between};
/// let a = ProcSample { cpu_s: 1.0, rss: 0, hwm: 0, cpu_precise_s: Some(1.001) };
/// let b = ProcSample { cpu_s: 1.5, rss: 0, hwm: 0, cpu_precise_s: Some(1.502) };
/// assert!((cpu_between(&a, &b) - 0.501).abs() < 1e-9);
/// let c = ProcSample { cpu_precise_s: Some(0.5), ..b };
/// assert!((cpu_between(&a, &c) - 0.5).abs() < 1e-9);
/// ```
#[must_use]
pub fn cpu_between(a: &ProcSample, b: &ProcSample) -> f64 {
    match (a.cpu_precise_s, b.cpu_precise_s) {
        (Some(x), Some(y)) if y >= x && (y - x) >= (b.cpu_s - a.cpu_s) - 0.05 => y - x,
        _ => b.cpu_s - a.cpu_s,
    }
}
