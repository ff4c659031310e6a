//! `#[index]`: the shapes of collection it takes, the type it names, and its registration.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kopf_runtime::engine::IndexRegistration;
use kopf_runtime::{Index, IndexDef, index};

#[index]
fn by_node(pod: Arc<Pod>) -> Option<(String, String)> {
    Some((pod.spec.as_ref()?.node_name.clone()?, pod.metadata.name.clone()?))
}

/// Every label, as (label, value) → the object's name.
#[index]
pub fn by_label(config: Arc<ConfigMap>) -> Vec<((String, String), String)> {
    let name = config.metadata.name.clone().unwrap_or_default();
    (config.metadata.labels.clone().unwrap_or_default().into_iter())
        .map(|label| (label, name.clone()))
        .collect()
}

#[index]
fn data_sizes(config: Arc<ConfigMap>) -> BTreeMap<String, usize> {
    (config.data.clone().unwrap_or_default().into_iter())
        .map(|(key, value)| (key, value.len()))
        .collect()
}

fn main() {
    // The function keeps its name and works as written.
    assert_eq!(by_node(Arc::new(Pod::default())), None);
    assert_eq!(<by_node as IndexDef>::ID, "by_node");
    let mut config = ConfigMap::default();
    config.metadata.name = Some("c".into());
    config.data = Some(BTreeMap::from([("k".into(), "four".into())]));
    assert_eq!(<data_sizes as IndexDef>::pairs(Arc::new(config)), [("k".to_owned(), 4)]);
    // Key and value types come from the collection.
    let _: fn(&Index<by_label>) -> Vec<String> = |i| i.get(&("app".into(), "web".into()));
    // Registered at link time, each once.
    let ids: Vec<_> = inventory_ids();
    assert_eq!(ids, ["by_label", "by_node", "data_sizes"]);
}

fn inventory_ids() -> Vec<&'static str> {
    let mut ids: Vec<_> = kopf_runtime::__private::inventory::iter::<IndexRegistration>()
        .map(IndexRegistration::id)
        .collect();
    ids.sort_unstable();
    ids
}
