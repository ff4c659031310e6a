//! Attribute macros `#[daemon]` and `#[timer]` for kopf-runtime. Use them through
//! `kopf_runtime` (which re-exports them); see its documentation.
#![forbid(unsafe_code)]

use proc_macro::TokenStream;

/// Placeholder during development.
#[proc_macro_attribute]
pub fn daemon(_args: TokenStream, item: TokenStream) -> TokenStream {
    item
}

/// Placeholder during development.
#[proc_macro_attribute]
pub fn timer(_args: TokenStream, item: TokenStream) -> TokenStream {
    item
}
