//! The admission webhook, behind the `webhook` feature (see the README): the API server asks
//! the operator before it stores a `Backup`, and refuses one whose bucket is not a URL, with
//! [`bucket_is_a_url`]'s message, which `kubectl` shows as it is.
//!
//! ```text
//!   kubectl apply ──▶ API server ──HTTPS──▶ every replica's webhook server (port 9443)
//!                         ◀── admitted, or refused with the handler's message
//! ```
//!
//! Every replica answers (standbys too: the answers need no leader), so a rolling update never
//! leaves the API server without one. The operator makes its own certificates (a CA kept in the
//! Secret `<operator>-webhook-ca` of its namespace, shared by the replicas) and keeps the
//! `ValidatingWebhookConfiguration` named after it pointing at [`webhooks`]'s address, with
//! that CA. If no replica answers, the API server refuses the `Backup` (the failure policy
//! `fail`): a rule that is not checked is not a rule. `deploy/webhook/` has the Service, the
//! RBAC and the NetworkPolicy rule this needs.

use kopf_runtime::{Rejection, Webhooks, validate};

use crate::crd::Backup;

/// The schemes a bucket's URL may have.
pub const SCHEMES: [&str; 3] = ["s3://", "gs://", "file://"];

/// A `Backup`'s bucket must be a URL of one of [`SCHEMES`] with something after it: the API
/// server refuses to store any other `Backup`, created or changed, with this message.
///
/// ```
/// use operator::crd::{Backup, BackupSpec};
/// use operator::webhook::bucket_is_a_url;
///
/// let spec = |bucket: &str| BackupSpec { bucket: bucket.into(), items: vec![] };
/// assert!(bucket_is_a_url(&Backup::new("a", spec("s3://my-bucket"))).is_ok());
/// let refused = bucket_is_a_url(&Backup::new("b", spec("my-bucket"))).unwrap_err();
/// assert!(refused.message().starts_with("spec.bucket must be a URL"));
/// ```
#[validate(operations(create, update))]
pub fn bucket_is_a_url(backup: &Backup) -> Result<(), Rejection> {
    let bucket = backup.spec.bucket.as_str();
    let is_url = SCHEMES.iter().any(|scheme| {
        bucket
            .strip_prefix(scheme)
            .is_some_and(|rest| !rest.is_empty())
    });
    if is_url {
        Ok(())
    } else {
        Err(Rejection::new(format!(
            "spec.bucket must be a URL starting with {}, not {bucket:?}",
            SCHEMES.join(", ")
        )))
    }
}

/// Where the API server reaches the operator: the URL in `KOPF_WEBHOOK_URL` for an operator
/// run outside the cluster (e.g. `https://127.0.0.1:9443`, where the server then listens), else
/// the Service `<operator>-webhook` of the pod's namespace (`POD_NAMESPACE`, set by
/// `deploy/deployment.yaml`), in front of the pods' port 9443.
///
/// ```
/// // The operator's own name is its package's name, as `main` gives it to the builder.
/// let _ = operator::webhook::webhooks();
/// ```
#[must_use]
pub fn webhooks() -> Webhooks {
    if let Ok(url) = std::env::var("KOPF_WEBHOOK_URL") {
        return Webhooks::url(url);
    }
    let namespace = std::env::var("POD_NAMESPACE").unwrap_or_else(|_| "default".to_owned());
    Webhooks::service(namespace, format!("{}-webhook", env!("CARGO_PKG_NAME")))
}
