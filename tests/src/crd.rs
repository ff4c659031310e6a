//! Installing CustomResourceDefinitions and waiting until they are served.

use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};

use crate::wait::try_wait_for;

/// The field manager the test support applies CRDs with.
pub const FIELD_MANAGER: &str = "kopf-tests";

/// How long [`install_crd`] waits for the CRD to become Established.
pub const CRD_ESTABLISHED_TIMEOUT: Duration = Duration::from_secs(60);

/// Applies `crd` (server-side apply, forced, so concurrent tests may install the same CRD) and
/// waits until its `Established` condition is `True`, for at most [`CRD_ESTABLISHED_TIMEOUT`].
///
/// Returns the CRD as the server has it.
///
/// # Errors
///
/// If `crd` has no name, the server rejects it (the message carries the server's reason), or
/// it is not Established in time (the message carries its last conditions).
///
/// # Cancellation safety
///
/// Cancel-safe in effect: cancelled after the apply, the CRD stays installed, and a later call
/// applies it again.
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> anyhow::Result<()> {
/// # let client = kopf_tests::test_client().await;
/// use kube::CustomResourceExt;
/// use kopf_examples::crd::KopfExample;
///
/// kopf_tests::install_crd(&client, &KopfExample::crd()).await?;
/// # Ok(()) }
/// ```
pub async fn install_crd(
    client: &Client,
    crd: &CustomResourceDefinition,
) -> anyhow::Result<CustomResourceDefinition> {
    let name = crd
        .metadata
        .name
        .as_deref()
        .context("the CRD has no metadata.name")?;
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    let mut body = crd.clone();
    // Server-side apply needs apiVersion/kind in the body; a typed CRD may lack them.
    body.metadata.managed_fields = None;
    body.metadata.resource_version = None;
    let mut value = serde_json::to_value(&body)?;
    value["apiVersion"] = "apiextensions.k8s.io/v1".into();
    value["kind"] = "CustomResourceDefinition".into();
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&value),
    )
    .await
    .with_context(|| format!("the server rejected the CRD {name}"))?;

    let established = try_wait_for(
        format_args!("the CRD {name} to become Established"),
        CRD_ESTABLISHED_TIMEOUT,
        || async {
            let current = api
                .get(name)
                .await
                .map_err(|err| format!("cannot read it: {err}"))?;
            let conditions = current
                .status
                .as_ref()
                .and_then(|s| s.conditions.clone())
                .unwrap_or_default();
            if conditions
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
            {
                Ok(current)
            } else {
                let seen: Vec<String> = conditions
                    .iter()
                    .map(|c| {
                        format!(
                            "{}={} ({})",
                            c.type_,
                            c.status,
                            c.message.as_deref().unwrap_or("")
                        )
                    })
                    .collect();
                Err(format!("conditions: [{}]", seen.join(", ")))
            }
        },
    )
    .await?;
    Ok(established)
}
