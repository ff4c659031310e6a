//! The Validating- and MutatingWebhookConfiguration, named after the operator: one webhook per
//! handler, with its rules, its path, the `caBundle`, the failure policy and the time to answer;
//! server-side applied with the operator's field manager, so a handler removed from the code
//! leaves the configuration with the next start.

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference,
    ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::api::{Api, ObjectMeta, Patch, PatchParams};

use super::error::WebhookError;
use super::settings::Address;
use crate::core::filter::MetaFilter;
use crate::handler::admission::{WebhookKind, WebhookRegistration};

/// What every webhook of the operator shares.
pub(super) struct Common<'a> {
    /// The configurations' name: the operator's.
    pub(super) name: &'a str,
    pub(super) address: &'a Address,
    /// The CA (PEM) the API server verifies the server with.
    pub(super) ca_bundle: &'a str,
    /// The namespaces the operator serves (empty: all).
    pub(super) namespaces: &'a [String],
}

/// A webhook's name: `<id>.<operator>.kopf.dev`, lower case, `_` as `-` (the API server wants a
/// DNS name of at least three labels).
pub(super) fn webhook_name(id: &str, operator: &str) -> String {
    let id = id.to_ascii_lowercase().replace('_', "-");
    format!("{id}.{operator}.kopf.dev")
}

fn client_config(common: &Common<'_>, handler: &WebhookRegistration) -> WebhookClientConfig {
    let path = handler.path();
    let ca_bundle = Some(ByteString(common.ca_bundle.as_bytes().to_vec()));
    match common.address {
        Address::Url(base) => WebhookClientConfig {
            url: Some(format!("{}{path}", base.trim_end_matches('/'))),
            ca_bundle,
            service: None,
        },
        Address::Service {
            namespace,
            name,
            port,
        } => WebhookClientConfig {
            service: Some(ServiceReference {
                namespace: namespace.clone(),
                name: name.clone(),
                path: Some(path),
                port: Some(i32::from(*port)),
            }),
            ca_bundle,
            url: None,
        },
    }
}

fn rules(handler: &WebhookRegistration) -> Vec<RuleWithOperations> {
    let resource = handler.resource();
    vec![RuleWithOperations {
        api_groups: Some(vec![resource.group.to_string()]),
        api_versions: Some(vec![resource.version.to_string()]),
        resources: Some(match handler.subresource_names() {
            [] => vec![resource.plural.to_string()],
            subresources => (subresources.iter())
                .map(|sub| format!("{}/{sub}", resource.plural))
                .collect(),
        }),
        operations: Some(
            (handler.operations().iter())
                .map(|op| op.as_str().to_owned())
                .collect(),
        ),
        scope: Some(
            if resource.namespaced {
                "Namespaced"
            } else {
                "Cluster"
            }
            .to_owned(),
        ),
    }]
}

/// Only the operator's namespaces, when it serves some (cluster-scoped objects pass).
fn namespace_selector(common: &Common<'_>) -> Option<LabelSelector> {
    (!common.namespaces.is_empty()).then(|| LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "kubernetes.io/metadata.name".to_owned(),
            operator: "In".to_owned(),
            values: Some(common.namespaces.to_vec()),
        }]),
        match_labels: None,
    })
}

/// The label conditions the API server can check itself (a value, present, absent); a
/// predicate is left to the server.
fn object_selector(handler: &WebhookRegistration) -> Option<LabelSelector> {
    let requirement = |(key, filter): &(&str, MetaFilter)| {
        let (operator, values) = match filter {
            MetaFilter::Equals(value) => ("In", Some(vec![(*value).to_owned()])),
            MetaFilter::Present => ("Exists", None),
            MetaFilter::Absent => ("DoesNotExist", None),
            MetaFilter::Predicate(_) => return None,
        };
        Some(LabelSelectorRequirement {
            key: (*key).to_owned(),
            operator: operator.to_owned(),
            values,
        })
    };
    let expressions: Vec<_> = (handler.object_filters().labels.iter())
        .filter_map(requirement)
        .collect();
    (!expressions.is_empty()).then_some(LabelSelector {
        match_expressions: Some(expressions),
        match_labels: None,
    })
}

