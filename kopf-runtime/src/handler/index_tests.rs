//! `Index<I>`: reads, the erased feed (decode errors leave an object out and say which), and
//! injection, which waits for the first list only in the handlers that take the index.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::json;

use super::*;
use crate::core::erased::Services;
use crate::core::outcome::ErrorKind;
use crate::core::stop::Stopper;

#[derive(Debug, Deserialize)]
struct Pod {
    metadata: Meta,
    spec: Spec,
}

#[derive(Debug, Deserialize)]
struct Meta {
    name: String,
}

#[derive(Debug, Deserialize)]
struct Spec {
    node: String,
}

impl StaticResource for Pod {
    fn resource_info() -> ResourceInfo {
        ResourceInfo::new("", "v1", "Pod", "pods", true)
    }
}

#[allow(non_camel_case_types)]
struct pods_by_node {}

impl IndexDef for pods_by_node {
    type Resource = Pod;
    type Key = String;
    type Value = String;
    const ID: &'static str = "pods_by_node";
    fn pairs(pod: Arc<Pod>) -> Vec<(String, String)> {
        vec![(pod.spec.node.clone(), pod.metadata.name.clone())]
    }
}

fn pod(name: &str, node: &serde_json::Value) -> Arc<ObjectState> {
    let body = json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
        "spec": {"node": *node},
    });
    Arc::new(ObjectState::from_json(body).expect("an object"))
}

fn invocation(services: Services) -> Invocation {
    let object = pod("a", &json!("n1"));
    let (_tx, live) = crate::core::latest::ObjectWatch::channel(object.clone());
    Invocation {
        object,
        live,
        stopper: Stopper::new(),
        retry: 0,
        started: tokio::time::Instant::now(),
        services,
        span: tracing::Span::none(),
        memo: Arc::default(),
        occurrence: None,
        change: None,
    }
}

#[test]
fn the_feed_keeps_the_index_current_and_reports_what_it_leaves_out() {
    let index = Index::<pods_by_node>::default();
    let erased: &dyn ErasedIndex = &index;
    erased.expect_lists(2);
    let errors = erased.resync(
        Some("ns"),
        &[
            pod("a", &json!("n1")),
            pod("b", &json!(7)),
            pod("c", &json!("n1")),
        ],
    );
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("index `pods_by_node`: ns/b is left out"),
        "{errors:?}"
    );
    assert_eq!(index.get(&"n1".to_owned()), ["a", "c"]);
    erased.listed();
    assert!(!index.is_filled(), "one of two streams listed");
    erased.listed();
    assert!(index.is_filled());

    erased.apply(&pod("a", &json!("n2"))).expect("a decodes");
    assert_eq!(index.get(&"n1".to_owned()), ["c"]);
    assert_eq!(index.with(&"n2".to_owned(), |values| values.count()), 1);

    // A version that no longer decodes takes the object out rather than keep a stale entry.
    let err = erased
        .apply(&pod("c", &json!(["not", "a", "node"])))
        .expect_err("no decode");
    assert!(err.contains("ns/c is left out"), "{err}");
    assert!(!index.contains_key(&"n1".to_owned()));

    erased.remove(pod("a", &json!("n2")).reference());
    assert!(index.is_empty() && index.keys().is_empty());
    assert_eq!(index.len(), 0);
}

#[test]
fn a_handler_taking_an_index_waits_for_its_first_list_and_no_other() {
    let index = Index::<pods_by_node>::default();
    let mut services = Services::default();
    ErasedIndex::insert_into(&index, &mut services);
    let invocation = invocation(services);

    let err = <Index<pods_by_node> as Inject<Pod>>::inject(&invocation).expect_err("not filled");
    assert_eq!(
        err.kind(),
        ErrorKind::Temporary {
            delay: Duration::from_secs(1)
        },
        "{err:?}"
    );
    assert!(
        err.report()
            .contains("`pods_by_node` holds no full list yet")
    );

    index.resync([]);
    let injected = <Index<pods_by_node> as Inject<Pod>>::inject(&invocation).expect("filled");
    assert!(injected.is_filled() && injected.is_empty());

    // An index the operator does not serve is a permanent error naming it.
    let bare = invocation_without_index();
    let err = <Index<pods_by_node> as Inject<Pod>>::inject(&bare).expect_err("not served");
    assert!(
        err.is_permanent() && err.report().contains("`pods_by_node`"),
        "{err:?}"
    );
}

fn invocation_without_index() -> Invocation {
    invocation(Services::default())
}

#[tokio::test(start_paused = true)]
async fn filled_resolves_at_the_first_list_and_is_cancel_safe() {
    let index = Index::<pods_by_node>::default();
    let waiting = index.clone();
    let waiter = tokio::spawn(async move { waiting.filled().await });
    // Not filled: a wait that is given up loses nothing.
    assert!(
        tokio::time::timeout(Duration::from_secs(60), index.filled())
            .await
            .is_err()
    );
    assert!(!waiter.is_finished());
    index.resync([(
        pod("a", &json!("n1")).reference().clone(),
        Arc::new(Pod {
            metadata: Meta { name: "a".into() },
            spec: Spec { node: "n1".into() },
        }),
    )]);
    waiter.await.expect("the waiter ends once filled");
    index.filled().await; // and at once from then on
    assert_eq!(index.get(&"n1".to_owned()), ["a"]);
}
