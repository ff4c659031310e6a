//! Which resource a handler serves: the object type of its parameters, or the resource named in
//! the attribute (`group`, `version`, `plural`, `kind`, `namespaced`).

use darling::util::SpannedValue;
use proc_macro2::Span;

use super::error::err;
use crate::args::RawArgs;
use crate::model::Resource;
use crate::signature::{Signature, is_dynamic_object};

fn non_empty(value: &SpannedValue<String>, name: &str) -> darling::Result<String> {
    if value.is_empty() && name != "group" {
        return Err(err(format!("`{name}` cannot be empty"), value.span()));
    }
    Ok((**value).clone())
}

/// The resource: from the object type, or from `group`/`version`/`plural`/`kind`.
pub(crate) fn resource(args: &RawArgs, sig: &Signature) -> darling::Result<Resource> {
    let given = [
        ("group", &args.group),
        ("version", &args.version),
        ("plural", &args.plural),
        ("kind", &args.kind),
    ];
    if given.iter().all(|(_, v)| v.is_none()) {
        if let Some(namespaced) = &args.namespaced {
            return Err(err(
                "`namespaced` only applies to a resource named with `group`, `version`, `plural` \
                 and `kind`; a typed resource knows its scope",
                namespaced.span(),
            ));
        }
        return static_resource(sig);
    }
    let mut errors = darling::Error::accumulator();
    let mut values = Vec::new();
    for (name, value) in given {
        match value {
            Some(v) => values.push(errors.handle(non_empty(v, name)).unwrap_or_default()),
            None => errors.push(err(
                format!(
                    "missing `{name}`: a resource named in the attribute needs `group` (\"\" for \
                     the core group), `version`, `plural` and `kind`"
                ),
                Span::call_site(),
            )),
        }
    }
    errors.finish()?;
    let [group, version, plural, kind] = <[String; 4]>::try_from(values)
        .map_err(|_| darling::Error::custom("kopf-macros: internal resource error"))?;
    let namespaced = args.namespaced.as_ref().is_none_or(|n| **n);
    Ok(Resource::Dynamic {
        object: sig.object.clone(),
        group,
        version,
        kind,
        plural,
        namespaced,
    })
}

fn static_resource(sig: &Signature) -> darling::Result<Resource> {
    match &sig.object {
        Some(object) if is_dynamic_object(object) => Err(darling::Error::custom(
            "`DynamicObject` has no static resource type: name the resource in the attribute, \
             e.g. `group = \"\", version = \"v1\", plural = \"pods\", kind = \"Pod\"`",
        )
        .with_span(object)),
        Some(object) => Ok(Resource::Static {
            object: object.clone(),
        }),
        None => Err(err(
            format!(
                "cannot tell which resource `{}` serves: take the object as a parameter \
                 (`Arc<K>` or `Live<K>` with a `kube::Resource` type such as `Pod` or a \
                 `#[derive(CustomResource)]` struct), or name the resource in the attribute: \
                 `group = \"\", version = \"v1\", plural = \"pods\", kind = \"Pod\"`",
                sig.ident
            ),
            sig.ident.span(),
        )),
    }
}
