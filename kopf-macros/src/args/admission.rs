//! `#[validate(...)]` and `#[mutate(...)]`'s options as written: the id, the operations and
//! subresources, the failure policy, the time to answer, the filters, and where kopf-runtime is.

use darling::FromMeta;
use darling::ast::NestedMeta;
use darling::util::{PathList, SpannedValue};
use proc_macro2::TokenStream;

use super::duration::DurationArg;
use super::filters::MetaArg;
use super::values::{Callable, CratePath};

/// The options of `#[validate]` and `#[mutate]`.
#[derive(Debug, Default, FromMeta)]
pub(crate) struct AdmissionArgs {
    pub(crate) id: Option<SpannedValue<String>>,
    pub(crate) operations: Option<SpannedValue<PathList>>,
    pub(crate) subresources: Option<SpannedValue<PathList>>,
    pub(crate) failure_policy: Option<SpannedValue<String>>,
    pub(crate) timeout: Option<DurationArg>,
    pub(crate) labels: Option<SpannedValue<MetaArg>>,
    pub(crate) annotations: Option<SpannedValue<MetaArg>>,
    pub(crate) when: Option<Callable>,
    #[darling(rename = "crate")]
    pub(crate) krate: Option<CratePath>,
}

/// Parses the arguments; an unknown option names the ones there are.
pub(crate) fn parse(args: TokenStream) -> darling::Result<AdmissionArgs> {
    let items = NestedMeta::parse_meta_list(args)?;
    AdmissionArgs::from_list(&items)
}
