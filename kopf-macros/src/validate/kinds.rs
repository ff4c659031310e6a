//! Which options each kind of handler takes: the options of one kind written on another are
//! refused by name, with what that kind does instead (rather than reported as unknown); and what
//! the finalizer options mean for each kind.

use darling::util::SpannedValue;

use crate::args::Flag;
use crate::kind::Kind;

/// Options only `#[timer]` accepts.
const TIMER_ONLY: &[&str] = &[
    "interval", "sharp", "idle", "jitter", "once", "cron", "tz", "missed",
];
/// Options only `#[daemon]` accepts.
const DAEMON_ONLY: &[&str] = &["cancellation_polling"];
/// Options only `#[reconcile]` accepts.
const RECONCILE_ONLY: &[&str] = &["owns", "watches", "backoff_max", "debounce", "cleanup"];

/// Why `#[reconcile]` rejects the option `name` of another kind, if it does.
fn refused_by_reconcile(name: &str) -> Option<String> {
    let why = match name {
        n if TIMER_ONLY.contains(&n) => {
            "`#[reconcile]` runs when something changes; for periodic runs return \
             `Action::requeue(delay)`"
        }
        "cancellation_polling" => {
            "a reconcile run is stopped with `cancellation_backoff` and `cancellation_timeout` only"
        }
        "slack" => {
            "a reconcile run starts when something changes, and its requeue and backoff are \
             waited for on time"
        }
        "initial_delay" => {
            "`#[reconcile]` runs as soon as the object appears; `debounce` waits for quiet after \
             each trigger"
        }
        "finalizer" | "optional" => {
            "`#[reconcile]` holds the object's finalizer exactly when it has a `cleanup` to run \
             on deletion"
        }
        "retries" | "retry_timeout" => {
            "`#[reconcile]` retries until it succeeds, backing off from `backoff` up to \
             `backoff_max`; return `HandlerError::permanent` to wait for the next change instead"
        }
        _ => return None,
    };
    Some(format!("`{name}` does not apply to `#[reconcile]`: {why}"))
}

/// Why `kind` rejects the option `name`, if it is an option of other kinds: such options are
/// reported by name (rather than as unknown), with what to write instead. Given to
/// [`crate::args::parse`], which leaves them out.
pub(crate) fn refused_option(kind: Kind, name: &str) -> Option<String> {
    let attr = kind.attr();
    if kind == Kind::Reconcile {
        return refused_by_reconcile(name);
    }
    if RECONCILE_ONLY.contains(&name) {
        return Some(format!(
            "`{name}` is a `#[reconcile]` option: `{attr}` has no children, related objects, \
             error backoff schedule, debounce or cleanup"
        ));
    }
    let runs = match kind {
        Kind::Timer => None,
        Kind::Daemon => Some("a daemon runs once per object for as long as it matches"),
        Kind::Create => Some("`#[on_create]` runs once, when the object appears"),
        Kind::Update => Some("`#[on_update]` runs once per change of the object"),
        Kind::Delete => Some("`#[on_delete]` runs once, when the object is being deleted"),
        Kind::Resume => {
            Some("`#[on_resume]` runs once, when the operator starts watching the object")
        }
        Kind::Reconcile => None, // answered above
    };
    if let Some(runs) = runs.filter(|_| TIMER_ONLY.contains(&name)) {
        return Some(format!(
            "`{name}` is a `#[timer]` option: {runs}; use `#[timer]` for scheduled runs"
        ));
    }
    if DAEMON_ONLY.contains(&name) && kind != Kind::Daemon {
        let who = if kind == Kind::Timer {
            "timers"
        } else {
            "change handlers"
        };
        return Some(format!(
            "`{name}` is a `#[daemon]` option: {who} are stopped with `cancellation_backoff` \
             and `cancellation_timeout` only"
        ));
    }
    match (name, kind) {
        ("slack", kind) if kind.is_change() => Some(format!(
            "`slack` is a `#[daemon]` and `#[timer]` option: `{attr}` runs as soon as the \
             change is seen, with nothing to wake up for"
        )),
        ("initial_delay", kind) if kind.is_change() => Some(format!(
            "`initial_delay` is a `#[daemon]` and `#[timer]` option: `{attr}` runs as soon as \
             the change is seen (`backoff` spaces its retries)"
        )),
        ("finalizer", Kind::Delete) => Some(
            "`finalizer` does not apply to `#[on_delete]`: a delete handler holds the object's \
             finalizer until it is done; write `optional = true` for one that must not \
             block deletion"
                .to_owned(),
        ),
        ("finalizer", kind) if kind.is_change() => Some(format!(
            "`finalizer` does not apply to `{attr}`: it never holds the object's finalizer (only \
             `#[on_delete]`, daemons and timers do)"
        )),
        ("optional", Kind::Daemon | Kind::Timer) => Some(format!(
            "`optional` only applies to `#[on_delete]`: only `#[on_delete]` can be optional; a \
             {} that must not block deletion has `finalizer = false`",
            if kind == Kind::Daemon {
                "daemon"
            } else {
                "timer"
            }
        )),
        ("optional", Kind::Create | Kind::Update | Kind::Resume) => Some(format!(
            "`optional` only applies to `#[on_delete]`: only `#[on_delete]` can be optional (a \
             delete handler that does not block deletion); `{attr}` never blocks deletion"
        )),
        _ => None,
    }
}

/// Whether the handler holds the object's finalizer. Daemons and timers: `finalizer` (default
/// `true`); `#[on_delete]`: unless `optional`; `#[reconcile]`: with a `cleanup`; the other
/// change handlers never do.
pub(crate) fn finalizer(
    kind: Kind,
    finalizer: Option<&SpannedValue<bool>>,
    optional: Option<&SpannedValue<Flag>>,
    cleanup: bool,
) -> bool {
    match kind {
        Kind::Reconcile => cleanup,
        Kind::Daemon | Kind::Timer => finalizer.is_none_or(|f| **f),
        Kind::Delete => !optional.is_some_and(|o| o.0),
        Kind::Create | Kind::Update | Kind::Resume => false,
    }
}
