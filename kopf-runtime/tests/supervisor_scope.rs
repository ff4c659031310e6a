//! The supervisor's scope (sharding): handlers run only for the objects in it; objects leaving
//! it stop with "operator pausing", objects entering it start at once; a released object comes
//! back whatever its version; `busy_uids` names what still runs or stops. Paused tokio time.

mod common;

use std::sync::Arc;

use common::*;

/// Waits for its stop flag.
fn waiting(id: &'static str) -> H {
    daemon(id).run(|ctx| async move {
        ctx.until_stopped().await;
        ok()
    })
}

fn only(uids: &'static [&'static str]) -> Option<kopf_runtime::engine::InScope> {
    Some(Arc::new(move |uid: &str| uids.contains(&uid)))
}

#[tokio::test(start_paused = true)]
async fn handlers_run_only_in_scope_and_follow_it() {
    let h = Harness::new(vec![waiting("d")]);
    h.sup.set_scope(only(&["u1"]));
    h.observe(&Obj::new("u1"));
    h.observe(&Obj::new("u2"));
    h.at(1000).await;
    assert_eq!(h.log.call_times("d"), vec![0], "only u1 is in scope");
    assert_eq!(h.stats().daemons_running, 1);
    // The scope moves to u2: u1 stops through its ladder, u2 starts at once.
    h.sup.set_scope(only(&["u2"]));
    let mut busy = h.sup.busy_uids();
    busy.sort();
    let uids = |list: &[&str]| {
        list.iter()
            .map(|u| Arc::<str>::from(*u))
            .collect::<Vec<_>>()
    };
    assert_eq!(busy, uids(&["u1", "u2"]), "u1 stops while u2 starts");
    h.at(2000).await;
    let stops: Vec<_> = (h.log.events("d").into_iter())
        .filter(|(_, w)| w.starts_with("stopped"))
        .collect();
    assert_eq!(stops, vec![(1000, "stopped: operator pausing".into())]);
    assert_eq!(h.log.call_times("d"), vec![0, 1000]);
    assert_eq!(h.sup.busy_uids(), uids(&["u2"]));
    // Pausing still pauses everything; resuming brings back the scope only.
    h.sup.pause();
    h.at(3000).await;
    assert!(h.sup.busy_uids().is_empty());
    h.sup.resume();
    h.at(4000).await;
    assert_eq!(h.log.call_times("d"), vec![0, 1000, 3000]);
    // No scope: every object.
    h.sup.set_scope(None);
    h.at(5000).await;
    assert_eq!(h.log.call_times("d"), vec![0, 1000, 3000, 4000]);
    assert_eq!(h.stats().daemons_running, 2);
}

#[tokio::test(start_paused = true)]
async fn a_released_object_comes_back_at_the_same_version() {
    let h = Harness::new(vec![waiting("d")]);
    h.observe(&Obj::new("u1"));
    h.at(1000).await;
    h.sup.set_scope(only(&[]));
    h.sup.release("u1");
    h.at(2000).await;
    assert!(h.sup.tracked_uids().is_empty());
    assert_eq!(
        h.stats().objects,
        0,
        "its memory is dropped once it stopped"
    );
    // Handed back unchanged (the same version a deletion's tombstone would refuse).
    h.sup.set_scope(None);
    h.observe(&Obj::new("u1"));
    h.at(3000).await;
    assert_eq!(h.log.call_times("d"), vec![0, 2000]);
    // Positive control: a deleted object does not come back at the same version.
    h.sup.gone("u1");
    h.at(4000).await;
    h.observe(&Obj::new("u1"));
    h.at(5000).await;
    assert_eq!(h.log.call_times("d"), vec![0, 2000]);
}
