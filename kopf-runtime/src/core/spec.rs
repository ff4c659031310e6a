//! The static description of a handler: its id, kind, options and filters.
//!
//! Every value here is const-constructible, so `#[daemon]` / `#[timer]` can emit it into a
//! `static` at compile time.

use std::time::Duration;

use super::filter::Filters;
pub use super::location::SourceLocation;
use super::reconcile::kinds::{KindRef, Related};

/// What kind of handler this is: a daemon, a timer, or a change handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HandlerKind {
    /// One long-running invocation per object.
    Daemon,
    /// Repeated invocations per object on a schedule.
    Timer,
    /// Called once when an object is first seen by the operator (`#[on_create]`).
    Create,
    /// Called once per change of the object's essence, or of one field (`#[on_update]`).
    Update,
    /// Called while the finalizer holds a deleted object (`#[on_delete]`).
    Delete,
    /// Called once per operator process for every object that exists (`#[on_resume]`).
    Resume,
    /// Brings the world in line with the object, whenever something may have changed
    /// (`#[reconcile]`): one long-lived instance per object, like a timer's.
    Reconcile,
}

impl HandlerKind {
    /// `"daemon"`, `"timer"`, `"on_create"`, `"on_update"`, `"on_delete"`, `"on_resume"` or
    /// `"reconcile"`, as used in logs.
    ///
    /// ```
    /// assert_eq!(kopf_runtime::engine::HandlerKind::Timer.as_str(), "timer");
    /// assert_eq!(kopf_runtime::engine::HandlerKind::Delete.as_str(), "on_delete");
    /// ```
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Daemon => "daemon",
            Self::Timer => "timer",
            Self::Create => "on_create",
            Self::Update => "on_update",
            Self::Delete => "on_delete",
            Self::Resume => "on_resume",
            Self::Reconcile => "reconcile",
        }
    }

    /// Whether this is a change handler (create, update, delete or resume), which runs once per
    /// change of an object, in turn with the object's other change handlers.
    ///
    /// ```
    /// use kopf_runtime::engine::HandlerKind;
    /// assert!(HandlerKind::Update.is_change() && !HandlerKind::Timer.is_change());
    /// ```
    #[must_use]
    pub const fn is_change(self) -> bool {
        matches!(
            self,
            Self::Create | Self::Update | Self::Delete | Self::Resume
        )
    }
}

/// How an arbitrary error (neither temporary nor permanent) is treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ErrorsMode {
    /// Retry after `backoff` (the default, as in kopf).
    #[default]
    Temporary,
    /// Treat as a permanent failure.
    Permanent,
    /// Log it and treat the invocation as done (no retry, no failure).
    Ignored,
}

/// A timer's schedule. All `None`/`false` for daemons.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TimerSchedule {
    /// Time between invocations: from the end of one run to the start of the next (soft), or a
    /// fixed grid when `sharp` is set.
    pub interval: Option<Duration>,
    /// Keep to a fixed grid anchored at the first run of this instance; missed ticks are skipped.
    pub sharp: bool,
    /// Fire only after the object's essence has been unchanged for this long.
    pub idle: Option<Duration>,
    /// A random extra delay of up to this much, drawn anew for every fire.
    pub jitter: Option<Duration>,
    /// A one-shot timer: exactly one successful run per instance (no `interval`, no `idle`).
    pub once: bool,
    /// A wall-clock schedule instead of `interval`/`idle`/`once` (only `jitter` combines).
    pub cron: Option<CronSchedule>,
}

/// A cron timer's schedule: `#[timer(cron = "0 3 * * *", tz = "Europe/Berlin")]`.
///
/// ```
/// use kopf_runtime::engine::{CronSchedule, Missed};
/// const NIGHTLY: CronSchedule = CronSchedule {
///     expr: "0 3 * * *",
///     tz: "Europe/Berlin",
///     missed: Missed::Skip,
/// };
/// assert_eq!(NIGHTLY.missed, Missed::default());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CronSchedule {
    /// The cron expression as the `croner` crate reads it: five fields (minute to weekday), or
    /// six with seconds first, or seven with a year last.
    pub expr: &'static str,
    /// The IANA time zone the expression is read in (`"UTC"` unless given).
    pub tz: &'static str,
    /// What a restarted or new owner does about occurrences missed while none ran the timer.
    pub missed: Missed,
}

/// What happens to a cron timer's occurrences missed while no replica ran it (the operator was
/// down, or handing over).
///
/// ```
/// assert_eq!(kopf_runtime::engine::Missed::default(), kopf_runtime::engine::Missed::Skip);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Missed {
    /// They are skipped: the timer waits for its next occurrence.
    #[default]
    Skip,
    /// The latest of them runs once, at once; the others are skipped.
    RunOnce,
}