fn policy(handler: &WebhookRegistration) -> String {
    if handler.ignores_failures() {
        "Ignore"
    } else {
        "Fail"
    }
    .to_owned()
}

fn timeout(handler: &WebhookRegistration) -> i32 {
    i32::try_from(handler.timeout().as_secs()).unwrap_or(10)
}

fn validating(common: &Common<'_>, handler: &WebhookRegistration) -> ValidatingWebhook {
    ValidatingWebhook {
        name: webhook_name(handler.id(), common.name),
        admission_review_versions: vec!["v1".to_owned()],
        client_config: client_config(common, handler),
        failure_policy: Some(policy(handler)),
        match_policy: Some("Equivalent".to_owned()),
        namespace_selector: namespace_selector(common),
        object_selector: object_selector(handler),
        rules: Some(rules(handler)),
        side_effects: "None".to_owned(),
        timeout_seconds: Some(timeout(handler)),
        ..ValidatingWebhook::default()
    }
}

fn mutating(common: &Common<'_>, handler: &WebhookRegistration) -> MutatingWebhook {
    MutatingWebhook {
        name: webhook_name(handler.id(), common.name),
        admission_review_versions: vec!["v1".to_owned()],
        client_config: client_config(common, handler),
        failure_policy: Some(policy(handler)),
        match_policy: Some("Equivalent".to_owned()),
        namespace_selector: namespace_selector(common),
        object_selector: object_selector(handler),
        rules: Some(rules(handler)),
        side_effects: "None".to_owned(),
        timeout_seconds: Some(timeout(handler)),
        reinvocation_policy: Some("IfNeeded".to_owned()),
        ..MutatingWebhook::default()
    }
}

/// The operator's two configurations, validating and mutating.
pub(super) type Configurations = (ValidatingWebhookConfiguration, MutatingWebhookConfiguration);

/// The two configurations for these handlers.
pub(super) fn configurations(
    common: &Common<'_>,
    handlers: &[WebhookRegistration],
) -> Configurations {
    let of = |kind| handlers.iter().filter(move |h| h.kind() == kind);
    let meta = || ObjectMeta {
        name: Some(common.name.to_owned()),
        ..ObjectMeta::default()
    };
    let validating = ValidatingWebhookConfiguration {
        metadata: meta(),
        webhooks: Some(
            of(WebhookKind::Validating)
                .map(|h| validating(common, h))
                .collect(),
        ),
    };
    let mutating = MutatingWebhookConfiguration {
        metadata: meta(),
        webhooks: Some(
            of(WebhookKind::Mutating)
                .map(|h| mutating(common, h))
                .collect(),
        ),
    };
    (validating, mutating)
}

/// Applies both (server-side, forcing: the operator owns them).
///
/// # Cancellation safety
/// Cancel safe: applying is idempotent; a cancelled apply is done again at the next start.
pub(super) async fn apply(
    client: kube::Client,
    field_manager: &str,
    (validating, mutating): &Configurations,
) -> Result<(), WebhookError> {
    let params = PatchParams::apply(field_manager).force();
    let name = validating.metadata.name.clone().unwrap_or_default();
    let configuration = |source| WebhookError::Configuration {
        name: name.clone(),
        source,
    };
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let mut body = serde_json::to_value(validating).map_err(WebhookError::Encode)?;
    typed(&mut body, "ValidatingWebhookConfiguration");
    (api.patch(&name, &params, &Patch::Apply(body)).await).map_err(configuration)?;
    let api: Api<MutatingWebhookConfiguration> = Api::all(client);
    let mut body = serde_json::to_value(mutating).map_err(WebhookError::Encode)?;
    typed(&mut body, "MutatingWebhookConfiguration");
    (api.patch(&name, &params, &Patch::Apply(body)).await).map_err(configuration)?;
    Ok(())
}

/// Server-side apply wants the type in the body.
fn typed(body: &mut serde_json::Value, kind: &str) {
    if let Some(map) = body.as_object_mut() {
        map.insert(
            "apiVersion".into(),
            "admissionregistration.k8s.io/v1".into(),
        );
        map.insert("kind".into(), kind.into());
    }
}
