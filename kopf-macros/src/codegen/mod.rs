//! Stage 3: code generation from the validated model. Infallible: every mistake the macro can
//! see was reported by the earlier stages; type errors are left to rustc, with the generated
//! checks spanned on the user's tokens.

pub(crate) mod admission;
pub(crate) mod index;
mod invoke;
mod span;
mod spec;

use proc_macro2::TokenStream;

use quote::{quote, quote_spanned};
use syn::spanned::Spanned;

use crate::model::{Delay, HandlerModel, Resource};

/// The type objects decode into, if the function or the attribute names it.
fn named_object_type(model: &HandlerModel) -> Option<&syn::Type> {
    match &model.resource {
        Resource::Static { object } => Some(object),
        Resource::Dynamic { object, .. } => object.as_ref(),
    }
}

/// The type objects decode into (`DynamicObject` unless named).
fn object_type(model: &HandlerModel) -> TokenStream {
    let krate = &model.krate;
    match named_object_type(model) {
        Some(ty) => quote!(#ty),
        None => quote!(#krate::__private::DynamicObject),
    }
}

fn resource_fn(model: &HandlerModel) -> TokenStream {
    let krate = &model.krate;
    let body = match &model.resource {
        Resource::Static { object } => quote_spanned! {object.span()=>
            <#object as #krate::StaticResource>::resource_info()
        },
        Resource::Dynamic {
            group,
            version,
            kind,
            plural,
            namespaced,
            ..
        } => quote! {
            #krate::ResourceInfo::new(#group, #version, #kind, #plural, #namespaced)
        },
    };
    quote! {
        fn resource() -> #krate::ResourceInfo {
            #body
        }
    }
}

fn when_fn(model: &HandlerModel, object: &TokenStream) -> TokenStream {
    let Some(when) = &model.when else {
        return TokenStream::new();
    };
    let check = quote_spanned! {when.span()=>
        let __kopf_when: fn(&#object) -> ::core::primitive::bool = #when;
    };
    quote! {
        fn when(__kopf_object: &#object) -> ::core::primitive::bool {
            #check
            __kopf_when(__kopf_object)
        }
    }
}

fn initial_delay_fn(model: &HandlerModel, object: &TokenStream) -> TokenStream {
    let Some(Delay::Computed(delay)) = &model.initial_delay else {
        return TokenStream::new();
    };
    let check = quote_spanned! {delay.span()=>
        let __kopf_delay: fn(&#object) -> ::core::time::Duration = #delay;
    };
    quote! {
        fn initial_delay(
            __kopf_object: &#object,
        ) -> ::core::option::Option<::core::time::Duration> {
            #check
            ::core::option::Option::Some(__kopf_delay(__kopf_object))
        }
    }
}

/// A reconcile handler's `cleanup` (none for the other kinds, nor without the option): the
/// user's function started with its parameters injected, any misfit spanned on its path.
fn cleanup_fn(model: &HandlerModel, object: &TokenStream) -> TokenStream {
    let krate = &model.krate;
    let Some(cleanup) = model.reconcile.as_ref().and_then(|r| r.cleanup.as_ref()) else {
        return TokenStream::new();
    };
    let start = quote_spanned! {cleanup.span()=>
        #krate::__private::start_cleanup::<#object, _, _>(#cleanup, __kopf_invocation)
    };
    quote! {
        fn cleanup(
            __kopf_invocation: #krate::engine::Invocation,
        ) -> ::core::result::Result<#krate::engine::Call, #krate::HandlerError> {
            #start
        }
    }
}

/// The map functions of a reconcile handler's `watches` (see `spec::map_fn_name`): the related
/// object's body decoded into its type and given to the user's function, spanned on its path.
fn map_fns(model: &HandlerModel) -> TokenStream {
    let krate = &model.krate;
    let Some(reconcile) = &model.reconcile else {
        return TokenStream::new();
    };
    let fns = reconcile
        .watches
        .iter()
        .enumerate()
        .map(|(index, (ty, map))| {
            let name = spec::map_fn_name(index);
            let call = quote_spanned! {map.span()=>
                #krate::__private::map_related::<#ty, _>(__kopf_body, #map)
            };
            quote! {
                fn #name(
                    __kopf_body: &#krate::__private::serde_json::Value,
                ) -> ::std::vec::Vec<#krate::engine::Target> {
                    #call
                }
            }
        });
    quote!(#(#fns)*)
}

/// The handler struct, its `TypedHandler` impl and its registration, inside `const _`.
pub(crate) fn generate(model: &HandlerModel) -> TokenStream {
    let krate = &model.krate;
    let object = object_type(model);
    let object_decl = match named_object_type(model) {
        Some(ty) => quote_spanned!(ty.span()=> type Resource = #object;),
        None => quote!(type Resource = #object;),
    };
    let spec = spec::spec(model);
    let resource = resource_fn(model);
    let when = when_fn(model, &object);
    let initial_delay = initial_delay_fn(model, &object);
    let invoke = invoke::invoke_fn(model, &object);
    let cleanup = cleanup_fn(model, &object);
    let maps = map_fns(model);
    quote! {
        #[doc(hidden)]
        const _: () = {
            #[allow(non_camel_case_types)]
            struct __kopf_Handler;

            impl #krate::engine::TypedHandler for __kopf_Handler {
                #object_decl
                // Struct updates keep the code compiling when the spec gains fields.
                #[allow(clippy::needless_update)]
                const SPEC: &'static #krate::engine::HandlerSpec = &#spec;
                #resource
                #when
                #initial_delay
                #invoke
                #cleanup
            }

            #maps

            #krate::__private::inventory::submit! {
                #krate::engine::Registration::new::<__kopf_Handler>()
            }
        };
    }
}
