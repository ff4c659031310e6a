//! `TypedHandler::invoke`: inject every parameter by type, call the user's function, convert
//! its return value.

use proc_macro2::{Delimiter, Group, Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;

use super::span::respan;
use crate::kind::Kind;
use crate::model::HandlerModel;

/// `let __kopf_arg_N = <Ty as Inject<K>>::inject(..)?;`, spanned on each parameter type so an
/// injection failure points at it.
fn injections(model: &HandlerModel, object: &TokenStream) -> (Vec<TokenStream>, Vec<syn::Ident>) {
    let krate = &model.krate;
    let names: Vec<syn::Ident> = (0..model.function.params.len())
        .map(|i| format_ident!("__kopf_arg_{}", i, span = Span::mixed_site()))
        .collect();
    let lets = model
        .function
        .params
        .iter()
        .zip(&names)
        .map(|(ty, name)| {
            quote_spanned! {ty.span()=>
                let #name = <#ty as #krate::Inject<#object>>::inject(__kopf_prepared.invocation())?;
            }
        })
        .collect();
    (lets, names)
}

/// For blocking handlers: every parameter type must be `BlockingSafe`.
fn blocking_checks(model: &HandlerModel) -> Vec<TokenStream> {
    let krate = &model.krate;
    model
        .function
        .params
        .iter()
        .map(|ty| quote_spanned!(ty.span()=> #krate::__private::assert_blocking_safe::<#ty>();))
        .collect()
}

/// `HandlerReturn::<Kind>::into_result(value)`, spanned on the return type.
fn convert(model: &HandlerModel, value: &TokenStream) -> TokenStream {
    let krate = &model.krate;
    let kind = match model.kind {
        Kind::Daemon => quote!(#krate::__private::DaemonKind),
        Kind::Timer => quote!(#krate::__private::TimerKind),
        Kind::Create | Kind::Update | Kind::Delete | Kind::Resume => {
            quote!(#krate::__private::ChangeHandlerKind)
        }
        Kind::Reconcile => TokenStream::new(),
    };
    let convert = if model.kind == Kind::Reconcile {
        quote!(#krate::__private::ReconcileReturn::into_result)
    } else {
        quote!(#krate::__private::HandlerReturn::<#kind>::into_result)
    };
    let span = model
        .function
        .output
        .as_ref()
        .map_or_else(|| model.function.ident.span(), Spanned::span);
    // Every token of the conversion, and the value's name, sit on the return type, so an
    // unsupported return type is reported there.
    let convert = respan(convert, span);
    let returned = syn::Ident::new("__kopf_returned", Span::mixed_site().located_at(span));
    quote! {{
        let #returned = #value;
        #convert(#returned)
    }}
}

pub(crate) fn invoke_fn(model: &HandlerModel, object: &TokenStream) -> TokenStream {
    let krate = &model.krate;
    let ident = &model.function.ident;
    let (lets, args) = injections(model, object);
    let call = quote!(#ident(#(#args),*));
    let (checks, run) = if model.function.is_async {
        // Spanned on the function's name: a non-`Send` future is reported there, with rustc's
        // note pointing at the value held across `.await` in the user's body.
        let converted = convert(model, &quote!(#call.await));
        let mut body = Group::new(Delimiter::Brace, converted);
        body.set_span(ident.span());
        let run = respan(quote!(__kopf_prepared.run_async), ident.span());
        let future = quote_spanned!(ident.span()=> async move #body);
        (Vec::new(), quote!(#run(#future)))
    } else {
        let converted = convert(model, &call);
        (
            blocking_checks(model),
            quote!(__kopf_prepared.run_blocking(move || #converted)),
        )
    };
    quote! {
        fn invoke(
            __kopf_invocation: #krate::engine::Invocation,
        ) -> ::core::result::Result<#krate::engine::Call, #krate::HandlerError> {
            let __kopf_prepared = #krate::__private::PreparedCall::new(__kopf_invocation);
            // Injections first: a type that cannot be injected at all is reported as that
            // before (not after) the blocking-safety check it fails as well.
            #(#lets)*
            #(#checks)*
            ::core::result::Result::Ok(#run)
        }
    }
}
