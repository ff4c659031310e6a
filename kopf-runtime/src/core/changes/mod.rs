//! Change handlers (`on_create`, `on_update`, `on_delete`, `on_resume`): the pure core, with no
//! clock, no I/O and no Kubernetes. The supervisor feeds it observed versions and the outcomes
//! of invocations, and persists the writes it returns.
//!
//! ```text
//!  observed version ──essence::observe──> Observed {digest, watched fields}
//!        │
//!   machine::detect(stored base, progress, deleting, first sight, …)
//!        ├── Nothing
//!        ├── Continue(kind) ──> ChangeRun::resume(progress)      (a change in flight)
//!        └── Start(kind) ────> ChangeRun::start(base, observed)  (pins the target)
//!                                   │
//!             ┌──── ChangeRun::next(now, matched) ◄──────────────────────┐
//!             ├─ Run{index}  ── invoke ── complete(index, outcome) ── ChangeWrite ── persist
//!             ├─ Wait{at}    ── sleep until `at`, a stop or a new version ─┘
//!             └─ Finished(write?) ── persist; create/update: the target is the new base
//! ```
//!
//! - [`keys`](crate::core::keys): the two annotations, their format, and what one step writes.
//! - [`essence`]: what counts as a change (the change view of `core::essence`), and its stable
//!   digest.
//! - [`json`]: JSON string lengths (what a stored value costs) and equality across a float's
//!   round trip, shared by the format rules.
//! - [`base`]: the diff base (`last-handled`): the digest plus the watched fields, bounded.
//! - [`progress`]: a change in flight (`progress`), its bounded encoding and its merge.
//! - [`machine`]: the cause table and the per-handler transitions.
//!
//! Handlers run one at a time, in declaration order (file, line, column; then id; hand-built
//! handlers last), strictly: one waiting for a retry blocks the ones after it.

pub(crate) mod base;
pub(crate) mod essence;
pub(crate) mod field;
pub(crate) mod format;
mod json;
pub(crate) mod machine;
pub(crate) mod progress;
pub(crate) mod write;

use crate::core::location::SourceLocation;
pub(crate) use field::FieldPath;
use json::json_str_len;

/// The four kinds of change handler, which are also the causes of a change (a change runs the
/// handlers of its cause's kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum ChangeKind {
    /// The object was seen for the first time (no diff base).
    Create,
    /// The essence or a watched field differs from the diff base.
    Update,
    /// The object is being deleted and the finalizer holds it.
    Delete,
    /// The object existed when this process first saw it (in memory only).
    Resume,
}

impl ChangeKind {
    /// Every kind.
    pub(crate) const ALL: [Self; 4] = [Self::Create, Self::Update, Self::Delete, Self::Resume];

    /// The name in the persisted progress and in logs: `"create"`, `"update"`, ….
    #[must_use]
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Update => "update",
            Self::Delete => "delete",
            Self::Resume => "resume",
        }
    }

    /// The kind named `name` (the inverse of [`Self::as_str`]).
    #[must_use]
    pub(crate) fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == name)
    }
}

impl std::fmt::Display for ChangeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How an attempt of a handler ended: success, or the supervisor's verdict on a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome<'a> {
    /// It returned `Ok`.
    Succeeded,
    /// An error that `errors = Ignored` counts as done.
    Ignored,
    /// An error to retry after `delay`.
    Retry {
        /// The delay before the next attempt.
        delay: std::time::Duration,
        /// The error, for the record (truncated).
        message: &'a str,
    },
    /// A permanent error, or out of retries.
    Failed {
        /// The error, for the record (truncated).
        message: &'a str,
    },
}

/// What this module needs to know about one change handler.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChangeHandler {
    /// Its index in the supervisor's handlers (what [`machine::Step::Run`] names).
    pub(crate) index: usize,
    /// Its id: the key of its progress record and of its result under `status`.
    pub(crate) id: &'static str,
    /// Its kind.
    pub(crate) kind: ChangeKind,
    /// Where it is declared (the defined order).
    pub(crate) location: SourceLocation,
    /// The watched field of an `on_update` (ignored for the other kinds).
    pub(crate) watch: Option<FieldPath>,
    /// An `on_delete` that does not hold the finalizer.
    pub(crate) optional: bool,
}

/// Why a kind's change handlers cannot be used together (a registry error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BuildError {
    /// A watched field holds a change handler's result: each result would trigger an update.
    #[error(
        "handler `{handler}` watches `{field}`, where change handler `{owner}` stores its \
         result: every result would trigger an update again"
    )]
    SelfWatch {
        /// The watching handler.
        handler: &'static str,
        /// The watched path.
        field: &'static str,
        /// The change handler whose result is under that path.
        owner: &'static str,
    },
    /// The progress of one change could exceed its size limit.
    #[error(
        "the progress of the {kind} handlers could take {bytes} bytes, over the limit of {limit}: \
         use fewer handlers or shorter ids"
    )]
    ProgressTooLarge {
        /// The kind of the handlers.
        kind: ChangeKind,
        /// The worst-case size.
        bytes: usize,
        /// The limit ([`progress::PROGRESS_CAP`]).
        limit: usize,
    },
}