/// The options of a change handler.
///
/// ```
/// use kopf_runtime::engine::{ChangeOptions, WatchedField};
/// const OPTIONS: ChangeOptions =
///     ChangeOptions::watching(WatchedField { path: "spec.size", segments: &["spec", "size"] });
/// assert_eq!(OPTIONS.field.map(|f| f.path), Some("spec.size"));
/// assert!(ChangeOptions::NONE.field.is_none());
/// ```
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct ChangeOptions {
    /// `#[on_update(field = "...")]`: called only when this field changed.
    pub field: Option<WatchedField>,
    /// The type the handler decodes the watched field into (its `FieldChange<T>`), if it takes
    /// one: checked against the CRD's schema at start-up.
    pub value_type: Option<FieldType>,
}

impl ChangeOptions {
    /// No options.
    pub const NONE: Self = Self {
        field: None,
        value_type: None,
    };

    /// Watches this field (`#[on_update(field = "spec.size")]`).
    ///
    /// ```
    /// use kopf_runtime::engine::{ChangeOptions, WatchedField};
    /// const OPTIONS: ChangeOptions =
    ///     ChangeOptions::watching(WatchedField { path: "spec", segments: &["spec"] });
    /// assert!(OPTIONS.field.is_some());
    /// ```
    #[must_use]
    pub const fn watching(field: WatchedField) -> Self {
        Self {
            field: Some(field),
            value_type: None,
        }
    }

    /// The handler decodes the watched field into `value_type` (it takes a `FieldChange<T>`).
    ///
    /// ```
    /// use kopf_runtime::engine::{ChangeOptions, FieldType, WatchedField};
    /// const OPTIONS: ChangeOptions =
    ///     ChangeOptions::watching(WatchedField { path: "spec.size", segments: &["spec", "size"] })
    ///         .decoded_as(FieldType {
    ///             name: "u64",
    ///             decode: kopf_runtime::__private::decode_probe::<u64>,
    ///         });
    /// let decode = OPTIONS.value_type.map(|t| t.decode);
    /// assert!(decode.is_some_and(|decode| decode(&serde_json::json!("1Gi")).is_err()));
    /// ```
    #[must_use]
    pub const fn decoded_as(self, value_type: FieldType) -> Self {
        Self {
            value_type: Some(value_type),
            ..self
        }
    }
}

/// The Rust type a handler decodes its watched field into, for the start-up check of the field
/// against the CRD's schema: a `FieldChange<u64>` on a field the schema declares a string
/// compiles, and would fail on every call.
///
/// ```
/// use kopf_runtime::engine::FieldType;
/// let t = FieldType { name: "String", decode: kopf_runtime::__private::decode_probe::<String> };
/// assert!((t.decode)(&serde_json::json!("s3://x")).is_ok());
/// assert!((t.decode)(&serde_json::json!(1)).is_err());
/// ```
#[derive(Debug, Clone, Copy)]
pub struct FieldType {
    /// The type as written (`u64`, `Option<String>`), for messages.
    pub name: &'static str,
    /// Decodes a value into the type: `Err` with the decoder's message when it cannot.
    pub decode: fn(&serde_json::Value) -> Result<(), String>,
}

/// A field an update handler watches: its dotted path, split at compile time.
///
/// ```
/// let field = kopf_runtime::engine::WatchedField { path: "spec.a", segments: &["spec", "a"] };
/// assert_eq!(field.segments.len(), 2);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchedField {
    /// The dotted path as written, for messages and the stored diff base.
    pub path: &'static str,
    /// The path's segments.
    pub segments: &'static [&'static str],
}

/// The options of a reconcile handler (`#[reconcile]`); empty for the other kinds. Its error
/// backoff starts at the spec's `backoff` ([`ReconcileOptions::DEFAULT_BACKOFF`] unless
/// `backoff_set`) and doubles up to `backoff_max`.
///
/// ```
/// use std::time::Duration;
/// use kopf_runtime::engine::{KindRef, ReconcileOptions};
/// fn config_maps() -> KindRef { KindRef::new("", "v1", "ConfigMap", "configmaps", true) }
/// const OPTIONS: ReconcileOptions = ReconcileOptions {
///     owns: &[config_maps],
///     debounce: Some(Duration::from_millis(500)),
///     ..ReconcileOptions::NONE
/// };
/// assert_eq!((OPTIONS.owns[0])().kind, "ConfigMap");
/// assert_eq!(OPTIONS.backoff_max, ReconcileOptions::DEFAULT_BACKOFF_MAX);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ReconcileOptions {
    /// The kinds of the children it owns: a change of a child whose owner reference names the
    /// object triggers it.
    pub owns: &'static [fn() -> KindRef],
    /// The related kinds it watches, each with the map from an object to the owners it
    /// triggers.
    pub watches: &'static [Related],
    /// The longest error backoff.
    pub backoff_max: Duration,
    /// How long to wait after the last trigger before running (`None`: at once).
    pub debounce: Option<Duration>,
    /// Whether the handler has a cleanup, run under the finalizer once the object is deleted.
    pub cleanup: bool,
}

