//! The operator's own client: built from a kube configuration whose transport security is
//! checked first (TLS verification on, no credentials sent in clear), with kube's retries off
//! (the operator's writes retry in one place), the request counter and rate limit in its
//! stack, where they see every HTTP attempt, a deadline on every request that is not
//! long-running ([`deadline`]), and on watches a deadline for their headers and a bound on
//! their silences ([`watch_deadline`]).
//!
//! ```text
//!  request ──▶ fence ──▶ rate limit ──▶ deadline ──▶ kube's stack (auth, TLS, connection pool)
//! ```
//!
//! kube 5 builds its connector itself: it sets no TCP keepalive and offers no way to set one
//! short of building the whole TLS stack (which the library leaves to the binary), and it
//! speaks HTTP/1.1 only (no HTTP/2 keepalive pings). The deadline is what bounds every wait.

mod deadline;
mod watch_deadline;

use std::sync::Arc;
use std::time::Duration;

use kube::Client;

use super::error::OperatorError;
use super::limits::{AnswerCountLayer, RateLimitLayer, RateLimiter};
use crate::operator::ha::fence::{Fence, FenceLayer};
use deadline::DeadlineLayer;
#[cfg(test)]
pub(crate) use deadline::RequestTimedOut;
pub(crate) use watch_deadline::WATCH_GRACE;

/// The clients the operator builds for itself.
#[derive(Clone)]
pub(crate) struct Clients {
    /// For everything the operator and its handlers do: counted, limited to
    /// `max_requests_per_second`, and fenced when leader election is on.
    pub(crate) client: Client,
    pub(crate) limiter: Arc<RateLimiter>,
    /// For the election's Lease only: never throttled or fenced by the operator's own limits, so
    /// a busy operator cannot lose its lease to its own rate limit. Its requests have their own
    /// deadline (the renew deadline: each attempt is bounded by it anyway).
    pub(crate) lease: Client,
}

/// How long the clients' requests may take (see [`deadline`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Deadlines {
    /// The main client's requests that change nothing (but long-running ones).
    pub(crate) reads: Duration,
    /// The main client's other requests: what the fence lets through.
    pub(crate) writes: Duration,
    /// Every request of the Lease client.
    pub(crate) lease: Duration,
}

/// Builds the operator's clients from `config` (or the environment's): the main one counted,
/// limited to `requests_per_second` and, with `fence`, refusing writes the fence does not allow;
/// both with their requests' `deadlines`.
pub(crate) async fn clients(
    config: Option<kube::Config>,
    requests_per_second: Option<u32>,
    fence: Option<Arc<Fence>>,
    deadlines: Deadlines,
) -> Result<Clients, OperatorError> {
    let mut config = match config {
        Some(config) => config,
        None => kube::Config::infer().await.map_err(OperatorError::Config)?,
    };
    config.default_retry = false;
    refuse_insecure_tls(&config)?;
    refuse_plain_http(&config)?;
    let limiter = Arc::new(RateLimiter::per_second(requests_per_second));
    let cluster_url = config.cluster_url.to_string();
    let build_error = |err| client_error(&cluster_url, err);
    let lease = kube::client::ClientBuilder::try_from(config.clone())
        .map_err(build_error)?
        .with_layer(&DeadlineLayer::uniform(deadlines.lease))
        .with_layer(&AnswerCountLayer(limiter.clone()))
        .build();
    // The deadline innermost: it counts from the moment the fence let the request through and
    // the rate limit sent it, so it bounds how long after the fence's check a write is waited
    // for.
    let builder = kube::client::ClientBuilder::try_from(config)
        .map_err(build_error)?
        .with_layer(&DeadlineLayer {
            reads: deadlines.reads,
            writes: deadlines.writes,
        })
        .with_layer(&RateLimitLayer(limiter.clone()));
    let client = match fence {
        Some(fence) => builder.with_layer(&FenceLayer(fence)).build(),
        None => builder.build(),
    };
    Ok(Clients {
        client,
        limiter,
        lease,
    })
}

/// A client that cannot be built, with the missing TLS stack named (kube's own error says only
/// "TLS required but no TLS stack selected").
fn client_error(cluster_url: &str, err: kube::Error) -> OperatorError {
    match err {
        kube::Error::TlsRequired => OperatorError::NoTlsStack {
            cluster_url: cluster_url.to_owned(),
        },
        other => OperatorError::Client(other),
    }
}

/// TLS verification of the API server is always on: a configuration that turns it off (e.g. a
/// kubeconfig with `insecure-skip-tls-verify: true`) is refused, never followed silently.
pub(crate) fn refuse_insecure_tls(config: &kube::Config) -> Result<(), OperatorError> {
    if config.accept_invalid_certs {
        return Err(OperatorError::InsecureTls {
            cluster_url: config.cluster_url.to_string(),
        });
    }
    Ok(())
}

