//! Counting API requests from the kube-apiserver's audit log (one `RequestReceived` event per
//! request, see `bench/audit-policy.yaml`). The harness's own requests carry its user agent and
//! are left out, and so are the API server's internal ones.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufRead as _, BufReader, Seek as _, SeekFrom};
use std::path::PathBuf;

use kopf_bench::kubeutil::HARNESS_USER_AGENT;

use crate::scenarios::{Ctx, Metrics, count_f};

/// A position in the audit log.
#[derive(Debug, Clone)]
pub(crate) struct AuditLog {
    path: PathBuf,
}

/// Requests counted between two marks, by verb.
#[derive(Debug, Default, Clone)]
pub(crate) struct Counts {
    pub(crate) total: u64,
    pub(crate) by_verb: BTreeMap<String, u64>,
}

impl Counts {
    /// The total as a metric value.
    pub(crate) fn total_f(&self) -> f64 {
        #[allow(clippy::cast_precision_loss)]
        let t = self.total as f64;
        t
    }
}

impl AuditLog {
    pub(crate) fn from_env() -> Option<Self> {
        std::env::var_os("BENCH_AUDIT_LOG").map(|p| Self {
            path: PathBuf::from(p),
        })
    }

    /// The current end of the log (a mark).
    pub(crate) fn mark(&self) -> u64 {
        std::fs::metadata(&self.path).map_or(0, |m| m.len())
    }

    /// Calls `f` with every request of the operator (not the harness's, not the API server's
    /// own) between two marks.
    fn for_each_request(
        &self,
        from: u64,
        to: u64,
        mut f: impl FnMut(&serde_json::Value),
    ) -> std::io::Result<()> {
        let mut file = File::open(&self.path)?;
        file.seek(SeekFrom::Start(from))?;
        let mut reader = BufReader::new(file);
        let mut pos = from;
        let mut line = String::new();
        while pos < to {
            line.clear();
            let read = reader.read_line(&mut line)?;
            if read == 0 {
                break;
            }
            pos += read as u64;
            let Ok(event) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            if event["stage"] != "RequestReceived" {
                continue;
            }
            let agent = event["userAgent"].as_str().unwrap_or("");
            let user = event["user"]["username"].as_str().unwrap_or("");
            if agent.starts_with(HARNESS_USER_AGENT) || user.starts_with("system:") {
                continue;
            }
            f(&event);
        }
        Ok(())
    }

    /// Counts the operator's requests between two marks.
    pub(crate) fn count(&self, from: u64, to: u64) -> std::io::Result<Counts> {
        let mut counts = Counts::default();
        self.for_each_request(from, to, |event| {
            counts.total += 1;
            let verb = event["verb"].as_str().unwrap_or("?").to_owned();
            *counts.by_verb.entry(verb).or_default() += 1;
        })?;
        Ok(counts)
    }

    /// The resources (plural names) the operator opened a watch on between two marks.
    pub(crate) fn watched(&self, from: u64, to: u64) -> std::io::Result<BTreeSet<String>> {
        let mut out = BTreeSet::new();
        self.for_each_request(from, to, |event| {
            if event["verb"] == "watch"
                && let Some(resource) = event["objectRef"]["resource"].as_str()
            {
                out.insert(resource.to_owned());
            }
        })?;
        Ok(out)
    }
}

/// Adds the operator's requests since the mark `from` to `metrics`: the total, per second over
/// `secs`, per fire (of `runs`), and by verb.
pub(crate) fn audit_metrics(ctx: &Ctx, from: u64, metrics: &mut Metrics, runs: usize, secs: f64) {
    let Some(audit) = &ctx.audit else { return };
    let to = audit.mark();
    if let Ok(counts) = audit.count(from, to) {
        #[allow(clippy::cast_precision_loss)]
        let total = counts.total as f64;
        metrics.insert("requests".into(), total);
        metrics.insert("requests_per_s".into(), total / secs);
        if runs > 0 {
            metrics.insert("requests_per_fire".into(), total / count_f(runs));
        }
        for (verb, c) in counts.by_verb {
            #[allow(clippy::cast_precision_loss)]
            metrics.insert(format!("requests_{verb}"), c as f64);
        }
    }
}
