//! The checks specific to the change handlers (`#[on_create]`, `#[on_update]`, `#[on_delete]`,
//! `#[on_resume]`) behind [`super::model`]: what `field` means on
//! `#[on_update]`, and the parameters only some kinds are given.

use proc_macro2::Span;
use syn::{Type, TypePath};

use super::error::err;
use crate::kind::Kind;
use crate::model::{Field, Watched};
use crate::signature::Signature;

/// Splits `field`/`value` into the filter and the watched field. On `#[on_update]`, `field` is
/// the field whose change calls the handler, and a `value`, if given, stays a filter on its new
/// value; everywhere else `field`/`value` is a filter only.
pub(crate) fn watch(
    kind: Kind,
    field: Option<Field>,
    has_value: bool,
    sig: &Signature,
) -> (Option<Field>, Option<Watched>) {
    match field {
        Some(field) if kind == Kind::Update => {
            let watched = Watched {
                path: field.path.clone(),
                segments: field.segments.clone(),
                value_type: sig.params.iter().find_map(field_change_arg),
            };
            (has_value.then_some(field), Some(watched))
        }
        field => (field, None),
    }
}

/// The name of a plain type path's last segment, and its span (`kopf_runtime::Old<Pod>` →
/// `Old`): recognised by name, with any prefix, as `Arc`/`Live` are.
fn type_name(ty: &Type) -> Option<(String, Span)> {
    match ty {
        Type::Path(TypePath {
            qself: None, path, ..
        }) => path
            .segments
            .last()
            .map(|s| (s.ident.to_string(), s.ident.span())),
        Type::Group(group) => type_name(&group.elem),
        Type::Paren(paren) => type_name(&paren.elem),
        _ => None,
    }
}

/// The `T` of a `FieldChange<T>` parameter (with any path prefix), if `ty` is one.
fn field_change_arg(ty: &Type) -> Option<Type> {
    let Type::Path(TypePath {
        qself: None, path, ..
    }) = ty
    else {
        return match ty {
            Type::Group(group) => field_change_arg(&group.elem),
            Type::Paren(paren) => field_change_arg(&paren.elem),
            _ => None,
        };
    };
    let last = path.segments.last()?;
    if last.ident != "FieldChange" {
        return None;
    }
    let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    args.args.iter().find_map(|arg| match arg {
        syn::GenericArgument::Type(ty) => Some(ty.clone()),
        _ => None,
    })
}

/// Why `kind` is not given a parameter of type `name`, if it is not.
fn refused(kind: Kind, name: &str, watching: bool) -> Option<String> {
    let attr = kind.attr();
    match name {
        "FieldChange" if kind == Kind::Update && !watching => Some(
            "`FieldChange` is the old and new value of a watched field, and this handler \
             watches none: write `#[on_update(field = \"spec.size\")]` to be called when that \
             field changes, or take `Old<K>` or `Diff` for the whole object"
                .to_owned(),
        ),
        "FieldChange" if kind != Kind::Update => Some(format!(
            "`FieldChange` is only given to `#[on_update(field = \"...\")]` handlers (the old \
             and new value of the field they watch); `{attr}` has no old value"
        )),
        "Old" if kind != Kind::Update => Some(format!(
            "`Old` is only given to `#[on_update]` handlers (the object as last handled, before \
             the change); `{attr}` has no old object: take `Arc<K>` or `Live<K>`"
        )),
        "Diff" if kind != Kind::Update => Some(format!(
            "`Diff` is only given to `#[on_update]` handlers (what changed since the object was \
             last handled); `{attr}` has no diff"
        )),
        _ => None,
    }
}

/// Parameters only some kinds are given: `FieldChange<T>` (`#[on_update]` with a watched
/// `field`), `Old<K>` and `Diff` (`#[on_update]`). Each error is on the parameter's type name.
pub(crate) fn params(kind: Kind, sig: &Signature, watching: bool) -> darling::Result<()> {
    let mut errors = darling::Error::accumulator();
    for ty in &sig.params {
        let Some((name, span)) = type_name(ty) else {
            continue;
        };
        if let Some(msg) = refused(kind, &name, watching) {
            errors.push(err(msg, span));
        }
    }
    errors.finish()
}
