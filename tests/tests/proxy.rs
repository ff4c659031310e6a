//! The fault-injecting proxy against the real kube-apiserver: it forwards lists, watches and
//! patches unchanged (streaming), and every fault kind is observable by a kube client.
//!
//! Needs `KUBECONFIG` of a running testenv (`eval "$(tools/kube-testenv/start.sh)"`).

use std::time::{Duration, Instant};

use futures::{StreamExt as _, TryStreamExt as _};
use http::Method;
use k8s_openapi::api::core::v1::ConfigMap;
use kopf_tests::proxy::{Fault, FaultProxy, Match, Rule};
use kopf_tests::{TestNamespace, test_config, wait_until};
use kube::api::{
    Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, ResourceExt as _};
use serde_json::json;

/// Deadline for things the server does promptly (generous: the machine is slow and noisy).
const PROMPTLY: Duration = Duration::from_secs(30);

/// A namespace, a proxy in front of the test server, and a client through the proxy that does
/// not retry on its own (kube retries 429/503/504 by default), so faults reach the test.
async fn setup() -> anyhow::Result<(TestNamespace, FaultProxy, Api<ConfigMap>)> {
    let ns = TestNamespace::create().await?;
    let proxy = FaultProxy::start(&test_config().await?).await?;
    let mut config = proxy.config();
    config.default_retry = false;
    let client = Client::try_from(config)?;
    let api = Api::namespaced(client, ns.name());
    Ok((ns, proxy, api))
}

fn config_map(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        data: Some([("k".to_owned(), "v".to_owned())].into()),
        ..ConfigMap::default()
    }
}