impl ReconcileOptions {
    /// The first error backoff of a reconcile handler that sets none: 1 s.
    pub const DEFAULT_BACKOFF: Duration = Duration::from_secs(1);
    /// The longest error backoff unless set: 5 min.
    pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(300);
    /// No children, no related kinds, the default backoff cap, no debounce, no cleanup.
    pub const NONE: Self = Self {
        owns: &[],
        watches: &[],
        backoff_max: Self::DEFAULT_BACKOFF_MAX,
        debounce: None,
        cleanup: false,
    };
}

/// Everything static about a handler. Generated by the macros; see their docs for each option.
#[derive(Debug, Clone, Copy)]
pub struct HandlerSpec {
    /// The handler's id: unique in the program; the key of its result under `status`.
    pub id: &'static str,
    /// Daemon or timer.
    pub kind: HandlerKind,
    /// Where the handler function is defined.
    pub location: SourceLocation,
    /// A blocking (`fn`) handler, run on a dedicated thread.
    pub blocking: bool,
    /// How arbitrary errors are treated.
    pub errors: ErrorsMode,
    /// The delay before retrying after an arbitrary error.
    pub backoff: Duration,
    /// Whether `backoff` was given for this handler; if not, an operator-wide default
    /// (`SupervisorConfig::default_backoff`, `OperatorBuilder::default_backoff`) applies.
    pub backoff_set: bool,
    /// The number of attempts in total before a failure becomes final (`None`: unlimited).
    pub retries: Option<u32>,
    /// The total time across retries, from the first attempt, after which a failure is final.
    pub retry_timeout: Option<Duration>,
    /// A per-invocation deadline, enforced through the stop ladder.
    pub timeout: Option<Duration>,
    /// A fixed delay before the first invocation (a per-object function overrides it, see
    /// `ErasedHandler::initial_delay`).
    pub initial_delay: Option<Duration>,
    /// Whether this handler holds the object's finalizer while it may run (a delete handler:
    /// unless `optional`; other change handlers never; a reconcile handler: with a cleanup).
    pub finalizer: bool,
    /// The graceful period between the stop signal and cancellation.
    pub cancellation_backoff: Option<Duration>,
    /// How long to wait after cancellation before abandoning the task.
    pub cancellation_timeout: Option<Duration>,
    /// How often a still-exiting task without a timeout is logged.
    pub cancellation_polling: Duration,
    /// Daemons and timers: how late a wake-up may come (a timer's interval, a daemon's
    /// [`Stopper::sleep`](crate::Stopper::sleep)) so that many share one; `None`: on time.
    pub slack: Option<Duration>,
    /// The timer schedule (default for daemons).
    pub schedule: TimerSchedule,
    /// Declarative filters.
    pub filters: Filters,
    /// The options of a change handler (none for daemons and timers).
    pub change: ChangeOptions,
    /// The options of a reconcile handler (none for the other kinds).
    pub reconcile: ReconcileOptions,
}

impl HandlerSpec {
    /// kopf's default `backoff`: 60 s.
    pub const DEFAULT_BACKOFF: Duration = Duration::from_secs(60);
    /// kopf's default `cancellation_polling`: 60 s (logging only here; exits are event-driven).
    pub const DEFAULT_CANCELLATION_POLLING: Duration = Duration::from_secs(60);

    /// A spec with every option at its default, for the given id and kind (tests and builders).
    ///
    /// ```
    /// use kopf_runtime::engine::{HandlerKind, HandlerSpec};
    /// const SPEC: HandlerSpec = HandlerSpec::new("monitor", HandlerKind::Daemon);
    /// assert!(SPEC.finalizer);
    /// ```
    #[must_use]
    pub const fn new(id: &'static str, kind: HandlerKind) -> Self {
        Self {
            id,
            kind,
            location: SourceLocation::UNKNOWN,
            blocking: false,
            errors: ErrorsMode::Temporary,
            backoff: match kind {
                HandlerKind::Reconcile => ReconcileOptions::DEFAULT_BACKOFF,
                _ => Self::DEFAULT_BACKOFF,
            },
            backoff_set: false,
            retries: None,
            retry_timeout: None,
            timeout: None,
            initial_delay: None,
            finalizer: matches!(
                kind,
                HandlerKind::Daemon | HandlerKind::Timer | HandlerKind::Delete
            ),
            cancellation_backoff: None,
            cancellation_timeout: None,
            cancellation_polling: Self::DEFAULT_CANCELLATION_POLLING,
            slack: None,
            schedule: TimerSchedule {
                interval: None,
                sharp: false,
                idle: None,
                jitter: None,
                once: false,
                cron: None,
            },
            filters: Filters {
                labels: &[],
                annotations: &[],
                field: None,
            },
            change: ChangeOptions::NONE,
            reconcile: ReconcileOptions::NONE,
        }
    }
}
