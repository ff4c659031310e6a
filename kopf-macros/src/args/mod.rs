//! Stage 1: the attribute's options as written, parsed with darling.

pub(crate) mod duration;
pub(crate) mod filters;
pub(crate) mod values;

use darling::FromMeta;
use darling::ast::NestedMeta;
use darling::util::SpannedValue;
use proc_macro2::TokenStream;

pub(crate) use duration::DurationArg;
pub(crate) use filters::{MetaCondition, MetaFilters};
pub(crate) use values::{
    Callable, CratePath, DelayArg, ErrorsArg, Flag, Literal, MissedArg, ValueArg,
};

use crate::model::Kind;

/// Every option of every kind of handler, as written. Which ones a kind accepts and how
/// they combine is checked in [`crate::model`].
#[derive(Debug, Default, FromMeta)]
pub(crate) struct RawArgs {
    pub(crate) id: Option<SpannedValue<String>>,
    pub(crate) errors: Option<SpannedValue<ErrorsArg>>,
    pub(crate) backoff: Option<DurationArg>,
    pub(crate) retries: Option<SpannedValue<u32>>,
    pub(crate) retry_timeout: Option<DurationArg>,
    pub(crate) timeout: Option<DurationArg>,
    pub(crate) initial_delay: Option<DelayArg>,
    pub(crate) labels: Option<SpannedValue<MetaFilters>>,
    pub(crate) annotations: Option<SpannedValue<MetaFilters>>,
    pub(crate) field: Option<SpannedValue<String>>,
    pub(crate) value: Option<SpannedValue<ValueArg>>,
    pub(crate) when: Option<Callable>,
    pub(crate) finalizer: Option<SpannedValue<bool>>,
    pub(crate) optional: Option<SpannedValue<Flag>>,
    #[darling(rename = "crate")]
    pub(crate) krate: Option<CratePath>,
    pub(crate) cancellation_backoff: Option<DurationArg>,
    pub(crate) cancellation_timeout: Option<DurationArg>,
    pub(crate) cancellation_polling: Option<DurationArg>,
    pub(crate) interval: Option<DurationArg>,
    pub(crate) sharp: Option<SpannedValue<bool>>,
    pub(crate) idle: Option<DurationArg>,
    pub(crate) jitter: Option<DurationArg>,
    pub(crate) once: Option<SpannedValue<bool>>,
    pub(crate) cron: Option<SpannedValue<String>>,
    pub(crate) tz: Option<SpannedValue<String>>,
    pub(crate) missed: Option<SpannedValue<MissedArg>>,
    pub(crate) group: Option<SpannedValue<String>>,
    pub(crate) version: Option<SpannedValue<String>>,
    pub(crate) plural: Option<SpannedValue<String>>,
    pub(crate) kind: Option<SpannedValue<String>>,
    pub(crate) namespaced: Option<SpannedValue<bool>>,
}

/// Options only `#[timer]` accepts.
pub(crate) const TIMER_ONLY: &[&str] = &[
    "interval", "sharp", "idle", "jitter", "once", "cron", "tz", "missed",
];
/// Options only `#[daemon]` accepts.
pub(crate) const DAEMON_ONLY: &[&str] = &["cancellation_polling"];

fn option_name(item: &NestedMeta) -> Option<(String, &syn::Path)> {
    match item {
        NestedMeta::Meta(meta) => {
            let path = meta.path();
            path.get_ident().map(|ident| (ident.to_string(), path))
        }
        NestedMeta::Lit(_) | NestedMeta::NameValueInvalidExpr(_) => None,
    }
}

/// Why `kind` rejects the option `name`, if it is an option of other kinds: such options are
/// reported by name (rather than as unknown), with what to write instead.
fn foreign(kind: Kind, name: &str) -> Option<String> {
    let attr = kind.attr();
    let runs = match kind {
        Kind::Timer => None,
        Kind::Daemon => Some("a daemon runs once per object for as long as it matches"),
        Kind::Create => Some("`#[on_create]` runs once, when the object appears"),
        Kind::Update => Some("`#[on_update]` runs once per change of the object"),
        Kind::Delete => Some("`#[on_delete]` runs once, when the object is being deleted"),
        Kind::Resume => {
            Some("`#[on_resume]` runs once, when the operator starts watching the object")
        }
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

/// Parses the attribute's tokens. Options of another kind are reported by name (rather than
/// as unknown) and left out; all errors are collected.
pub(crate) fn parse(kind: Kind, tokens: TokenStream) -> darling::Result<RawArgs> {
    let items = NestedMeta::parse_meta_list(tokens)?;
    let mut errors = darling::Error::accumulator();
    let mut kept = Vec::with_capacity(items.len());
    for item in items {
        match option_name(&item).and_then(|(name, path)| Some((foreign(kind, &name)?, path))) {
            Some((msg, path)) => errors.push(darling::Error::custom(msg).with_span(path)),
            None => kept.push(item),
        }
    }
    let args = errors.handle(RawArgs::from_list(&kept));
    errors.finish_with(args.unwrap_or_default())
}
