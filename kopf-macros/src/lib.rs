//! Attribute macros `#[daemon]` and `#[timer]` for kopf-runtime. Use them through
//! `kopf_runtime` (which re-exports them); see its documentation.
#![forbid(unsafe_code)]
#![doc(test(attr(deny(warnings))))]

mod args;
mod codegen;
mod cron;
mod expand;
mod model;
mod signature;
#[cfg(test)]
mod tests;
mod validate;

use proc_macro::TokenStream;

use crate::model::Kind;

#[doc = include_str!("docs/daemon.md")]
#[doc = include_str!("docs/options.md")]
#[doc = include_str!("docs/daemon_only.md")]
#[doc = include_str!("docs/generated.md")]
#[proc_macro_attribute]
pub fn daemon(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(Kind::Daemon, args.into(), item.into()).into()
}

#[doc = include_str!("docs/timer.md")]
#[doc = include_str!("docs/options.md")]
#[doc = include_str!("docs/timer_only.md")]
#[doc = include_str!("docs/generated.md")]
#[proc_macro_attribute]
pub fn timer(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(Kind::Timer, args.into(), item.into()).into()
}