/// Rejects a `field=` that watches `status`, or `status.<id>` (or below) of a change handler.
///
/// # Errors
/// [`BuildError::SelfWatch`] for the first such field.
pub(crate) fn check_watches(handlers: &[ChangeHandler]) -> Result<(), BuildError> {
    for handler in handlers.iter().filter(|h| h.kind == ChangeKind::Update) {
        let Some(field) = handler.watch else { continue };
        let Some(rest) = field.path.strip_prefix("status") else {
            continue;
        };
        let owner = handlers.iter().find(|owner| {
            rest.is_empty()
                || rest.strip_prefix('.').is_some_and(|rest| {
                    rest.strip_prefix(owner.id)
                        .is_some_and(|tail| tail.is_empty() || tail.starts_with('.'))
                })
        });
        if let Some(owner) = owner {
            return Err(BuildError::SelfWatch {
                handler: handler.id,
                field: field.path,
                owner: owner.id,
            });
        }
    }
    Ok(())
}

/// The longest timestamp `jiff` prints (`-009999-01-02T01:59:59.999999999Z`).
const TIME_MAX: usize = 33;
/// The longest record, apart from its message:
/// `{"at":"<time>","n":4294967295,"s":"<time>","st":"failed"}`.
const RECORD_MAX: usize = 45 + 2 * TIME_MAX;
/// The longest UID the API server gives (a UUID in its text form).
pub(crate) const UID_MAX: usize = 36;
/// The longest progress apart from its target and records:
/// `{"c":"create","h":{},"s":"<time>","t":,"u":"<uid>","v":1}`.
const FRAME_MAX: usize = 46 + TIME_MAX + UID_MAX;

/// The most bytes a progress with the handlers `ids` can take besides its target,
/// without messages (which are only added while they fit).
pub(crate) fn worst_case<'a>(ids: impl Iterator<Item = &'a str>) -> usize {
    let records: usize = ids.map(|id| json_str_len(id) + 1 + RECORD_MAX + 1).sum();
    FRAME_MAX + records
}

/// Where a hand-built handler (`HandlerSpec::new`) is "defined": such handlers come last.
const UNKNOWN: SourceLocation = SourceLocation::UNKNOWN;

/// A kind's change handlers, in the defined order, built once per supervisor.
#[derive(Debug, Clone)]
pub(crate) struct ChangeHandlers {
    /// Every change handler, in the defined order.
    handlers: Vec<ChangeHandler>,
    /// The union of the watched fields, by path, without duplicates.
    watched: Vec<FieldPath>,
}

impl ChangeHandlers {
    /// Orders the handlers (declaration order; hand-built ones last) and checks them.
    ///
    /// # Errors
    /// A self-watching field, or a change whose progress could not fit its limit.
    pub(crate) fn new(mut handlers: Vec<ChangeHandler>) -> Result<Self, BuildError> {
        check_watches(&handlers)?;
        handlers.sort_by_key(|h| {
            let l = h.location;
            (l == UNKNOWN, l.file, l.line, l.column, h.id)
        });
        for kind in [ChangeKind::Create, ChangeKind::Update, ChangeKind::Delete] {
            let ids = handlers.iter().filter(|h| h.kind == kind).map(|h| h.id);
            let bytes = worst_case(ids);
            if bytes > progress::PROGRESS_CAP {
                let limit = progress::PROGRESS_CAP;
                return Err(BuildError::ProgressTooLarge { kind, bytes, limit });
            }
        }
        let mut watched: Vec<FieldPath> = handlers
            .iter()
            .filter(|h| h.kind == ChangeKind::Update)
            .filter_map(|h| h.watch)
            .collect();
        watched.sort_unstable();
        watched.dedup_by_key(|field| field.path);
        Ok(Self { handlers, watched })
    }

    /// Every change handler, in the defined order.
    #[must_use]
    pub(crate) fn all(&self) -> &[ChangeHandler] {
        &self.handlers
    }

    /// The handlers of `kind`, in the defined order.
    pub(crate) fn of(&self, kind: ChangeKind) -> impl Iterator<Item = &ChangeHandler> {
        self.handlers.iter().filter(move |h| h.kind == kind)
    }

    /// The union of the watched fields (what the diff base stores).
    #[must_use]
    pub(crate) fn watched(&self) -> &[FieldPath] {
        &self.watched
    }

