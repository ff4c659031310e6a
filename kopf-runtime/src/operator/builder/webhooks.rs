//! The builder's setter for the admission webhook server (feature `webhook`).

use super::OperatorBuilder;
use crate::operator::webhook::Webhooks;

impl OperatorBuilder {
    /// Serves the binary's `#[validate]` and `#[mutate]` handlers over TLS with these settings:
    /// where the API server reaches the operator, where the certificates come from, and
    /// whether the operator keeps the webhook configurations. Every replica serves, standbys
    /// and sharding members too. The guide is `docs/webhooks.md`.
    ///
    /// ```
    /// use kopf_runtime::Webhooks;
    /// let builder = kopf_runtime::Operator::builder()
    ///     .webhooks(Webhooks::service("backups", "backups-webhook"));
    /// # drop(builder);
    /// ```
    pub fn webhooks(mut self, settings: Webhooks) -> Self {
        self.options.webhooks = Some(settings);
        self
    }
}
