//! Stage 1a: the attribute's options as written, parsed with darling. Each value is parsed on
//! its own (a duration, a path, a literal); which options a kind of handler takes and how they
//! combine is the business of [`crate::validate`]. Imports nothing outside this folder.

pub(crate) mod admission;
pub(crate) mod duration;
pub(crate) mod filters;
pub(crate) mod index;
pub(crate) mod reconcile;
pub(crate) mod values;

use darling::FromMeta;
use darling::ast::NestedMeta;
use darling::util::SpannedValue;
use proc_macro2::TokenStream;

pub(crate) use duration::DurationArg;
pub(crate) use filters::{MetaArg, MetaCondition};
pub(crate) use reconcile::{CleanupArg, TypeList, WatchList};
pub(crate) use values::{
    Callable, CratePath, DelayArg, ErrorsArg, Flag, Literal, MissedArg, ValueArg,
};

/// Every option of every kind of handler, as written. Which ones a kind accepts and how
/// they combine is checked in [`crate::validate`].
#[derive(Debug, Default, FromMeta)]
pub(crate) struct RawArgs {
    pub(crate) id: Option<SpannedValue<String>>,
    pub(crate) errors: Option<SpannedValue<ErrorsArg>>,
    pub(crate) backoff: Option<DurationArg>,
    pub(crate) retries: Option<SpannedValue<u32>>,
    pub(crate) retry_timeout: Option<DurationArg>,
    pub(crate) timeout: Option<DurationArg>,
    pub(crate) initial_delay: Option<DelayArg>,
    pub(crate) labels: Option<SpannedValue<MetaArg>>,
    pub(crate) annotations: Option<SpannedValue<MetaArg>>,
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
    pub(crate) slack: Option<DurationArg>,
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
    pub(crate) owns: Option<SpannedValue<TypeList>>,
    pub(crate) watches: Option<SpannedValue<WatchList>>,
    pub(crate) backoff_max: Option<DurationArg>,
    pub(crate) debounce: Option<DurationArg>,
    pub(crate) cleanup: Option<CleanupArg>,
}

fn option_name(item: &NestedMeta) -> Option<(String, &syn::Path)> {
    match item {
        NestedMeta::Meta(meta) => {
            let path = meta.path();
            path.get_ident().map(|ident| (ident.to_string(), path))
        }
        NestedMeta::Lit(_) | NestedMeta::NameValueInvalidExpr(_) => None,
    }
}

/// Parses the attribute's tokens. Options `refuse` gives a reason for (those of another kind of
/// handler) are reported with that reason, on their name, and left out; all errors are collected.
pub(crate) fn parse(
    tokens: TokenStream,
    refuse: impl Fn(&str) -> Option<String>,
) -> darling::Result<RawArgs> {
    let items = NestedMeta::parse_meta_list(tokens)?;
    let mut errors = darling::Error::accumulator();
    let mut kept = Vec::with_capacity(items.len());
    for item in items {
        match option_name(&item).and_then(|(name, path)| Some((refuse(&name)?, path))) {
            Some((msg, path)) => errors.push(darling::Error::custom(msg).with_span(path)),
            None => kept.push(item),
        }
    }
    let args = errors.handle(RawArgs::from_list(&kept));
    errors.finish_with(args.unwrap_or_default())
}
