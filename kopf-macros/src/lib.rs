//! Attribute macros `#[daemon]`, `#[timer]` and the change handlers `#[on_create]`,
//! `#[on_update]`, `#[on_delete]`, `#[on_resume]` for kopf-runtime. Use them through
//! `kopf_runtime` (which re-exports them); see its documentation.
#![forbid(unsafe_code)]
#![doc(test(attr(deny(warnings))))]

mod args;
mod change;
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
#[doc = include_str!("docs/daemon_timer.md")]
#[doc = include_str!("docs/options_tail.md")]
#[doc = include_str!("docs/daemon_only.md")]
#[doc = include_str!("docs/generated.md")]
#[proc_macro_attribute]
pub fn daemon(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(Kind::Daemon, args.into(), item.into()).into()
}

#[doc = include_str!("docs/timer.md")]
#[doc = include_str!("docs/options.md")]
#[doc = include_str!("docs/daemon_timer.md")]
#[doc = include_str!("docs/options_tail.md")]
#[doc = include_str!("docs/timer_only.md")]
#[doc = include_str!("docs/generated.md")]
#[proc_macro_attribute]
pub fn timer(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(Kind::Timer, args.into(), item.into()).into()
}

#[doc = include_str!("docs/on_create.md")]
#[doc = include_str!("docs/change.md")]
#[doc = include_str!("docs/options.md")]
#[doc = include_str!("docs/options_tail.md")]
#[doc = include_str!("docs/generated.md")]
#[proc_macro_attribute]
pub fn on_create(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(Kind::Create, args.into(), item.into()).into()
}

#[doc = include_str!("docs/on_update.md")]
#[doc = include_str!("docs/change.md")]
#[doc = include_str!("docs/options.md")]
#[doc = include_str!("docs/options_tail.md")]
#[doc = include_str!("docs/update_only.md")]
#[doc = include_str!("docs/generated.md")]
#[proc_macro_attribute]
pub fn on_update(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(Kind::Update, args.into(), item.into()).into()
}

#[doc = include_str!("docs/on_delete.md")]
#[doc = include_str!("docs/change.md")]
#[doc = include_str!("docs/options.md")]
#[doc = include_str!("docs/options_tail.md")]
#[doc = include_str!("docs/delete_only.md")]
#[doc = include_str!("docs/generated.md")]
#[proc_macro_attribute]
pub fn on_delete(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(Kind::Delete, args.into(), item.into()).into()
}

#[doc = include_str!("docs/on_resume.md")]
#[doc = include_str!("docs/change.md")]
#[doc = include_str!("docs/options.md")]
#[doc = include_str!("docs/options_tail.md")]
#[doc = include_str!("docs/generated.md")]
#[proc_macro_attribute]
pub fn on_resume(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(Kind::Resume, args.into(), item.into()).into()
}
