//! The `many_timers` example (`kopf-examples/src/bin/many_timers.rs`): its `initial_delay`
//! function spreads thousands of objects evenly and stably over the 60 s interval, and the
//! timer jitters every run.

#[allow(dead_code, unreachable_pub)]
#[path = "../../kopf-examples/src/bin/many_timers.rs"]
mod many_timers;

use std::time::Duration;

use kopf_runtime::Registry;
use kopf_runtime::engine::ObjectState;
use serde_json::json;

fn object(i: usize) -> ObjectState {
    let uid = format!(
        "{:08x}-{:04x}-4{:03x}-a000-{:012x}",
        i * 7919,
        i % 65536,
        i % 4096,
        i
    );
    ObjectState::from_json(json!({
        "apiVersion": "kopf.dev/v1", "kind": "KopfExample",
        "metadata": {"name": format!("obj-{i}"), "namespace": "ns", "uid": uid},
        "spec": {},
    }))
    .expect("a valid object")
}

#[test]
fn first_runs_are_spread_evenly_and_stably_over_the_interval() {
    let registration = Registry::from_inventory()
        .unwrap()
        .get("refresh_many")
        .unwrap();
    let spec = registration.spec();
    assert_eq!(spec.schedule.interval, Some(Duration::from_secs(60)));
    assert_eq!(spec.schedule.jitter, Some(Duration::from_secs(5)));
    let handler = registration.handler();
    let mut buckets = [0_usize; 10];
    for i in 0..5000 {
        let delay = handler.initial_delay(&object(i)).expect("a delay");
        assert!(delay < Duration::from_secs(60), "{delay:?}");
        assert_eq!(handler.initial_delay(&object(i)), Some(delay), "not stable");
        buckets[(delay.as_millis() / 6000) as usize] += 1;
    }
    // 500 expected per 6 s bucket.
    for (i, n) in buckets.iter().enumerate() {
        assert!(
            (400..=600).contains(n),
            "bucket {i} has {n} of 5000: {buckets:?}"
        );
    }
}
