//! [`AdmissionModel`] → the function that decodes a request, calls the handler and makes its
//! verdict, and the handler's registration.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;

use super::spec::meta_filters;
use crate::model::{AdmissionKind, AdmissionModel, AdmissionParam};

/// The tokens that follow a `#[validate]` or `#[mutate]` function.
pub(crate) fn generate(model: &AdmissionModel) -> TokenStream {
    let AdmissionModel {
        krate,
        kind,
        name,
        id,
        resource,
        operations,
        ..
    } = model;
    let call = format_ident!("__kopf_admission_{}", name);
    let body = body(model);
    let kind = match kind {
        AdmissionKind::Validate => quote!(Validating),
        AdmissionKind::Mutate => quote!(Mutating),
    };
    let timeout = model.timeout_seconds;
    let ignore = model.ignore_failures.then(|| quote!(.ignore_failures()));
    let subresources = &model.subresources;
    let subresources =
        (!subresources.is_empty()).then(|| quote!(.subresources(&[#(#subresources),*])));
    let filters = (!model.labels.is_empty() || !model.annotations.is_empty()).then(|| {
        let labels = meta_filters(krate, &model.labels);
        let annotations = meta_filters(krate, &model.annotations);
        quote! {
            .filters(#krate::engine::Filters {
                labels: #labels,
                annotations: #annotations,
                field: ::core::option::Option::None,
            })
        }
    });
    quote! {
        const _: () = {
            fn #call(
                request: #krate::admission::Request,
            ) -> #krate::admission::Pending {
                ::std::boxed::Box::pin(async move { #body })
            }

            #krate::__private::inventory::submit! {
                #krate::admission::WebhookRegistration::new::<#resource>(
                    #id,
                    #krate::admission::WebhookKind::#kind,
                    &[#(#krate::Operation::#operations),*],
                    #call,
                )
                #ignore
                #subresources
                #filters
                .timeout_seconds(#timeout)
            }
        };
    }
}

/// Decode, call, answer.
fn body(model: &AdmissionModel) -> TokenStream {
    let AdmissionModel {
        krate,
        name,
        resource,
        params,
        ..
    } = model;
    let args = params.iter().map(|param| match param {
        AdmissionParam::Arc => quote!(::std::sync::Arc::clone(&__object)),
        AdmissionParam::Ref => quote!(&*__object),
        AdmissionParam::RefMut => quote!(&mut __object),
        AdmissionParam::Review => quote!(::std::clone::Clone::clone(&__review)),
        AdmissionParam::Connect => quote!(__connect),
    });
    let wait = model.is_async.then(|| quote!(.await));
    // `when` is typed: checked on the decoded object; an object it refuses is admitted unasked.
    let when = model.when.as_ref().map(|when| {
        quote_spanned! {when.span()=>
            let __kopf_when: fn(&#resource) -> ::core::primitive::bool = #when;
            if !__kopf_when(&__object) {
                return #krate::admission::Verdict::allow();
            }
        }
    });
    // Spanned on the return type: a type that is not an answer is reported there.
    let span = model
        .output
        .as_ref()
        .map_or_else(|| name.span(), Spanned::span);
    if model.params.contains(&AdmissionParam::Connect) {
        // A connection's options, not an object: no `when`, nothing to mutate (both checked).
        let answer = quote_spanned!(span=> #krate::__private::admission::validated(__answer));
        return quote! {
            let __connect = match request.connect::<#resource>() {
                ::core::result::Result::Ok(connect) => connect,
                ::core::result::Result::Err(verdict) => return verdict,
            };
            let __answer = #name(#(#args),*) #wait;
            #answer
        };
    }
    let decode = quote! {
        let (__object, __review) = match request.decode::<#resource>() {
            ::core::result::Result::Ok(decoded) => decoded,
            ::core::result::Result::Err(verdict) => return verdict,
        };
        let _ = &__review;
        #when
    };
    match model.kind {
        AdmissionKind::Validate => {
            let answer = quote_spanned!(span=> #krate::__private::admission::validated(__answer));
            quote! {
                #decode
                let __object = ::std::sync::Arc::new(__object);
                let __answer = #name(#(#args),*) #wait;
                #answer
            }
        }
        AdmissionKind::Mutate => {
            let answer = quote_spanned!(span=>
                #krate::__private::admission::mutated(&__before, &__object, __answer));
            quote! {
                #decode
                let mut __object = __object;
                let __before = match #krate::__private::admission::snapshot(&__object) {
                    ::core::result::Result::Ok(before) => before,
                    ::core::result::Result::Err(verdict) => return verdict,
                };
                let __answer = #name(#(#args),*) #wait;
                #answer
            }
        }
    }
}
