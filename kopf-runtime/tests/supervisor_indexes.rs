//! Handlers that take an index, on paused time: such a handler waits for the index's first full
//! list (each attempt before it is a temporary error, retried after 1 s), while a handler that
//! takes no index runs at once: nothing waits for every index, so an index that cannot fill
//! (a forbidden list, a missing kind) holds only its own handlers (kopf#1243's deadlock).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::engine::{Effect, ObjectState, Services, Supervisor, SupervisorConfig};
use kopf_runtime::{HandlerResult, Index, Registry, index, timer};
use serde_json::{Value, json};

/// Each pod's name, under its node.
#[index]
fn pods_by_node(pod: Arc<Pod>) -> Option<(String, String)> {
    let node = pod.spec.as_ref()?.node_name.clone()?;
    Some((node, pod.metadata.name.clone()?))
}

#[timer(id = "with-index", interval = "10s")]
async fn with_index(_pod: Arc<Pod>, by_node: Index<pods_by_node>) -> HandlerResult<usize> {
    Ok(by_node.len())
}

#[timer(id = "without-index", interval = "10s")]
async fn without_index(_pod: Arc<Pod>) -> HandlerResult<&'static str> {
    Ok("ran")
}

fn pod(name: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
           "spec": {"nodeName": "n1", "containers": []}})
}

#[tokio::test(start_paused = true)]
async fn a_handler_waits_for_its_index_and_no_other_handler_does() {
    let t0 = tokio::time::Instant::now();
    let index = Index::<pods_by_node>::default();
    let mut services = Services::default();
    services.insert(index.clone());
    let handlers = Registry::from_inventory()
        .expect("a registry")
        .by_resource();
    let handlers = handlers.into_values().flatten().collect();
    let config = SupervisorConfig {
        seed: Some(1),
        ..SupervisorConfig::default()
    };
    let (supervisor, mut effects) = Supervisor::new(handlers, services, config);
    let seen: Arc<Mutex<Vec<(u128, Effect)>>> = Arc::default();
    let sink = seen.clone();
    tokio::spawn(async move {
        while let Some(effect) = effects.recv().await {
            sink.lock()
                .unwrap()
                .push((t0.elapsed().as_millis(), effect));
        }
    });
    let object = ObjectState::from_json(pod("a")).expect("a pod");
    let reference = object.reference().clone();
    supervisor.observe(object);

    tokio::time::sleep_until(t0 + Duration::from_millis(5500)).await;
    let outputs = |id: &str| -> Vec<(u128, Option<Value>)> {
        (seen.lock().unwrap().iter())
            .filter_map(|(at, e)| match e {
                Effect::Output {
                    handler, result, ..
                } if *handler == id => Some((*at, result.clone())),
                _ => None,
            })
            .collect()
    };
    let failures = |id: &str| -> Vec<u128> {
        (seen.lock().unwrap().iter())
            .filter_map(|(at, e)| match e {
                Effect::Failure {
                    handler,
                    fatal: false,
                    ..
                } if *handler == id => Some(*at),
                _ => None,
            })
            .collect()
    };
    assert_eq!(
        outputs("without-index"),
        [(0, Some(json!("ran")))],
        "it runs at once"
    );
    assert!(
        outputs("with-index").is_empty(),
        "not before the index is filled"
    );
    assert_eq!(
        failures("with-index"),
        [0, 1000, 2000, 3000, 4000, 5000],
        "retried every 1 s"
    );

    // The first list arrives half-way between two attempts: the next one runs.
    let body: Pod = serde_json::from_value(pod("a")).expect("a typed pod");
    index.resync([(reference, Arc::new(body))]);
    tokio::time::sleep_until(t0 + Duration::from_millis(8000)).await;
    assert_eq!(outputs("with-index"), [(6000, Some(json!(1)))]);
    assert_eq!(failures("with-index").len(), 6, "no failure once filled");
    assert_eq!(
        outputs("without-index").len(),
        1,
        "its own schedule, untouched"
    );
}
