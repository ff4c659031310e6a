//! The index stays consistent under any sequence of watch events: after every create, update,
//! delete and relist, each key holds exactly what the indexing function makes of the objects
//! that exist then, in the objects' order — as if rebuilt from scratch.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::store::{Indexed, Store};

/// What the watch can deliver, over a small universe of objects, keys and values so that
/// sequences collide often.
#[derive(Debug, Clone)]
enum Event {
    /// A version of object `.0` (created or updated) whose indexing gives these pairs.
    Apply(u8, Vec<(u8, u16)>),
    /// Object `.0` deleted.
    Delete(u8),
    /// A relist: these objects (by number, with their pairs) and no others exist.
    Relist(Vec<(u8, Vec<(u8, u16)>)>),
    /// A relist of one namespace's stream: there, exactly these of the objects in it.
    RelistIn(&'static str, Vec<(u8, Vec<(u8, u16)>)>),
}

fn pairs() -> impl Strategy<Value = Vec<(u8, u16)>> {
    prop::collection::vec((0u8..4, 0u16..8), 0..4)
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        6 => (0u8..6, pairs()).prop_map(|(o, p)| Event::Apply(o, p)),
        3 => (0u8..6).prop_map(Event::Delete),
        1 => prop::collection::vec((0u8..6, pairs()), 0..5).prop_map(Event::Relist),
        1 => (prop::bool::ANY, prop::collection::vec((0u8..6, pairs()), 0..5))
            .prop_map(|(a, objects)| Event::RelistIn(if a { "a" } else { "b" }, objects)),
    ]
}

fn object(n: u8) -> Indexed {
    // Two namespaces and cluster scope, so the order within a key is exercised.
    let namespace = match n % 3 {
        0 => None,
        1 => Some("a".into()),
        _ => Some("b".into()),
    };
    (namespace, format!("o{n}").into())
}

/// The index rebuilt from the objects that exist: key → values, by object order.
fn rebuilt(live: &BTreeMap<Indexed, Vec<(u8, u16)>>) -> BTreeMap<u8, Vec<u16>> {
    let mut by_key: BTreeMap<u8, Vec<u16>> = BTreeMap::new();
    for pairs in live.values() {
        for &(key, value) in pairs {
            by_key.entry(key).or_default().push(value);
        }
    }
    by_key
}

fn contents(store: &Store<u8, u16>) -> BTreeMap<u8, Vec<u16>> {
    store
        .keys()
        .map(|&key| (key, store.get(&key).copied().collect()))
        .collect()
}

proptest! {
    #[test]
    fn the_index_is_what_a_rebuild_from_the_live_objects_gives(
        events in prop::collection::vec(event(), 1..60)
    ) {
        let mut store = Store::default();
        let mut live: BTreeMap<Indexed, Vec<(u8, u16)>> = BTreeMap::new();
        for (i, event) in events.into_iter().enumerate() {
            match event {
                Event::Apply(n, pairs) => {
                    live.insert(object(n), pairs.clone());
                    store.replace(object(n), pairs);
                }
                Event::Delete(n) => {
                    let had = live.remove(&object(n)).is_some_and(|p| !p.is_empty());
                    prop_assert_eq!(store.remove(&object(n)), had, "event {}", i);
                }
                Event::Relist(objects) => {
                    live = objects.iter().map(|(n, p)| (object(*n), p.clone())).collect();
                    store.resync(None, live.iter().map(|(o, p)| (o.clone(), p.clone())));
                }
                Event::RelistIn(namespace, objects) => {
                    let inside = |o: &Indexed| o.0.as_deref() == Some(namespace);
                    let listed: BTreeMap<Indexed, Vec<(u8, u16)>> = (objects.iter())
                        .map(|(n, p)| (object(*n), p.clone()))
                        .filter(|(o, _)| inside(o))
                        .collect();
                    live.retain(|o, _| !inside(o));
                    live.extend(listed.clone());
                    store.resync(Some(namespace), listed);
                }
            }
            prop_assert_eq!(contents(&store), rebuilt(&live), "after event {}", i);
            prop_assert_eq!(store.len(), rebuilt(&live).len());
            prop_assert_eq!(store.is_empty(), rebuilt(&live).is_empty());
        }
    }
}
