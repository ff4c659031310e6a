//! Attribute macros `#[daemon]`, `#[timer]`, the change handlers `#[on_create]`,
//! `#[on_update]`, `#[on_delete]`, `#[on_resume]`, and `#[reconcile]` for kopf-runtime. Use them through
//! `kopf_runtime` (which re-exports them); see its documentation.
//!
//! Every macro is one straight pipeline, run by `expand.rs`:
//!
//! ```text
//!  #[timer(interval = "10s")]             async fn refresh(obj: Arc<K>) { … }
//!              │                                        │
//!              ▼                                        ▼
//!  args/          1a. parse (darling):     signature.rs   1b. parse (syn): async or not,
//!                 each option as written                  parameter and return types
//!              └──────────────────┬─────────────────────┘
//!                                 ▼
//!  validate/      2. check each option, the kind's options, their combinations and the
//!                    signature (all errors together, each on its token); build the model
//!                                 ▼
//!  model.rs          HandlerModel: the validated handler, pure data
//!                                 ▼
//!  codegen/       3. generate (infallible): the handler struct, its `TypedHandler` impl and
//!                    its registration
//! ```
//!
//! Imports follow the arrows and never go back: `args/` and `signature.rs` import no other
//! stage; `validate/` imports them and `model.rs`; `model.rs` imports nothing but `kind.rs` (which
//! macro is expanding, a leaf every stage may use); `codegen/` imports only `model.rs` and
//! `kind.rs`.
//!
//! On any error the function is emitted unchanged, followed by every error, each spanned on the
//! offending token. `KOPF_MACROS_DEBUG=1` prints each expansion.
#![forbid(unsafe_code)]
#![doc(test(attr(deny(warnings))))]

mod args;
mod codegen;
mod expand;
mod kind;
mod model;
mod signature;
#[cfg(test)]
mod tests;
mod validate;

use proc_macro::TokenStream;

use crate::kind::Kind;
use crate::model::AdmissionKind;

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

#[doc = include_str!("docs/index.md")]
#[proc_macro_attribute]
pub fn index(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand_index(args.into(), item.into()).into()
}

#[doc = include_str!("docs/reconcile.md")]
#[doc = include_str!("docs/generated.md")]
#[proc_macro_attribute]
pub fn reconcile(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(Kind::Reconcile, args.into(), item.into()).into()
}

#[doc = include_str!("docs/validate.md")]
#[proc_macro_attribute]
pub fn validate(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand_admission(AdmissionKind::Validate, args.into(), item.into()).into()
}

#[doc = include_str!("docs/mutate.md")]
#[proc_macro_attribute]
pub fn mutate(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand_admission(AdmissionKind::Mutate, args.into(), item.into()).into()
}