    /// Whether there is a handler of `kind`.
    #[must_use]
    pub(crate) fn has(&self, kind: ChangeKind) -> bool {
        self.of(kind).next().is_some()
    }

    #[cfg(test)]
    /// Whether there is an `on_update` without `field` (it runs on any change of the essence).
    #[must_use]
    pub(crate) fn has_plain_update(&self) -> bool {
        self.of(ChangeKind::Update).any(|h| h.watch.is_none())
    }

    /// Whether a diff base is kept: only create and update handlers need one.
    #[must_use]
    pub(crate) fn needs_base(&self) -> bool {
        self.has(ChangeKind::Create) || self.has(ChangeKind::Update)
    }
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;
    use serde_json::{Value, json};

    use super::base::DiffBase;
    use super::essence::{EssenceCfg, observe};
    use super::field::Observed;
    use super::progress::{PROGRESS_CAP, Progress, Record, State};
    use super::*;
    use crate::core::spec::{HandlerKind, HandlerSpec};

    /// A wall-clock time, `second`s after a fixed instant.
    pub(super) fn t(second: i64) -> Timestamp {
        Timestamp::from_second(1_780_000_000 + second).unwrap_or(Timestamp::MAX)
    }

    /// a, b: create; u: update; f: update of `spec.size`; d: delete; o: optional delete; r: resume.
    pub(super) fn set() -> ChangeHandlers {
        let mut f = handler(3, "f", ChangeKind::Update);
        f.watch = Some(SIZE);
        let mut o = handler(5, "o", ChangeKind::Delete);
        o.optional = true;
        ChangeHandlers::new(vec![
            handler(0, "a", ChangeKind::Create),
            handler(1, "b", ChangeKind::Create),
            handler(2, "u", ChangeKind::Update),
            f,
            handler(4, "d", ChangeKind::Delete),
            o,
            handler(6, "r", ChangeKind::Resume),
        ])
        .unwrap()
    }

    /// An object with one label and `spec.size`.
    pub(super) fn body(app: &str, size: i64) -> Value {
        json!({"metadata": {"labels": {"app": app}}, "spec": {"size": size}})
    }

