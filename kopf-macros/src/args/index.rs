//! `#[index(...)]`'s options as written: the filters (`labels`, `annotations`, `when`) and
//! where kopf-runtime is (`crate = "..."`).

use darling::FromMeta;
use darling::ast::NestedMeta;
use proc_macro2::TokenStream;

use super::filters::MetaArg;
use super::values::{Callable, CratePath};
use darling::util::SpannedValue;

/// The options of `#[index]`.
#[derive(Debug, Default, FromMeta)]
pub(crate) struct IndexArgs {
    pub(crate) labels: Option<SpannedValue<MetaArg>>,
    pub(crate) annotations: Option<SpannedValue<MetaArg>>,
    pub(crate) when: Option<Callable>,
    #[darling(rename = "crate")]
    pub(crate) krate: Option<CratePath>,
}

/// Parses `#[index(...)]`'s arguments; an unknown option names the ones there are.
pub(crate) fn parse(args: TokenStream) -> darling::Result<IndexArgs> {
    let items = NestedMeta::parse_meta_list(args)?;
    IndexArgs::from_list(&items)
}
