//! Levels 1 and 2 of the testing guide: the handlers as functions, and as the registry holds
//! them. `#[daemon]` and `#[timer]` leave a function as it is, so a test calls it with the
//! values the operator would inject. No cluster, no waiting.

use std::sync::Arc;

use kopf_runtime::{ErrorKind, Registry};
use operator::crd::{Backup, BackupSpec};
use operator::handlers::{Copied, RETRY_UNCONFIGURED, back_up};

fn backup(bucket: &str, items: &[&str]) -> Arc<Backup> {
    let spec = BackupSpec {
        bucket: bucket.to_owned(),
        items: items.iter().map(|&item| item.to_owned()).collect(),
    };
    Arc::new(Backup::new("nightly", spec))
}

#[tokio::test]
async fn a_backup_copies_its_items_to_its_bucket() {
    let copied = back_up(backup("s3://b", &["orders", "customers"]))
        .await
        .unwrap();
    let expected = Copied {
        bucket: "s3://b".to_owned(),
        items: 2,
    };
    assert_eq!(copied, expected);
}

#[tokio::test]
async fn a_backup_without_a_bucket_fails_and_is_tried_again_later() {
    let err = back_up(backup("", &["orders"])).await.unwrap_err();
    let delay = RETRY_UNCONFIGURED;
    assert_eq!(err.kind(), ErrorKind::Temporary { delay });
    assert!(err.to_string().contains("nowhere to copy"), "{err}");
}

#[test]
fn the_operator_runs_the_daemon_and_the_timer() {
    let registry = Registry::from_inventory().expect("the handlers' ids are unique");
    let ids: Vec<&str> = registry.iter().map(|r| r.spec().id).collect();
    // Membership, not the exact list: a handler you add does not break this test.
    assert!(ids.contains(&"back_up"), "{ids:?}");
    assert!(ids.contains(&"watch_bucket"), "{ids:?}");
    // The reconcile handler is linked in with its feature, and only then.
    assert_eq!(
        ids.contains(&"index_items"),
        cfg!(feature = "reconcile"),
        "{ids:?}"
    );
}

/// The reconcile handler's child, as it applies it. (The handler itself takes `Children`, which
/// writes through the API server: `tests/cluster.rs` runs it.)
#[cfg(feature = "reconcile")]
#[test]
fn the_child_config_map_lists_the_bucket_and_the_items() {
    let backup = backup("s3://b", &["orders", "customers"]);
    let config_map = operator::reconcile::items_config_map(&backup);
    let data = config_map.data.unwrap_or_default();
    assert_eq!(data.get("bucket").map(String::as_str), Some("s3://b"));
    let items = data.get("items").map(String::as_str);
    assert_eq!(items, Some("orders\ncustomers"));
    // Its name, namespace and owner are `Children`'s to set.
    assert_eq!(config_map.metadata.name, None);
}

/// The admission handler, as a function: the `Backup`s it admits and the message it refuses
/// the others with. (The API server calling it over HTTPS: `tests/cluster.rs`.)
#[cfg(feature = "webhook")]
#[test]
fn the_webhook_admits_only_buckets_that_are_urls() {
    use operator::webhook::bucket_is_a_url;
    for good in ["s3://b", "gs://b/backups", "file:///var/backups"] {
        assert!(bucket_is_a_url(&backup(good, &[])).is_ok(), "{good}");
    }
    for bad in ["b", "s3://", "http://b", ""] {
        let refused = bucket_is_a_url(&backup(bad, &[])).expect_err(bad);
        assert!(
            refused.message().contains("spec.bucket must be a URL"),
            "{bad}"
        );
    }
}
