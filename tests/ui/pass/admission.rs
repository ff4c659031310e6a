//! `#[validate]` and `#[mutate]`: the parameters and return types they take, and their
//! registrations.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kopf_runtime::admission::{WebhookKind, WebhookRegistration};
use kopf_runtime::{Connect, Operation, Rejection, Review, Warnings, mutate, validate};

#[validate]
fn plain(_map: &ConfigMap) {}

#[validate(id = "with-review", operations(create, update, delete), timeout = "3s")]
async fn with_review(map: Arc<ConfigMap>, review: Review<ConfigMap>) -> Result<(), Rejection> {
    if review.operation == Operation::Delete && map.data.is_some() {
        return Err(Rejection::new("not while it has data"));
    }
    Ok(())
}

#[validate(failure_policy = "ignore")]
fn warns(review: Review<Pod>, _pod: &Pod) -> Result<Warnings, Rejection> {
    Ok(Warnings::from_iter([format!("{} pod", review.operation)]))
}

fn has_data(map: &ConfigMap) -> bool {
    map.data.is_some()
}

#[validate(labels(team = "a", legacy = absent), annotations(owner = present), when = has_data)]
fn filtered(_map: &ConfigMap) {}

#[mutate]
async fn label(map: &mut ConfigMap) -> Warnings {
    map.metadata.labels.get_or_insert_default().insert("a".into(), "b".into());
    Warnings::default()
}

#[validate(operations(connect), subresources(exec, attach))]
async fn no_shells(connect: Connect<Pod>) -> Result<(), Rejection> {
    match connect.options.command.first().map(String::as_str) {
        Some("sh") => Err(Rejection::new(format!("no shells in {}", connect.name))),
        _ => Ok(()),
    }
}

fn main() {
    let all: Vec<&WebhookRegistration> = kopf_runtime::__private::inventory::iter::<WebhookRegistration>().collect();
    let find = |id: &str| all.iter().find(|r| r.id() == id).copied().expect(id);
    assert_eq!(find("plain").operations(), [Operation::Create, Operation::Update]);
    assert_eq!(find("with-review").timeout().as_secs(), 3);
    assert_eq!(find("with-review").path(), "/validate/with-review");
    assert!(find("warns").ignores_failures());
    assert_eq!(find("warns").resource().plural, "pods");
    assert_eq!(find("label").kind(), WebhookKind::Mutating);
    assert!(!find("label").ignores_failures());
    assert_eq!(find("filtered").object_filters().labels.len(), 2);
    assert_eq!(find("filtered").object_filters().annotations.len(), 1);
    assert_eq!(find("no_shells").operations(), [Operation::Connect]);
    assert_eq!(find("no_shells").subresource_names(), ["exec", "attach"]);
    assert!(find("plain").subresource_names().is_empty());
}