fn api_code(result: Result<impl std::fmt::Debug, kube::Error>) -> u16 {
    match result {
        Err(kube::Error::Api(status)) => status.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn merge(value: &str) -> Patch<serde_json::Value> {
    Patch::Merge(json!({ "data": { "k": value } }))
}

#[tokio::test]
async fn forwards_create_list_patch_and_streams_watches() -> anyhow::Result<()> {
    let (ns, proxy, api) = setup().await?;
    let mut events = api
        .watch(&WatchParams::default().disable_bookmarks(), "0")
        .await?
        .boxed();
    api.create(&PostParams::default(), &config_map("a")).await?;
    // The event arrives while the watch response is still open: the stream is not buffered.
    let first = tokio::time::timeout(PROMPTLY, events.try_next()).await??;
    assert!(
        matches!(&first, Some(WatchEvent::Added(cm)) if cm.name_any() == "a"),
        "{first:?}"
    );
    api.patch("a", &PatchParams::default(), &merge("w")).await?;
    let listed = api.list(&ListParams::default()).await?;
    assert_eq!(listed.items.len(), 1);
    assert_eq!(listed.items[0].data.as_ref().unwrap()["k"], "w");
    let modified = tokio::time::timeout(PROMPTLY, events.try_next()).await??;
    assert!(
        matches!(modified, Some(WatchEvent::Modified(_))),
        "{modified:?}"
    );

    let handle = proxy.handle();
    assert_eq!(handle.count(&Match::watches()), 1);
    assert_eq!(handle.count(&Match::method(Method::POST)), 1);
    assert_eq!(
        handle.count(&Match::method(Method::PATCH).path("/configmaps/a")),
        1
    );
    assert_eq!(handle.count(&Match::method(Method::GET).watch(false)), 1);
    let counters = handle.counters();
    assert_eq!(
        (counters.requests, counters.faults, counters.upstream_errors),
        (4, 0, 0)
    );
    ns.cleanup().await
}

#[tokio::test]
async fn too_many_requests_is_answered_then_forwarded() -> anyhow::Result<()> {
    let (ns, proxy, api) = setup().await?;
    api.create(&PostParams::default(), &config_map("a")).await?;
    let patches = Match::method(Method::PATCH).path("/configmaps/a");
    proxy
        .handle()
        .inject(Rule::new(patches.clone(), Fault::too_many_requests(1)).times(1));
    assert_eq!(
        api_code(api.patch("a", &PatchParams::default(), &merge("1")).await),
        429
    );
    // The rule is used up: the next patch is forwarded and applied.
    api.patch("a", &PatchParams::default(), &merge("2")).await?;
    assert_eq!(api.get("a").await?.data.unwrap()["k"], "2");
    assert_eq!(proxy.handle().count(&patches), 2);
    assert_eq!(proxy.handle().rules(), 0);

    // The raw answer carries Retry-After, as the API server's own 429 does.
    proxy.handle().inject(
        Rule::new(
            Match::method(Method::GET).path("/configmaps/a"),
            Fault::too_many_requests(7),
        )
        .times(1),
    );
    let request = http::Request::get(format!("/api/v1/namespaces/{}/configmaps/a", ns.name()))
        .body(Vec::new())?;
    let response = api.into_client().send(request.map(Into::into)).await?;
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "7");
    ns.cleanup().await
}

#[tokio::test]
async fn kube_default_retry_hides_a_single_429_but_the_proxy_counts_it() -> anyhow::Result<()> {
    let (ns, proxy, api) = setup().await?;
    api.create(&PostParams::default(), &config_map("a")).await?;
    let retrying = Api::<ConfigMap>::namespaced(Client::try_from(proxy.config())?, ns.name());
    let patches = Match::method(Method::PATCH).path("/configmaps/a");
    proxy
        .handle()
        .inject(Rule::new(patches.clone(), Fault::too_many_requests(1)).times(1));
    retrying
        .patch("a", &PatchParams::default(), &merge("r"))
        .await?;
    assert_eq!(proxy.handle().count(&patches), 2, "one 429, one retry");
    assert_eq!(proxy.handle().counters().faults, 1);
    ns.cleanup().await
}

#[tokio::test]
async fn status_faults_reach_the_client_with_their_codes() -> anyhow::Result<()> {
    let (ns, proxy, api) = setup().await?;
    api.create(&PostParams::default(), &config_map("a")).await?;
    let faults = [
        (Fault::conflict(), 409),
        (Fault::failed_test_guard(), 422),
        (Fault::internal_error(), 500),
        (Fault::unavailable(), 503),
        (Fault::gone(), 410),
    ];
    let patches = Match::method(Method::PATCH).path("/configmaps/a");
    for (fault, code) in faults {
        proxy
            .handle()
            .inject(Rule::new(patches.clone(), fault).times(1));
        let answer = api.patch("a", &PatchParams::default(), &merge("x")).await;
        assert_eq!(api_code(answer), code);
    }
    // None of them reached the server: the object is unchanged; the next patch goes through.
    assert_eq!(api.get("a").await?.data.unwrap()["k"], "v");
    api.patch("a", &PatchParams::default(), &merge("y")).await?;
    assert_eq!(api.get("a").await?.data.unwrap()["k"], "y");
    assert_eq!(proxy.handle().counters().faults, 5);
    ns.cleanup().await
}

/// Runs a watcher through the proxy and counts its events per kind in the background.
struct Watched {
    inits: tokio::sync::watch::Receiver<(usize, usize, Vec<String>, Vec<String>)>,
    task: tokio::task::JoinHandle<()>,
}

impl Watched {
    /// (Init events, InitDone events, names applied after an InitDone, errors seen).
    fn start(api: Api<ConfigMap>) -> Self {
        let (tx, inits) = tokio::sync::watch::channel((0, 0, Vec::new(), Vec::new()));
        let task = tokio::spawn(async move {
            let config = watcher::Config::default().timeout(290);
            let mut stream = watcher(api, config).default_backoff().boxed();
            while let Some(item) = stream.next().await {
                tx.send_modify(|(init, done, applied, errors)| match item {
                    Ok(watcher::Event::Init) => *init += 1,
                    Ok(watcher::Event::InitDone) => *done += 1,
                    Ok(watcher::Event::Apply(cm)) => applied.push(cm.name_any()),
                    Ok(watcher::Event::InitApply(_) | watcher::Event::Delete(_)) => {}
                    Err(err) => errors.push(err.to_string()),
                });
            }
        });
        Self { inits, task }
    }

    async fn until(
        &mut self,
        what: &str,
        check: impl Fn(&(usize, usize, Vec<String>, Vec<String>)) -> bool,
    ) {
        let waited = tokio::time::timeout(PROMPTLY, self.inits.wait_for(|s| check(s)))
            .await
            .is_ok();
        assert!(waited, "{what}: watcher state {:?}", *self.inits.borrow());
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test]
async fn watch_gone_event_makes_the_watcher_relist() -> anyhow::Result<()> {
    let (ns, proxy, api) = setup().await?;
    api.create(&PostParams::default(), &config_map("before"))
        .await?;
    proxy
        .handle()
        .inject(Rule::new(Match::watches(), Fault::WatchGone).times(1));
    let mut watched = Watched::start(api.clone());
    // The first watch gets the 410 ERROR event: the watcher reports it and lists again.
    watched
        .until("a relist after the 410", |(init, done, _, errors)| {
            *init >= 2
                && *done >= 2
                && errors
                    .iter()
                    .any(|e| e.contains("410") || e.contains("too old"))
        })
        .await;
    assert_eq!(proxy.handle().rules(), 0);
    // The second watch is forwarded: new objects arrive as events.
    api.create(&PostParams::default(), &config_map("after"))
        .await?;
    watched
        .until("the new object", |(_, _, applied, _)| {
            applied.iter().any(|n| n == "after")
        })
        .await;
    let lists = proxy
        .handle()
        .count(&Match::method(Method::GET).watch(false));
    assert!(lists >= 2, "{lists} lists");
    assert!(proxy.handle().count(&Match::watches()) >= 2);
    ns.cleanup().await
}

#[tokio::test]
async fn dropped_connections_restart_the_watch() -> anyhow::Result<()> {
    let (ns, proxy, api) = setup().await?;
    let mut watched = Watched::start(api.clone());
    watched
        .until("the initial list", |(_, done, _, _)| *done >= 1)
        .await;
    let watches = Match::watches();
    wait_until("the watch request", PROMPTLY, || async {
        proxy.handle().count(&watches) >= 1
    })
    .await;
    let before = proxy.handle().count(&watches);
    assert!(
        proxy.handle().drop_connections() >= 1,
        "the watch connection was open"
    );
    // Created after the drop: only a restarted watch (or relist) can deliver it.
    api.create(&PostParams::default(), &config_map("after-drop"))
        .await?;
    watched
        .until("the object created after the drop", |(_, _, applied, _)| {
            applied.iter().any(|n| n == "after-drop")
        })
        .await;
    assert!(
        proxy.handle().count(&watches)
            + proxy
                .handle()
                .count(&Match::method(Method::GET).watch(false))
            > before + 1
    );
    assert_eq!(proxy.handle().counters().drops, 1);
    ns.cleanup().await
}

#[tokio::test]
async fn a_watch_cut_mid_event_delivers_the_whole_events_only() -> anyhow::Result<()> {
    let (ns, proxy, api) = setup().await?;
    proxy
        .handle()
        .inject(Rule::new(Match::watches(), Fault::CutWatch { after_events: 1 }).times(1));
    let mut events = api
        .watch(&WatchParams::default().disable_bookmarks(), "0")
        .await?
        .boxed();
    api.create(&PostParams::default(), &config_map("one"))
        .await?;
    let first = tokio::time::timeout(PROMPTLY, events.try_next()).await??;
    assert!(
        matches!(&first, Some(WatchEvent::Added(cm)) if cm.name_any() == "one"),
        "{first:?}"
    );
    api.create(&PostParams::default(), &config_map("two"))
        .await?;
    // The second event is cut: the stream fails or ends, it never yields "two".
    let rest: Vec<_> = tokio::time::timeout(PROMPTLY, events.collect::<Vec<_>>()).await?;
    assert!(
        rest.iter()
            .all(|e| !matches!(e, Ok(WatchEvent::Added(cm)) if cm.name_any() == "two")),
        "{rest:?}"
    );
    // Positive control: "two" exists, and a new watch (forwarded) delivers it.
    let mut again = api
        .watch(&WatchParams::default().disable_bookmarks(), "0")
        .await?
        .boxed();
    let mut names = Vec::new();
    while names.len() < 2 {
        match tokio::time::timeout(PROMPTLY, again.try_next()).await?? {
            Some(WatchEvent::Added(cm)) => names.push(cm.name_any()),
            other => panic!("unexpected {other:?}"),
        }
    }
    names.sort();
    assert_eq!(names, ["one", "two"]);
    ns.cleanup().await
}

#[tokio::test]
async fn delay_and_stall_hold_requests() -> anyhow::Result<()> {
    let (ns, proxy, api) = setup().await?;
    api.create(&PostParams::default(), &config_map("a")).await?;
    let gets = Match::method(Method::GET).path("/configmaps/a");
    proxy
        .handle()
        .inject(Rule::new(gets.clone(), Fault::Delay(Duration::from_millis(1500))).times(1));
    let start = Instant::now();
    api.get("a").await?;
    assert!(
        start.elapsed() >= Duration::from_millis(1500),
        "{:?}",
        start.elapsed()
    );

    proxy
        .handle()
        .inject(Rule::new(gets, Fault::Stall).times(1));
    let stalled = tokio::spawn({
        let api = api.clone();
        async move { api.get("a").await }
    });
    // Positive control for "still stalled": an unrelated request goes through meanwhile.
    api.list(&ListParams::default()).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!stalled.is_finished(), "the stalled request was answered");
    proxy.handle().release_stalled();
    let answer = tokio::time::timeout(PROMPTLY, stalled).await??;
    assert_eq!(answer?.name_any(), "a");
    ns.cleanup().await
}

#[tokio::test]
async fn reset_closes_the_connection_and_the_next_request_works() -> anyhow::Result<()> {
    let (ns, proxy, api) = setup().await?;
    api.create(&PostParams::default(), &config_map("a")).await?;
    let gets = Match::method(Method::GET).path("/configmaps/a");
    proxy
        .handle()
        .inject(Rule::new(gets, Fault::Reset).times(1));
    let answer = api.get("a").await;
    assert!(
        matches!(
            answer,
            Err(kube::Error::HyperError(_) | kube::Error::Service(_))
        ),
        "{answer:?}"
    );
    assert_eq!(api.get("a").await?.name_any(), "a");
    ns.cleanup().await
}

#[tokio::test]
async fn a_dropped_proxy_stops_listening() -> anyhow::Result<()> {
    let (ns, proxy, api) = setup().await?;
    let address = proxy.address();
    // Positive control: it answers while it runs.
    api.list(&ListParams::default()).await?;
    tokio::net::TcpStream::connect(address).await?;
    drop(proxy);
    wait_until("the port to refuse connections", PROMPTLY, || async {
        tokio::net::TcpStream::connect(address).await.is_err()
    })
    .await;
    assert!(api.list(&ListParams::default()).await.is_err());
    ns.cleanup().await
}

#[tokio::test]
async fn the_proxy_verifies_the_api_server() -> anyhow::Result<()> {
    // An upstream config without a CA is refused outright, never connected without verifying.
    let mut config = test_config().await?;
    config.root_cert = None;
    let err = FaultProxy::start(&config).await.unwrap_err();
    assert!(err.to_string().contains("certificate-authority"), "{err}");
    // With a wrong CA the connection fails instead of being trusted.
    let other = FaultProxy::start(&test_config().await?).await?;
    let mut wrong = test_config().await?;
    wrong.root_cert = other.config().root_cert;
    let proxy = FaultProxy::start(&wrong).await?;
    let client = Client::try_from(proxy.config())?;
    assert!(client.apiserver_version().await.is_err());
    assert!(proxy.handle().counters().upstream_errors >= 1);
    // Positive control: with the right CA the same request works.
    let good = FaultProxy::start(&test_config().await?).await?;
    Client::try_from(good.config())?.apiserver_version().await?;
    Ok(())
}
