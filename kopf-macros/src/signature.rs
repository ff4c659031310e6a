//! Stage 1b: what the handler function looks like (async or blocking, its parameter types, its
//! object type and return type), with every unsupported form reported on its token.

use syn::spanned::Spanned;
use syn::{FnArg, GenericArgument, Ident, ItemFn, PathArguments, ReturnType, Type};

/// The parts of the function the generated code needs.
#[derive(Debug, Clone)]
pub(crate) struct Signature {
    pub(crate) ident: Ident,
    pub(crate) is_async: bool,
    /// Every parameter's type, in order (injected by type).
    pub(crate) params: Vec<Type>,
    /// The declared return type (`None`: `()`).
    pub(crate) output: Option<Type>,
    /// `K` of the first `Arc<K>` / `Live<K>` / `Old<K>` parameter.
    pub(crate) object: Option<Type>,
}

/// `K` if `ty` is `Arc<K>`, `Live<K>` or `Old<K>` (by the last path segment, any prefix).
pub(crate) fn object_type(ty: &Type) -> Option<&Type> {
    let Type::Path(path) = ty else { return None };
    if path.qself.is_some() {
        return None;
    }
    let last = path.path.segments.last()?;
    if last.ident != "Arc" && last.ident != "Live" && last.ident != "Old" {
        return None;
    }
    let PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    let mut types = args.args.iter().filter_map(|arg| match arg {
        GenericArgument::Type(ty) => Some(ty),
        _ => None,
    });
    let first = types.next()?;
    types.next().is_none().then_some(first)
}

/// Whether `ty` is spelled `DynamicObject` (with any prefix).
pub(crate) fn is_dynamic_object(ty: &Type) -> bool {
    matches!(ty, Type::Path(p) if p.qself.is_none()
        && p.path.segments.last().is_some_and(|s| s.ident == "DynamicObject"))
}

fn check_header(func: &ItemFn, errors: &mut darling::error::Accumulator) {
    let sig = &func.sig;
    let mut fail = |msg: &str, span: proc_macro2::Span| {
        errors.push(darling::Error::custom(msg).with_span(&span));
    };
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        fail(
            "handler functions cannot be generic: the framework must know every parameter type; \
             use a concrete resource type",
            sig.generics.span(),
        );
    }
    if let syn::Safety::Unsafe(token) = &sig.safety {
        fail("handler functions cannot be `unsafe`", token.span());
    }
    if let Some(abi) = &sig.abi {
        fail("handler functions cannot have an `extern` ABI", abi.span());
    }
    if let Some(variadic) = &sig.variadic {
        fail("handler functions cannot be variadic", variadic.span());
    }
}

fn check_param(arg: &FnArg, errors: &mut darling::error::Accumulator) -> Option<Type> {
    let typed = match arg {
        FnArg::Receiver(receiver) => {
            errors.push(
                darling::Error::custom(
                    "handlers must be free functions, not methods: remove `self` (the object \
                     comes in as a parameter such as `Arc<K>`)",
                )
                .with_span(receiver),
            );
            return None;
        }
        FnArg::Typed(typed) => typed,
    };
    match &*typed.ty {
        Type::ImplTrait(_) => {
            errors.push(
                darling::Error::custom(
                    "`impl Trait` parameters are not supported: parameters are injected by their \
                     concrete type",
                )
                .with_span(&typed.ty),
            );
            None
        }
        Type::Reference(reference) => {
            errors.push(
                darling::Error::custom(format!(
                    "parameters are injected by value: take `{}` instead of a reference",
                    owned_form(&reference.elem)
                ))
                .with_span(&typed.ty),
            );
            None
        }
        ty => Some(ty.clone()),
    }
}

