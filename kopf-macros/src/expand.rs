//! The driver: parse the attribute and the function, validate, generate; on error emit the
//! function unchanged plus every error (so IDEs keep working); dump with `KOPF_MACROS_DEBUG=1`.
//! The only file that calls every stage.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote};
use syn::ItemFn;

use crate::kind::Kind;
use crate::model::{AdmissionKind, HandlerModel};
use crate::{args, codegen, signature, validate};

/// Parses and validates; every error of the attribute and the signature together.
pub(crate) fn model(kind: Kind, args: TokenStream, func: &ItemFn) -> darling::Result<HandlerModel> {
    let mut errors = darling::Error::accumulator();
    let refuse = |name: &str| validate::refused_option(kind, name);
    let args = errors.handle(args::parse(args, refuse));
    let sig = errors.handle(signature::analyze(func));
    let (Some(args), Some(sig)) = (args, sig) else {
        errors.finish()?;
        return Err(darling::Error::custom(
            "kopf-macros: internal parsing error",
        ));
    };
    errors.finish()?;
    validate::model(kind, args, sig, Span::call_site())
}

/// The whole expansion of `#[daemon(args)]`, `#[timer(args)]`, `#[on_create(args)]`... on `item`.
pub(crate) fn expand(kind: Kind, args: TokenStream, item: TokenStream) -> TokenStream {
    let func: ItemFn = match syn::parse2(item.clone()) {
        Ok(func) => func,
        Err(_) => {
            let error = syn::Error::new(
                Span::call_site(),
                format!("{} goes on a function (`async fn` or `fn`)", kind.attr()),
            );
            let mut out = item;
            out.extend(error.to_compile_error());
            return out;
        }
    };
    let mut out = TokenStream::new();
    match model(kind, args, &func) {
        Ok(model) => {
            // The framework dictates how parameters come in (by value, as many as injected):
            // these lints would flag every handler.
            out.extend(
                quote!(#[allow(clippy::needless_pass_by_value, clippy::too_many_arguments)]),
            );
            out.extend(func.to_token_stream());
            out.extend(codegen::generate(&model));
        }
        Err(errors) => {
            out.extend(func.to_token_stream());
            out.extend(errors.write_errors());
        }
    }
    if std::env::var_os("KOPF_MACROS_DEBUG").is_some_and(|v| v == "1") {
        eprintln!(
            "---- kopf-macros: {} on `{}` ----\n{out}\n----",
            kind.attr(),
            func.sig.ident
        );
    }
    out
}

/// The whole expansion of `#[index(args)]` on `item`: the function unchanged, then its index's
/// type and registration, or every error.
pub(crate) fn expand_index(args: TokenStream, item: TokenStream) -> TokenStream {
    let func: ItemFn = match syn::parse2(item.clone()) {
        Ok(func) => func,
        Err(_) => {
            let error = syn::Error::new(Span::call_site(), "#[index] goes on a function (`fn`)");
            let mut out = item;
            out.extend(error.to_compile_error());
            return out;
        }
    };
    let mut out = quote!(#[allow(clippy::needless_pass_by_value)]);
    out.extend(func.to_token_stream());
    match validate::index::index(args, &func) {
        Ok(model) => out.extend(codegen::index::generate(&model)),
        Err(errors) => out.extend(errors.write_errors()),
    }
    out
}

/// The whole expansion of `#[validate(args)]` / `#[mutate(args)]` on `item`: the function
/// unchanged, then its registration, or every error.
pub(crate) fn expand_admission(
    kind: AdmissionKind,
    args: TokenStream,
    item: TokenStream,
) -> TokenStream {
    let attr = match kind {
        AdmissionKind::Validate => "#[validate]",
        AdmissionKind::Mutate => "#[mutate]",
    };
    let func: ItemFn = match syn::parse2(item.clone()) {
        Ok(func) => func,
        Err(_) => {
            let error = syn::Error::new(
                Span::call_site(),
                format!("{attr} goes on a function (`fn`)"),
            );
            let mut out = item;
            out.extend(error.to_compile_error());
            return out;
        }
    };
    let mut out = quote!(#[allow(clippy::needless_pass_by_value)]);
    out.extend(func.to_token_stream());
    match validate::admission::admission(kind, args, &func) {
        Ok(model) => out.extend(codegen::admission::generate(&model)),
        Err(errors) => out.extend(errors.write_errors()),
    }
    out
}
