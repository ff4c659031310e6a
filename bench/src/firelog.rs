//! The fire log: `<unix nanoseconds> <tag> <object name>` lines, written by the handlers.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How often buffered lines reach the file at the latest (checked on each record), so the
/// harness can follow the file while the operator runs.
pub const FLUSH_EVERY: Duration = Duration::from_millis(250);

/// What a line records.
///
/// ```
/// use kopf_bench::Tag;
/// assert_eq!(Tag::parse("F"), Some(Tag::Fire));
/// assert_eq!(Tag::Stop.as_str(), "S");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tag {
    /// A timer invocation started.
    Fire,
    /// A daemon's loop ticked.
    Tick,
    /// A daemon saw its stop signal and returned.
    Stop,
}

impl Tag {
    /// The one-letter form used in the file.
    ///
    /// ```
    /// assert_eq!(kopf_bench::Tag::Tick.as_str(), "T");
    /// ```
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Fire => "F",
            Self::Tick => "T",
            Self::Stop => "S",
        }
    }

    /// Parses the one-letter form.
    ///
    /// ```
    /// assert_eq!(kopf_bench::Tag::parse("X"), None);
    /// ```
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "F" => Some(Self::Fire),
            "T" => Some(Self::Tick),
            "S" => Some(Self::Stop),
            _ => None,
        }
    }
}

struct State {
    out: BufWriter<File>,
    last_flush: Instant,
}

/// A buffered, thread-safe writer of fire-log lines.
///
/// ```
/// use kopf_bench::{FireLog, Tag};
/// let path = std::env::temp_dir().join(format!("firelog-doc-{}.txt", std::process::id()));
/// let log = FireLog::create(&path).unwrap();
/// log.record(Tag::Fire, "obj-00001");
/// log.flush();
/// let text = std::fs::read_to_string(&path).unwrap();
/// assert!(text.ends_with(" F obj-00001\n"));
/// # std::fs::remove_file(&path).unwrap();
/// ```
pub struct FireLog {
    state: Mutex<State>,
}

impl fmt::Debug for FireLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FireLog").finish_non_exhaustive()
    }
}

/// Nanoseconds since the Unix epoch (the clock the harness and the Python arm use too).
///
/// ```
/// assert!(kopf_bench::firelog::unix_nanos() > 1_600_000_000_000_000_000);
/// ```
#[must_use]
pub fn unix_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

impl FireLog {
    /// Opens (appends to) the file at `path`.
    ///
    /// # Errors
    /// The I/O error if the file cannot be opened.
    ///
    /// ```
    /// assert!(kopf_bench::FireLog::create("/nonexistent-dir/x").is_err());
    /// ```
    pub fn create(path: impl AsRef<Path>) -> io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self {
            state: Mutex::new(State {
                out: BufWriter::with_capacity(1 << 16, file),
                last_flush: Instant::now(),
            }),
        })
    }

    /// Opens the file named by `$BENCH_FIRES`.
    ///
    /// # Errors
    /// If the variable is unset or the file cannot be opened.
    ///
    /// ```no_run
    /// let log = kopf_bench::FireLog::from_env().unwrap();
    /// ```
    pub fn from_env() -> io::Result<Self> {
        let path = std::env::var_os("BENCH_FIRES").ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                "BENCH_FIRES is not set (the fire-log path)",
            )
        })?;
        Self::create(path)
    }

    /// Appends one line stamped now; flushes if the last flush is [`FLUSH_EVERY`] old.
    /// Write errors are ignored (the harness notices missing lines).
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("firelog-doc2-{}.txt", std::process::id()));
    /// let log = kopf_bench::FireLog::create(&path).unwrap();
    /// log.record(kopf_bench::Tag::Stop, "a");
    /// # std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn record(&self, tag: Tag, name: &str) {
        let now = unix_nanos();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = writeln!(state.out, "{now} {} {name}", tag.as_str());
        if state.last_flush.elapsed() >= FLUSH_EVERY {
            let _ = state.out.flush();
            state.last_flush = Instant::now();
        }
    }

    /// Writes out everything buffered.
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("firelog-doc3-{}.txt", std::process::id()));
    /// let log = kopf_bench::FireLog::create(&path).unwrap();
    /// log.flush();
    /// # std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn flush(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = state.out.flush();
        state.last_flush = Instant::now();
    }
}

impl Drop for FireLog {
    fn drop(&mut self) {
        self.flush();
    }
}