    /// `body` as seen by the handlers of `set`.
    pub(super) fn seen<'b>(set: &ChangeHandlers, body: &'b Value) -> Observed<'b> {
        let cfg = EssenceCfg {
            own_prefix: "kopf.dev/",
            watched: set.watched(),
        };
        observe(body, &cfg)
    }

    /// The diff base of `body` for the handlers of `set`.
    pub(super) fn base_of(set: &ChangeHandlers, body: &Value) -> DiffBase {
        DiffBase::capture(&seen(set, body))
    }

    fn at(file: &'static str, line: u32) -> SourceLocation {
        SourceLocation {
            file,
            line,
            column: 1,
        }
    }

    /// A handler for the tests: index `index`, declared at `line` of `src/a.rs`.
    pub(super) fn handler(index: usize, id: &'static str, kind: ChangeKind) -> ChangeHandler {
        ChangeHandler {
            index,
            id,
            kind,
            location: at("src/a.rs", u32::try_from(index).unwrap() * 10),
            watch: None,
            optional: false,
        }
    }

    pub(super) const SIZE: FieldPath = FieldPath {
        path: "spec.size",
        segments: &["spec", "size"],
    };

    #[test]
    fn kinds_have_stable_names() {
        for kind in ChangeKind::ALL {
            assert_eq!(ChangeKind::parse(kind.as_str()), Some(kind));
            assert_eq!(kind.to_string(), kind.as_str());
        }
        assert_eq!(ChangeKind::parse("Create"), None);
    }

    #[test]
    fn declaration_order_then_id_and_hand_built_last() {
        let mut late = handler(0, "z_first_in_file_b", ChangeKind::Create);
        late.location = at("src/b.rs", 1);
        let mut tie = handler(1, "a_tie", ChangeKind::Create);
        tie.location = at("src/a.rs", 50);
        let mut built = handler(2, "a_hand_built", ChangeKind::Create);
        built.location = HandlerSpec::new("", HandlerKind::Timer).location;
        let mut tie2 = handler(3, "b_tie", ChangeKind::Create);
        tie2.location = at("src/a.rs", 50);
        let early = handler(4, "m", ChangeKind::Create);
        let set = ChangeHandlers::new(vec![late, tie, built, tie2, early]).unwrap();
        let ids: Vec<_> = set.all().iter().map(|h| h.id).collect();
        assert_eq!(
            ids,
            ["m", "a_tie", "b_tie", "z_first_in_file_b", "a_hand_built"]
        );
    }

    #[test]
    fn flags_and_the_watched_union() {
        let mut a = handler(0, "a", ChangeKind::Update);
        a.watch = Some(SIZE);
        let mut b = handler(1, "b", ChangeKind::Update);
        b.watch = Some(SIZE);
        let mut c = handler(2, "c", ChangeKind::Delete);
        c.watch = Some(FieldPath {
            path: "spec.ignored",
            segments: &["spec", "ignored"],
        });
        let set = ChangeHandlers::new(vec![a, b, c]).unwrap();
        assert_eq!(set.watched(), [SIZE]);
        assert!(set.has(ChangeKind::Update) && set.has(ChangeKind::Delete));
        assert!(!set.has_plain_update() && !set.has(ChangeKind::Resume));
        assert!(set.needs_base());
        let resume = ChangeHandlers::new(vec![handler(0, "r", ChangeKind::Resume)]).unwrap();
        assert!(!resume.needs_base());
        assert_eq!(resume.of(ChangeKind::Resume).count(), 1);
    }

    #[test]
    fn watching_a_change_handlers_result_is_rejected() {
        let watcher = |path: &'static str, segments: &'static [&'static str]| {
            let mut h = handler(0, "watcher", ChangeKind::Update);
            h.watch = Some(FieldPath { path, segments });
            h
        };
        let owner = handler(1, "make.bucket", ChangeKind::Create);
        for (path, segments) in [
            ("status", &["status"][..]),
            ("status.watcher", &["status", "watcher"][..]),
            ("status.make.bucket", &["status", "make", "bucket"][..]),
            (
                "status.make.bucket.x",
                &["status", "make", "bucket", "x"][..],
            ),
        ] {
            let err = ChangeHandlers::new(vec![watcher(path, segments), owner]).unwrap_err();
            assert!(matches!(err, BuildError::SelfWatch { field, .. } if field == path));
        }
        let err = check_watches(&[watcher("status.watcher", &["status", "watcher"])]);
        assert_eq!(
            err.unwrap_err().to_string(),
            "handler `watcher` watches `status.watcher`, where change handler `watcher` stores \
             its result: every result would trigger an update again"
        );
        for (path, segments) in [
            ("status.make.bucketx", &["status", "make", "bucketx"][..]),
            ("status.phase", &["status", "phase"][..]),
            ("statusx", &["statusx"][..]),
            ("spec.watcher", &["spec", "watcher"][..]),
        ] {
            assert!(ChangeHandlers::new(vec![watcher(path, segments), owner]).is_ok());
        }
    }

    #[test]
    fn the_worst_case_bounds_the_progress_and_rejects_too_many() {
        // 56 handlers with 28-character ids fit; 57 do not.
        let ids: Vec<&'static str> = (0..57)
            .map(|i| &*Box::leak(format!("handler-{i:0>20}").into_boxed_str()))
            .collect();
        let many = ids
            .iter()
            .enumerate()
            .map(|(i, id)| handler(i, id, ChangeKind::Delete));
        let err = ChangeHandlers::new(many.collect()).unwrap_err();
        assert!(matches!(err, BuildError::ProgressTooLarge { bytes, .. } if bytes > PROGRESS_CAP));
        assert!(err.to_string().contains("delete handlers"));
        let few = ids[..56]
            .iter()
            .enumerate()
            .map(|(i, id)| handler(i, id, ChangeKind::Delete));
        assert!(ChangeHandlers::new(few.collect()).is_ok());
        // The worst case, encoded: the longest time, every record waiting, long messages.
        let nanos = jiff::SignedDuration::new(0, 999_999_999);
        let at = Timestamp::MIN.saturating_add(nanos).unwrap();
        assert_eq!(at.to_string().len(), TIME_MAX, "the longest time");
        assert!(Timestamp::MAX.to_string().len() <= TIME_MAX);
        let heavy = Record {
            state: State::Waiting { at },
            retries: u32::MAX,
            started: Some(at),
            message: Some("\"".repeat(format::MESSAGE_CAP)),
        };
        let mut progress = Progress {
            cause: ChangeKind::Create,
            target: base_of(&set(), &body("x", 1)),
            started: at,
            handlers: ids[..56]
                .iter()
                .map(|id| ((*id).to_owned(), heavy.clone()))
                .collect(),
        };
        let uid = Some("6f1c2a9e-0000-4000-8000-1234567890ab");
        let (text, target) = (
            progress.encode_bound(uid),
            progress.target.to_json().to_string(),
        );
        assert!(text.len() - target.len() <= PROGRESS_CAP, "{}", text.len());
        let decoded = Progress::decode(&text).unwrap();
        let kept = decoded.handlers.values().filter(|r| r.message.is_some());
        assert_eq!(kept.count(), 0, "no room left for a message");
        progress
            .handlers
            .values_mut()
            .for_each(|r| r.message = None);
        let worst = worst_case(ids[..56].iter().copied());
        assert!(progress.encode_bound(uid).len() - target.len() <= worst);
    }
}
