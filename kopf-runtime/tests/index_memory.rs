//! What an index keeps of an object, measured with a counting allocator (dhat's): its pairs and
//! the object's identity, never its body. One test only, so that nothing else allocates
//! meanwhile. The number printed is the benchmark's "memory per indexed object".

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::engine::ObjectState;
use kopf_runtime::{Index, ObjectRef, index};
use serde_json::json;

#[global_allocator]
static ALLOCATOR: dhat::Alloc = dhat::Alloc;

/// The bytes allocated and not yet freed.
fn live_bytes() -> isize {
    isize::try_from(dhat::HeapStats::get().curr_bytes).unwrap_or(isize::MAX)
}

const OBJECTS: usize = 10_000;
/// The size of each pod's annotation payload: a body the index must not keep.
const BODY_BYTES: usize = 4 * 1024;

/// Each pod's name, under its node.
#[index]
fn pods_by_node(pod: Arc<Pod>) -> Option<(String, String)> {
    let node = pod.spec.as_ref()?.node_name.clone()?;
    Some((node, pod.metadata.name.clone()?))
}

#[test]
fn an_indexed_object_costs_its_pairs_and_its_identity_not_its_body() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let index = Index::<pods_by_node>::default();
    let payload = "x".repeat(BODY_BYTES);
    let pods: Vec<_> = (0..OBJECTS)
        .map(|i| {
            let body = json!({
                "metadata": {"name": format!("pod-{i:05}"), "namespace": "default",
                             "uid": format!("00000000-0000-0000-0000-{i:012}"),
                             "annotations": {"payload": payload}},
                "spec": {"nodeName": format!("node-{}", i % 50), "containers": []},
            });
            let state = ObjectState::from_json(body.clone()).expect("a pod");
            let pod: Pod = serde_json::from_value(body).expect("a typed pod");
            (state.reference().clone(), Arc::new(pod))
        })
        .collect();
    drop(payload);
    let before = live_bytes();
    let mut held = 0_isize;
    for (reference, pod) in &pods {
        // A fresh identity, as the index's own watch makes one for every object.
        let own = ObjectRef {
            uid: Arc::from(&*reference.uid),
            namespace: reference.namespace.as_deref().map(Arc::from),
            name: Arc::from(&*reference.name),
        };
        index.apply(&own, Arc::clone(pod));
        held += 1;
    }
    let after = live_bytes();
    let per_object = (after - before) / held;
    eprintln!("memory per indexed object: {per_object} bytes (one pair of ~16 bytes of text)");
    assert_eq!(index.len(), 50, "one key per node");
    assert_eq!(index.get(&"node-7".to_owned()).len(), OBJECTS / 50);
    // Positive control: the pairs are really held.
    assert!(per_object > 16, "{per_object} bytes");
    // Not the body: a pod of ~4.3 KiB costs a small fraction of it.
    assert!(
        per_object < 512,
        "an indexed object keeps {per_object} bytes"
    );
}
