//! Start-up checks of a CRD's structural schema against the handlers of its kind: would the
//! schema prune a handler's results under `status.<handler id>` ([`pruning`]), and does each
//! watched field's schema fit the handler's `FieldChange<T>` ([`fields`])? Each finding is a
//! warning naming the handler and the fix; the operator serves the kind either way.

mod crd;
mod fields;
mod pruning;

use std::sync::Arc;

use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use serde_json::Value;

use crate::core::erased::ErasedHandler;
use crate::core::resource::ResourceInfo;
use crate::core::spec::{FieldType, WatchedField};
use pruning::{Pruning, pruning};

/// What the start-up check looks at in the handlers of one kind.
#[derive(Debug, Clone, Default)]
pub(crate) struct Checks {
    /// Every handler's id: where its results are stored, `status.<id>`.
    results: Vec<&'static str>,
    /// The watched fields of handlers that take a `FieldChange<T>`: (handler id, field, `T`).
    fields: Vec<(&'static str, WatchedField, FieldType)>,
}

impl Checks {
    /// The checks for `handlers`.
    pub(crate) fn of(handlers: &[Arc<dyn ErasedHandler>]) -> Self {
        let specs = handlers.iter().map(|h| h.spec());
        Self {
            results: specs.clone().map(|spec| spec.id).collect(),
            fields: specs
                .filter_map(|spec| {
                    let change = &spec.change;
                    Some((spec.id, change.field?, change.value_type?))
                })
                .collect(),
        }
    }
}

/// Fetches the CRD of `info` (if it is one) and warns once about each handler whose results
/// the schema would prune, and each `FieldChange<T>` that does not fit its field's schema.
///
/// # Cancellation safety
/// Cancel safe: it only reads.
pub(crate) async fn check(client: &Client, info: &ResourceInfo, checks: &Checks) {
    if info.group.is_empty() || checks.results.is_empty() {
        return;
    }
    let crds = ApiResource {
        group: "apiextensions.k8s.io".into(),
        version: "v1".into(),
        api_version: "apiextensions.k8s.io/v1".into(),
        kind: "CustomResourceDefinition".into(),
        plural: "customresourcedefinitions".into(),
    };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &crds);
    let name = format!("{}.{}", info.plural, info.group);
    let crd = match api.get_opt(&name).await {
        Ok(Some(crd)) => crd,
        Ok(None) => return, // a built-in or aggregated resource: no CRD schema to check
        Err(err) => {
            tracing::debug!(crd = %name, error = %err, "cannot read the CRD to check its schema");
            return;
        }
    };
    let Ok(body) = serde_json::to_value(&crd) else {
        return;
    };
    warn_pruned(&body, info, &checks.results);
    warn_misfits(&body, info, &checks.fields);
}

fn warn_pruned(crd: &Value, info: &ResourceInfo, ids: &[&'static str]) {
    for &id in ids {
        match pruning(crd, &info.version, id) {
            Pruning::Kept => {}
            Pruning::Dropped => tracing::warn!(
                resource = %info, handler = id,
                "the CRD's schema would prune `status.{id}`: results of handler `{id}` will be \
                 dropped by the API server; use `kopf_runtime::SchemalessStatus` as the status \
                 type (`x-kubernetes-preserve-unknown-fields: true` on `status`, without \
                 `additionalProperties`) or declare `status.{id}` in the schema"
            ),
            Pruning::Emptied => tracing::warn!(
                resource = %info, handler = id,
                "the CRD's schema would prune `status.{id}`: the API server keeps the key but \
                 drops everything nested in the results of handler `{id}`, because `status` has \
                 `additionalProperties` that do not preserve unknown fields (a `#[serde(flatten)]` \
                 map generates `additionalProperties: true`); use `kopf_runtime::SchemalessStatus` \
                 as the status type, or remove `additionalProperties` from `status`"
            ),
        }
    }
}

fn warn_misfits(
    crd: &Value,
    info: &ResourceInfo,
    fields: &[(&'static str, WatchedField, FieldType)],
) {
    for (id, field, value_type) in fields {
        let Some(misfit) = fields::misfit(crd, &info.version, field.segments, value_type) else {
            continue;
        };
        let (path, name) = (field.path, value_type.name);
        tracing::warn!(
            resource = %info, handler = id,
            "handler `{id}` takes `FieldChange<{name}>` for `{path}`, but the CRD's schema \
             admits {admitted} there, which `{name}` cannot decode ({error}): such an update \
             will fail the handler; take a `FieldChange` of a type that decodes it (e.g. \
             `{fits}`), or fix the schema",
            admitted = misfit.admitted,
            error = misfit.error,
            fits = misfit.fits,
        );
    }
}
