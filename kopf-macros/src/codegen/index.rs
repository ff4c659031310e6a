//! [`IndexModel`] → the index's type (named after the function, in the type namespace only, so
//! the function keeps its name), its `IndexDef` impl and its registration.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;

use crate::model::IndexModel;

/// The tokens that follow an `#[index]` function.
pub(crate) fn generate(model: &IndexModel) -> TokenStream {
    let IndexModel {
        krate,
        name,
        vis,
        resource,
        pairs,
    } = model;
    let id = name.to_string();
    let doc = format!("The index [`{id}`](fn@{id}) makes: take it in a handler as `Index<{id}>`.");
    // Spanned on the return type: a collection of non-pairs is reported there.
    let item = quote_spanned!(pairs.span()=> <#pairs as ::core::iter::IntoIterator>::Item);
    let key = quote_spanned!(pairs.span()=> <#item as #krate::__private::IndexPair>::Key);
    let value = quote_spanned!(pairs.span()=> <#item as #krate::__private::IndexPair>::Value);
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

                fn pairs(
                    object: ::std::sync::Arc<#resource>,
                ) -> ::std::vec::Vec<(Self::Key, Self::Value)> {
                    #krate::__private::index_pairs(#name(object))
                }
            }

            #krate::__private::inventory::submit! {
                #krate::engine::IndexRegistration::new::<#name>()
            }
        };
    }
}
