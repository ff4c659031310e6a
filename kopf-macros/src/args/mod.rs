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
pub(crate) use values::{Callable, CratePath, DelayArg, ErrorsArg, Literal, MissedArg, ValueArg};

use crate::model::Kind;

/// Every option of `#[daemon]` and `#[timer]`, as written. Which ones a kind accepts and how
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

fn wrong_kind(kind: Kind, name: &str) -> String {
    match kind {
        Kind::Daemon => format!(
            "`{name}` is a `#[timer]` option: a daemon runs once per object for as long as it \
             matches; use `#[timer]` for scheduled runs"
        ),
        Kind::Timer => format!(
            "`{name}` is a `#[daemon]` option: timers are stopped with `cancellation_backoff` \
             and `cancellation_timeout` only"
        ),
    }
}

/// Parses the attribute's tokens. Options of the other kind are reported by name (rather than
/// as unknown) and left out; all errors are collected.
pub(crate) fn parse(kind: Kind, tokens: TokenStream) -> darling::Result<RawArgs> {
    let items = NestedMeta::parse_meta_list(tokens)?;
    let foreign = match kind {
        Kind::Daemon => TIMER_ONLY,
        Kind::Timer => DAEMON_ONLY,
    };
    let mut errors = darling::Error::accumulator();
    let mut kept = Vec::with_capacity(items.len());
    for item in items {
        match option_name(&item) {
            Some((name, path)) if foreign.contains(&name.as_str()) => {
                errors.push(darling::Error::custom(wrong_kind(kind, &name)).with_span(path));
            }
            _ => kept.push(item),
        }
    }
    let args = errors.handle(RawArgs::from_list(&kept));
    errors.finish_with(args.unwrap_or_default())
}
