//! `#[index(...)]`'s options as written: only where kopf-runtime is (`crate = "..."`); an
//! index is made of every object of its kind.

use darling::FromMeta;
use darling::ast::NestedMeta;
use proc_macro2::TokenStream;

use super::values::CratePath;

/// The options of `#[index]`.
#[derive(Debug, Default, FromMeta)]
pub(crate) struct IndexArgs {
    #[darling(rename = "crate")]
    pub(crate) krate: Option<CratePath>,
}

/// Parses `#[index(...)]`'s arguments; an unknown option names the ones there are.
pub(crate) fn parse(args: TokenStream) -> darling::Result<IndexArgs> {
    let items = NestedMeta::parse_meta_list(args)?;
    IndexArgs::from_list(&items)
}
