//! [`IndexModel`] → the index's type (named after the function, in the type namespace only, so
//! the function keeps its name), its `IndexDef` impl and its registration.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;

use super::spec::meta_filters;
use crate::model::IndexModel;

/// The tokens that follow an `#[index]` function.
pub(crate) fn generate(model: &IndexModel) -> TokenStream {
    let IndexModel {
        krate,
        name,
        vis,
        resource,
        pairs,
        labels,
        annotations,
        when,
    } = model;
    let id = name.to_string();
    let doc = format!("The index [`{id}`](fn@{id}) makes: take it in a handler as `Index<{id}>`.");
    // Spanned on the return type: a collection of non-pairs is reported there.
    let item = quote_spanned!(pairs.span()=> <#pairs as ::core::iter::IntoIterator>::Item);
    let key = quote_spanned!(pairs.span()=> <#item as #krate::__private::IndexPair>::Key);
    let value = quote_spanned!(pairs.span()=> <#item as #krate::__private::IndexPair>::Value);
    let filters = (!labels.is_empty() || !annotations.is_empty()).then(|| {
        let labels = meta_filters(krate, labels);
        let annotations = meta_filters(krate, annotations);
        quote! {
            const FILTERS: #krate::engine::Filters = #krate::engine::Filters {
                labels: #labels,
                annotations: #annotations,
                field: ::core::option::Option::None,
            };
        }
    });
    let when = when.as_ref().map(|when| {
        quote_spanned! {when.span()=>
            let __kopf_when: fn(&#resource) -> ::core::primitive::bool = #when;
            if !__kopf_when(&object) {
                return ::std::vec::Vec::new();
            }
        }
    });
    quote! {
        #[doc = #doc]
        #[allow(non_camel_case_types, dead_code)]
        #[derive(Debug)]
        #vis struct #name {}

        const _: () = {
            impl #krate::IndexDef for #name {
                type Resource = #resource;
                type Key = #key;
                type Value = #value;
                const ID: &'static str = #id;
                #filters

                fn pairs(
                    object: ::std::sync::Arc<#resource>,
                ) -> ::std::vec::Vec<(Self::Key, Self::Value)> {
                    #when
                    #krate::__private::index_pairs(#name(object))
                }
            }

            #krate::__private::inventory::submit! {
                #krate::engine::IndexRegistration::new::<#name>()
            }
        };
    }
}