/// Plain `http://` is accepted only to the loopback (e.g. `kubectl proxy`): anywhere else it
/// would send the credentials in clear.
pub(crate) fn refuse_plain_http(config: &kube::Config) -> Result<(), OperatorError> {
    let url = &config.cluster_url;
    let loopback = |host: &str| {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        host.eq_ignore_ascii_case("localhost")
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.to_canonical().is_loopback())
    };
    if url.scheme() == Some(&http::uri::Scheme::HTTP) && !url.host().is_some_and(loopback) {
        return Err(OperatorError::PlainHttp {
            cluster_url: url.to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{OperatorError, client_error, refuse_insecure_tls, refuse_plain_http};

    #[test]
    fn a_missing_tls_stack_is_named_with_the_features_to_enable() {
        let err = client_error("https://10.0.0.1:6443/", kube::Error::TlsRequired);
        assert!(matches!(err, OperatorError::NoTlsStack { .. }), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("https://10.0.0.1:6443/"), "{text}");
        assert!(
            text.contains("rustls-tls") && text.contains("openssl-tls"),
            "{text}"
        );
        let other = client_error(
            "https://10.0.0.1:6443/",
            kube::Error::LinesCodecMaxLineLengthExceeded,
        );
        assert!(matches!(other, OperatorError::Client(_)), "{other:?}");
    }

    fn config() -> kube::Config {
        kube::Config::new("https://127.0.0.1:6443".parse().expect("a valid URL"))
    }

    #[test]
    fn a_verifying_configuration_is_accepted() {
        assert!(refuse_insecure_tls(&config()).is_ok());
    }

    #[test]
    fn skipping_tls_verification_is_refused_with_the_cluster_named() {
        let mut insecure = config();
        insecure.accept_invalid_certs = true;
        let err = refuse_insecure_tls(&insecure).expect_err("must refuse");
        assert!(matches!(err, OperatorError::InsecureTls { .. }));
        let text = err.to_string();
        assert!(text.contains("https://127.0.0.1:6443/"), "{text}");
        assert!(text.contains("insecure-skip-tls-verify"), "{text}");
    }

    fn at(url: &str) -> kube::Config {
        kube::Config::new(url.parse().expect("a valid URL"))
    }

    #[test]
    fn plain_http_is_refused_unless_to_the_loopback() {
        let err = refuse_plain_http(&at("http://10.1.2.3:8080")).expect_err("must refuse");
        assert!(matches!(err, OperatorError::PlainHttp { .. }));
        let text = err.to_string();
        assert!(
            text.contains("http://10.1.2.3:8080/") && text.contains("https://"),
            "{text}"
        );
        for url in [
            "http://kubernetes.default.svc",
            "HTTP://example.com",
            "http://[fe80::1]:80",
        ] {
            assert!(refuse_plain_http(&at(url)).is_err(), "{url}");
        }
        for url in [
            "http://127.0.0.1:8001",
            "http://127.200.0.9",
            "http://localhost:8001",
            "http://LocalHost",
            "http://[::1]:8001",
            "http://[::ffff:127.0.0.1]:8001",
            "https://10.1.2.3:6443",
        ] {
            assert!(refuse_plain_http(&at(url)).is_ok(), "{url}");
        }
    }

    /// Both clients, built against a server that accepts connections and never answers.
    async fn silent_clients(
        deadlines: super::Deadlines,
    ) -> (std::net::TcpListener, super::Clients) {
        let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("a local port");
        let url = format!("http://{}", silent.local_addr().expect("its address"));
        let clients = super::clients(Some(at(&url)), None, None, deadlines)
            .await
            .expect("the clients");
        (silent, clients)
    }

    async fn get(client: &kube::Client, uri: &str) -> Result<String, kube::Error> {
        let request = http::Request::get(uri)
            .body(Vec::new())
            .expect("a valid request");
        client.request_text(request).await
    }

    fn timed_out(result: Result<String, kube::Error>, after: std::time::Duration) -> bool {
        matches!(result, Err(kube::Error::Service(err))
            if err.downcast_ref::<super::RequestTimedOut>()
                == Some(&super::RequestTimedOut { after }))
    }

    use tokio::time::timeout as bound;

    #[tokio::test(start_paused = true)]
    async fn both_clients_give_up_on_a_server_that_never_answers_but_not_on_a_log() {
        let s = std::time::Duration::from_secs;
        let deadlines = super::Deadlines {
            reads: s(30),
            writes: s(4),
            lease: s(10),
        };
        let (_silent, clients) = silent_clients(deadlines).await;
        let object = "/api/v1/namespaces/ns/configmaps/cm";
        let start = tokio::time::Instant::now();
        let read = bound(s(300), get(&clients.client, object)).await;
        assert!(timed_out(read.expect("the read not cut"), s(30)));
        assert_eq!(start.elapsed(), s(30));
        let start = tokio::time::Instant::now();
        let patch = http::Request::patch(object).body(b"{}".to_vec());
        let write = bound(
            s(300),
            clients.client.request_text(patch.expect("a valid request")),
        )
        .await;
        assert!(timed_out(write.expect("the write not cut"), s(4)));
        assert_eq!(start.elapsed(), s(4));
        let start = tokio::time::Instant::now();
        let lease = "/apis/coordination.k8s.io/v1/namespaces/ns/leases/op";
        let renewal = bound(s(300), get(&clients.lease, lease)).await;
        assert!(timed_out(
            renewal.expect("the Lease request not cut"),
            s(10)
        ));
        assert_eq!(start.elapsed(), s(10));
        // A followed log waits as long as it takes (here: the test's own bound)…
        let log = "/api/v1/namespaces/ns/pods/p/log?follow=true";
        assert!(
            bound(s(300), get(&clients.client, log)).await.is_err(),
            "a followed log was cut"
        );
        // …but a watch's answer has the read deadline.
        let start = tokio::time::Instant::now();
        let watch = "/api/v1/namespaces/ns/configmaps?watch=true&timeoutSeconds=290";
        let watched = bound(s(300), get(&clients.client, watch)).await;
        assert!(timed_out(watched.expect("the watch not cut"), s(30)));
        assert_eq!(start.elapsed(), s(30));
        // The metrics count the Lease request's failure beside the read's (the followed log
        // never ended); the statistics count only the main client's four requests.
        use crate::operator::limits::Verb;
        let answers = clients.limiter.answers();
        assert!(answers.contains(&(Verb::Get, 0, 2)), "{answers:?}");
        assert_eq!(clients.limiter.stats().total, 4);
    }
}
