//! Attribute macros `#[daemon]` and `#[timer]` for kopf-runtime. Use them through
//! `kopf_runtime` (which re-exports them); see its documentation.
#![forbid(unsafe_code)]

mod args;
mod codegen;
mod expand;
mod model;
mod signature;
#[cfg(test)]
mod tests;
mod validate;

use proc_macro::TokenStream;

use crate::model::Kind;

/// Runs the function as a daemon: one long-running invocation per matching object.
#[proc_macro_attribute]
pub fn daemon(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(Kind::Daemon, args.into(), item.into()).into()
}

/// Runs the function as a timer: invocations per matching object on a schedule.
#[proc_macro_attribute]
pub fn timer(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(Kind::Timer, args.into(), item.into()).into()
}
