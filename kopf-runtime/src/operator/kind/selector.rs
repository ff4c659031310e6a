//! Watches that carry only a member's share: a client that adds the API server's
//! `shardSelector` to every list and watch it sends, and the start-up check of whether the API
//! server honours it (with the feature gate `ShardedListAndWatch` off, it ignores the parameter
//! and sends every object; a filtered list says so in `metadata.shardInfo`).

use std::task::{Context, Poll};

use futures::future::BoxFuture;
use http::{Request, Response, Uri};
use kube::Client;
use kube::api::ApiResource;
use kube::client::Body;
use tower::{BoxError, Service};
use tracing::{info, warn};

use crate::core::resource::ResourceInfo;
use crate::operator::ha::ranges::RangeSet;
use crate::operator::ha::sharding::ShardWatch;

/// `uri` with `shardSelector=<selector>` added to its query.
fn with_selector(uri: &Uri, selector: &str) -> Option<Uri> {
    let encoded: String = form_urlencoded::byte_serialize(selector.as_bytes()).collect();
    let path = uri.path();
    let query = match uri.query() {
        Some(q) if !q.is_empty() => format!("{q}&shardSelector={encoded}"),
        _ => format!("shardSelector={encoded}"),
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = format!("{path}?{query}").parse().ok();
    Uri::from_parts(parts).ok()
}

/// A service sending every request through `client` with the shard selector added.
#[derive(Clone)]
struct Selecting {
    client: Client,
    selector: String,
}

impl Service<Request<Body>> for Selecting {
    type Response = Response<Body>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Response<Body>, BoxError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: Request<Body>) -> Self::Future {
        if let Some(uri) = with_selector(req.uri(), &self.selector) {
            *req.uri_mut() = uri;
        }
        let client = self.client.clone();
        Box::pin(async move { client.send(req).await.map_err(BoxError::from) })
    }
}

/// A client for the watches of `ranges` (the operator's own client, its limits and fence
/// included, with the selector added to every request); `None` for no ranges.
pub(crate) fn watch_client(client: &Client, ranges: &RangeSet) -> Option<Client> {
    let selector = ranges.selector()?;
    let namespace = client.default_namespace().to_owned();
    let service = Selecting {
        client: client.clone(),
        selector,
    };
    Some(Client::new(service, namespace))
}

/// The selector of the start-up check: not a valid expression, so that an API server that
/// evaluates `shardSelector` refuses the list, and one that ignores it answers it.
const PROBE: &str = "kopf-probe";

/// Which watch mode to use for a kind: `Auto` asks the API server with a one-object list
/// carrying an invalid selector (a server with the feature gate off ignores the parameter and
/// answers; one with it on refuses it, whether the kind has objects or not).
///
/// # Cancellation safety
/// Cancel-safe: it only reads.
pub(crate) async fn resolve(
    mode: ShardWatch,
    client: &Client,
    resource: &ApiResource,
    info: &ResourceInfo,
) -> ShardWatch {
    match mode {
        ShardWatch::Server | ShardWatch::ClientSide => return mode,
        ShardWatch::Auto => {}
    }
    let probe = Client::new(
        Selecting {
            client: client.clone(),
            selector: PROBE.to_owned(),
        },
        client.default_namespace().to_owned(),
    );
    let url = <kube::api::DynamicObject as kube::Resource>::url_path(resource, None);
    let request = kube::core::Request::new(url).list(&kube::api::ListParams::default().limit(1));
    let answer = match request {
        Ok(request) => probe.request::<serde_json::Value>(request).await,
        Err(err) => Err(kube::Error::BuildRequest(err)),
    };
    match answer {
        Err(kube::Error::Api(status)) if status.message.contains("shard selector") => {
            info!(resource = %info, "sharding: the API server filters the watches (shardSelector)");
            ShardWatch::Server
        }
        Ok(_) => {
            info!(resource = %info,
                "sharding: the API server ignores shardSelector (feature gate \
                 ShardedListAndWatch off): watching every object, serving this member's share");
            ShardWatch::ClientSide
        }
        Err(err) => {
            warn!(resource = %info, error = %err,
                "sharding: cannot check whether the API server supports shardSelector: \
                 watching every object, serving this member's share");
            ShardWatch::ClientSide
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_selector_joins_the_query() {
        let sel = "shardRange(object.metadata.uid, '0x0', '0x1') || x";
        let encoded = "shardRange%28object.metadata.uid%2C+%270x0%27%2C+%270x1%27%29+%7C%7C+x";
        let uri: Uri = "https://h:1/apis/g/v1/xs?watch=true&resourceVersion=5"
            .parse()
            .unwrap();
        let with = with_selector(&uri, sel).unwrap();
        assert_eq!(
            with.to_string(),
            format!(
                "https://h:1/apis/g/v1/xs?watch=true&resourceVersion=5&shardSelector={encoded}"
            )
        );
        let bare: Uri = "/api/v1/pods".parse().unwrap();
        assert_eq!(
            with_selector(&bare, "s").unwrap().to_string(),
            "/api/v1/pods?shardSelector=s"
        );
    }
}
