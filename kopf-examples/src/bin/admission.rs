//! # Admission webhooks and an index: owners for every object, and no two of one name
//!
//! Every `KopfExample` names its owner in `spec.field`. This operator keeps that true at the
//! door and reports what it sees:
//!
//! ```text
//!   kubectl apply ──► API server ──► #[mutate]   default_items: items [] → ["default"]
//!                                 └► #[validate] owner_is_set:  no spec.field → refused
//!                                                                "risky" → admitted, warned
//!   watch ──► #[index] by_owner: owner → [object names]
//!             #[timer] owned_by_the_same: status.owned_by_the_same = the others of its owner
//! ```
//!
//! It shows:
//! - **`#[validate]`**: a refusal `kubectl` prints verbatim, and a warning (`Warning: ...`);
//! - **`#[mutate]`**: a default written into the object before it is stored (the operator
//!   computes the JSON patch from what the function changed);
//! - **`#[index]` and `Index<I>`**: a timer reads the other objects of the same owner from
//!   memory, without an API call;
//! - **the webhook server** every replica runs, with the certificates the operator makes (a CA
//!   kept in a Secret the replicas share) and the webhook configurations it keeps, named after
//!   the operator (`docs/webhooks.md`).
//!
//! ## Run it
//!
//! ```text
//! eval "$(tools/kube-testenv/start.sh)"   # or point KUBECONFIG at your cluster
//! KOPF_WEBHOOK_URL=https://127.0.0.1:9443 \
//!   cargo run -p kopf-examples --bin admission -- --namespace default --install-crd
//! ```
//!
//! The API server must reach that URL: on a local test API server, the loopback does. In a
//! cluster, leave `KOPF_WEBHOOK_URL` unset: the operator is reached through the Service
//! `kopf-examples-webhook` in its namespace (`POD_NAMESPACE`), as `kopf-examples/deploy/
//! webhook.yaml` sets up. Then `kubectl apply` a `KopfExample` without `spec.field` and read the
//! refusal; one with `spec.field: risky` and read the warning; one with no `spec.items` and see
//! `["default"]` stored.

use std::sync::Arc;

use kopf_examples::crd::KopfExample;
use kopf_runtime::{
    HandlerResult, Index, Rejection, Warnings, Webhooks, index, mutate, timer, validate,
};

/// The admission handlers this operator serves.
pub const ADMISSION: [&str; 2] = ["owner_is_set", "default_items"];
/// The Service the API server reaches the operator through, in the cluster.
pub const SERVICE: &str = "kopf-examples-webhook";

/// Every object has an owner; `risky` is allowed, with a warning.
#[validate(operations(create, update))]
pub fn owner_is_set(obj: &KopfExample) -> Result<Warnings, Rejection> {
    match obj.spec.field.as_deref().map(str::trim) {
        None | Some("") => Err(Rejection::new("spec.field must name the object's owner")),
        Some("risky") => Ok(Warnings::from_iter([
            "the owner `risky` is not a real team",
        ])),
        Some(_) => Ok(Warnings::default()),
    }
}

/// An object without items gets one: `default`.
#[mutate(failure_policy = "ignore")]
pub fn default_items(obj: &mut KopfExample) {
    if obj.spec.items.is_empty() {
        obj.spec.items.push("default".to_owned());
    }
}

/// Each object's name, under its owner.
#[index]
pub fn by_owner(obj: Arc<KopfExample>) -> Option<(String, String)> {
    Some((obj.spec.field.clone()?, obj.metadata.name.clone()?))
}

/// The other objects of the same owner, from the index, under `status.owned_by_the_same`.
#[timer(interval = "2s")]
pub async fn owned_by_the_same(
    obj: Arc<KopfExample>,
    owners: Index<by_owner>,
) -> HandlerResult<Vec<String>> {
    let owner = obj.spec.field.clone().unwrap_or_default();
    let me = obj.metadata.name.clone().unwrap_or_default();
    let mut others = owners.get(&owner);
    others.retain(|name| *name != me);
    others.sort();
    Ok(others)
}

/// Where the API server reaches this operator: `KOPF_WEBHOOK_URL`, else the Service.
pub fn webhooks() -> Webhooks {
    match std::env::var("KOPF_WEBHOOK_URL") {
        Ok(url) => Webhooks::url(url),
        Err(_) => {
            let namespace = std::env::var("POD_NAMESPACE").unwrap_or_else(|_| "default".into());
            Webhooks::service(namespace, SERVICE)
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = kopf_examples::cli::ExampleArgs::from_env();
    if args.install_crd {
        kopf_examples::cli::install_crds().await?;
    }
    args.builder().webhooks(webhooks()).run().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kopf_examples::crd::KopfExampleSpec;

    fn object(field: Option<&str>, items: &[&str]) -> KopfExample {
        let spec = KopfExampleSpec {
            field: field.map(str::to_owned),
            items: items.iter().map(|i| (*i).to_owned()).collect(),
            duration: None,
        };
        KopfExample::new("demo", spec)
    }

    #[test]
    fn an_object_needs_an_owner_and_a_risky_one_is_warned_about() {
        assert!(owner_is_set(&object(None, &[])).is_err());
        assert!(owner_is_set(&object(Some("  "), &[])).is_err());
        assert_eq!(
            owner_is_set(&object(Some("risky"), &[])).map(|w| w.len()),
            Ok(1)
        );
        assert_eq!(
            owner_is_set(&object(Some("payments"), &[])),
            Ok(Warnings::default())
        );
    }

    #[test]
    fn items_are_defaulted_only_when_there_are_none() {
        let mut empty = object(Some("a"), &[]);
        default_items(&mut empty);
        assert_eq!(empty.spec.items, ["default"]);
        let mut given = object(Some("a"), &["x"]);
        default_items(&mut given);
        assert_eq!(given.spec.items, ["x"]);
    }
}