/// What a parameter of type `&T` would take by value: `T` itself, or the owned form of an
/// unsized `T` (`&str` → `String`, `&[T]` → `Vec<T>`, `&Path` → `PathBuf`), which a by-value
/// parameter cannot be.
fn owned_form(referent: &Type) -> String {
    let text = quote::quote!(#referent).to_string();
    let owned = match referent {
        Type::Slice(slice) => {
            let elem = &slice.elem;
            return format!("Vec<{}>", quote::quote!(#elem));
        }
        Type::Path(path) => match path.path.segments.last().map(|s| s.ident.to_string()) {
            Some(last) if last == "str" => "String",
            Some(last) if last == "Path" => "PathBuf",
            Some(last) if last == "OsStr" => "OsString",
            Some(last) if last == "CStr" => "CString",
            _ => return text,
        },
        _ => return text,
    };
    owned.to_owned()
}

/// Analyses the function; all problems are reported together.
pub(crate) fn analyze(func: &ItemFn) -> darling::Result<Signature> {
    let mut errors = darling::Error::accumulator();
    check_header(func, &mut errors);
    let params: Vec<Type> = func
        .sig
        .inputs
        .iter()
        .filter_map(|arg| check_param(arg, &mut errors))
        .collect();
    let object = params.iter().find_map(object_type).cloned();
    let output = match &func.sig.output {
        ReturnType::Default => None,
        ReturnType::Type(_, ty) => Some((**ty).clone()),
    };
    errors.finish_with(Signature {
        ident: func.sig.ident.clone(),
        is_async: func.sig.asyncness.is_some(),
        params,
        output,
        object,
    })
}

#[cfg(test)]
mod tests {
    use syn::parse_quote;

    use super::*;

    fn errors_of(func: &ItemFn) -> Vec<String> {
        analyze(func)
            .unwrap_err()
            .into_iter()
            .map(|e| e.to_string())
            .collect()
    }

    #[test]
    fn finds_object_type_and_output() {
        let func: ItemFn = parse_quote! {
            async fn monitor(stopper: Stopper, pod: std::sync::Arc<Pod>) -> Result<(), Error> {}
        };
        let sig = analyze(&func).unwrap();
        assert!(sig.is_async);
        assert_eq!(sig.params.len(), 2);
        let object = sig.object.unwrap();
        assert_eq!(quote::quote!(#object).to_string(), "Pod");
        assert!(sig.output.is_some());
    }

    #[test]
    fn a_reference_is_told_the_owned_type_to_take() {
        for (param, owned) in [
            (quote::quote!(stopper: &Stopper), "take `Stopper` instead"),
            (quote::quote!(name: &str), "take `String` instead"),
            (quote::quote!(items: &[u8]), "take `Vec<u8>` instead"),
            (
                quote::quote!(path: &std::path::Path),
                "take `PathBuf` instead",
            ),
        ] {
            let errors = errors_of(&parse_quote!(async fn f(#param) {}));
            assert_eq!(errors.len(), 1, "{param}: {errors:?}");
            assert!(errors[0].contains(owned), "{param}: {errors:?}");
        }
    }

    #[test]
    fn live_also_names_the_object() {
        let func: ItemFn = parse_quote!(
            fn f(live: Live<kube::api::DynamicObject>) {}
        );
        let sig = analyze(&func).unwrap();
        assert!(is_dynamic_object(sig.object.as_ref().unwrap()));
        assert!(!sig.is_async);
        assert!(sig.output.is_none());
    }

    #[test]
    fn old_also_names_the_object() {
        let func: ItemFn = parse_quote!(
            fn f(diff: Diff, old: kopf_runtime::Old<ConfigMap>) {}
        );
        let object = analyze(&func).unwrap().object.unwrap();
        assert_eq!(quote::quote!(#object).to_string(), "ConfigMap");
    }

    #[test]
    fn reports_all_problems_together() {
        let errors = errors_of(&parse_quote! {
            unsafe fn f<T>(&self, a: impl Send, b: &Stopper) {}
        });
        assert_eq!(errors.len(), 5, "{errors:#?}");
        assert!(errors[0].contains("generic"));
        assert!(errors[1].contains("unsafe"));
        assert!(errors[2].contains("free functions"));
        assert!(errors[3].contains("impl Trait"));
        assert!(errors[4].contains("take `Stopper`"));
    }

    #[test]
    fn extern_abi_is_rejected() {
        let errors = errors_of(&parse_quote!(
            extern "C" fn f() {}
        ));
        assert!(errors[0].contains("extern"));
    }
}
