//! One index's contents: for every key, the values each object contributed to it, in the
//! objects' order (namespace, then name), and for every object the keys it contributed to, so
//! that a new version or a deletion takes back exactly what the last one put in.
//!
//! | event                      | effect                                                    |
//! |----------------------------|-----------------------------------------------------------|
//! | a version of an object     | its old pairs out, its new pairs in (one step)            |
//! | an object deleted          | its pairs out                                             |
//! | a relist                   | every pair out, every listed object's pairs in            |
//! | an object with no pairs    | not in the index at all (a key with no values is removed) |

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::Arc;

/// An object's place in an index: its namespace (none for a cluster-scoped kind) and its name.
/// Within a key, values come in this order.
pub(crate) type Indexed = (Option<Arc<str>>, Arc<str>);

/// The pairs an indexing function made of every object of a kind.
#[derive(Debug, Clone)]
pub(crate) struct Store<K, V> {
    by_key: HashMap<K, BTreeMap<Indexed, Vec<V>>>,
    by_object: HashMap<Indexed, Vec<K>>,
}

impl<K, V> Default for Store<K, V> {
    fn default() -> Self {
        Self {
            by_key: HashMap::new(),
            by_object: HashMap::new(),
        }
    }
}

impl<K: Eq + Hash + Clone, V> Store<K, V> {
    /// The object's pairs now: whatever its previous version contributed is taken out first.
    pub(crate) fn replace(&mut self, object: Indexed, pairs: impl IntoIterator<Item = (K, V)>) {
        self.remove(&object);
        let mut keys = Vec::new();
        for (key, value) in pairs {
            match self
                .by_key
                .entry(key.clone())
                .or_default()
                .entry(object.clone())
            {
                Entry::Vacant(slot) => {
                    slot.insert(vec![value]);
                    keys.push(key);
                }
                Entry::Occupied(mut slot) => slot.get_mut().push(value),
            }
        }
        if !keys.is_empty() {
            self.by_object.insert(object, keys);
        }
    }

    /// Takes out everything the object contributed; whether it had contributed anything.
    pub(crate) fn remove(&mut self, object: &Indexed) -> bool {
        let Some(keys) = self.by_object.remove(object) else {
            return false;
        };
        for key in keys {
            if let Some(objects) = self.by_key.get_mut(&key) {
                objects.remove(object);
                if objects.is_empty() {
                    self.by_key.remove(&key);
                }
            }
        }
        true
    }

    /// After a relist of `namespace` (`None`: of every namespace): exactly the listed objects'
    /// pairs there, the other namespaces' untouched.
    pub(crate) fn resync<P>(
        &mut self,
        namespace: Option<&str>,
        objects: impl IntoIterator<Item = (Indexed, P)>,
    ) where
        P: IntoIterator<Item = (K, V)>,
    {
        match namespace {
            None => {
                self.by_key.clear();
                self.by_object.clear();
            }
            Some(namespace) => {
                let stale: Vec<Indexed> = (self.by_object.keys())
                    .filter(|(ns, _)| ns.as_deref() == Some(namespace))
                    .cloned()
                    .collect();
                for object in &stale {
                    self.remove(object);
                }
            }
        }
        for (object, pairs) in objects {
            self.replace(object, pairs);
        }
    }

    /// The values under `key`, by object (namespace, then name), each object's in the order its
    /// indexing function gave them.
    pub(crate) fn get(&self, key: &K) -> impl Iterator<Item = &V> {
        self.by_key
            .get(key)
            .into_iter()
            .flat_map(|objects| objects.values().flatten())
    }

    /// Whether any object contributed to `key`.
    pub(crate) fn contains_key(&self, key: &K) -> bool {
        self.by_key.contains_key(key)
    }

    /// The keys with at least one value, in no particular order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &K> {
        self.by_key.keys()
    }

    /// How many keys have at least one value.
    pub(crate) fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Whether no object contributed anything.
    pub(crate) fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(name: &str) -> Indexed {
        (Some("ns".into()), name.into())
    }

    fn values(store: &Store<&'static str, u32>, key: &'static str) -> Vec<u32> {
        store.get(&key).copied().collect()
    }

    #[test]
    fn each_event_leaves_exactly_the_current_pairs() {
        // (step, object, its pairs now or None for a deletion, key "a" after, key "b" after)
        type Step = (
            &'static str,
            Option<Vec<(&'static str, u32)>>,
            Vec<u32>,
            Vec<u32>,
        );
        let steps: [Step; 7] = [
            ("x", Some(vec![("a", 1), ("b", 2)]), vec![1], vec![2]),
            ("w", Some(vec![("a", 3), ("a", 4)]), vec![3, 4, 1], vec![2]), // w sorts before x
            ("x", Some(vec![("b", 5)]), vec![3, 4], vec![5]),              // "a" taken back
            ("w", Some(vec![]), vec![], vec![5]),                          // no pairs: out
            ("y", None, vec![], vec![5]),                                  // unknown: no-op
            ("x", None, vec![], vec![]),
            ("z", Some(vec![("a", 6)]), vec![6], vec![]),
        ];
        let mut store = Store::default();
        for (i, (object, pairs, a, b)) in steps.into_iter().enumerate() {
            match pairs {
                Some(pairs) => store.replace(at(object), pairs),
                None => {
                    store.remove(&at(object));
                }
            }
            assert_eq!(
                (values(&store, "a"), values(&store, "b")),
                (a, b),
                "step {i}"
            );
            let keys =
                usize::from(store.contains_key(&"a")) + usize::from(store.contains_key(&"b"));
            assert_eq!(store.len(), keys, "step {i}: a key without values is gone");
        }
    }

    #[test]
    fn a_relist_replaces_everything() {
        let mut store = Store::default();
        store.replace(at("gone"), [("a", 1)]);
        store.replace(at("kept"), [("a", 2)]);
        store.resync(
            None,
            [(at("kept"), vec![("b", 3)]), (at("new"), vec![("a", 4)])],
        );
        assert_eq!(values(&store, "a"), [4]);
        assert_eq!(values(&store, "b"), [3]);
        assert!(!store.remove(&at("gone")), "a relist forgets the unlisted");
        assert!(store.remove(&at("kept")) && store.remove(&at("new")));
        assert!(store.is_empty());
    }

    #[test]
    fn a_relist_of_one_namespace_leaves_the_others() {
        let mut store = Store::default();
        let other = (Some("other".into()), "o".into());
        store.replace(at("gone"), [("a", 1)]);
        store.replace(other.clone(), [("a", 2)]);
        store.resync(Some("ns"), [(at("new"), vec![("a", 3)])]);
        assert_eq!(values(&store, "a"), [3, 2]);
        assert!(!store.remove(&at("gone")) && store.remove(&other));
    }

    #[test]
    fn cluster_scoped_objects_sort_before_namespaced_ones() {
        let mut store = Store::default();
        store.replace((Some("ns".into()), "a".into()), [("k", 1)]);
        store.replace((None, "z".into()), [("k", 2)]);
        assert_eq!(values(&store, "k"), [2, 1]);
        assert_eq!(store.keys().collect::<Vec<_>>(), [&"k"]);
    }
}
