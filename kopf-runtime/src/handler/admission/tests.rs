use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::DynamicObject;
use kube::core::admission::AdmissionReview;
use serde_json::json;

use super::*;

fn request(operation: &str, object: &serde_json::Value, old: &serde_json::Value) -> Request {
    let review = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u1", "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "name": "cm", "namespace": "ns", "operation": operation,
            "userInfo": {"username": "alice"}, "object": object, "oldObject": old,
            "dryRun": true,
        }
    });
    let review: AdmissionReview<DynamicObject> = serde_json::from_value(review).unwrap();
    Request::new(review.request.unwrap())
}

fn map(data: &serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": data})
}

#[test]
fn an_update_is_decoded_with_the_old_object_and_the_review() {
    let request = request("UPDATE", &map(&json!({"a": "2"})), &map(&json!({"a": "1"})));
    let (object, review) = request.decode::<ConfigMap>().unwrap();
    assert_eq!(object.data.unwrap()["a"], "2");
    assert_eq!(review.old.unwrap().data.as_ref().unwrap()["a"], "1");
    assert_eq!(review.operation, Operation::Update);
    assert_eq!(review.namespace.as_deref(), Some("ns"));
    assert_eq!(review.user.username.as_deref(), Some("alice"));
    assert!(review.dry_run);
}

#[test]
fn a_delete_gives_the_object_as_it_was_and_no_old_one() {
    let request = request("DELETE", &json!(null), &map(&json!({"a": "1"})));
    let (object, review) = request.decode::<ConfigMap>().unwrap();
    assert_eq!(object.data.unwrap()["a"], "1");
    assert!(review.old.is_none());
    assert_eq!(review.operation, Operation::Delete);
}

#[test]
fn an_object_of_the_wrong_shape_is_refused_naming_it_and_the_type() {
    let request = request("CREATE", &map(&json!(["not", "a", "map"])), &json!(null));
    let verdict = request.decode::<ConfigMap>().unwrap_err();
    assert!(!verdict.allowed);
    assert_eq!(verdict.code, 400);
    assert!(
        verdict.message.contains("configmaps ns/cm"),
        "{}",
        verdict.message
    );
    assert!(verdict.message.contains("ConfigMap"), "{}", verdict.message);
}

#[test]
fn a_create_without_an_object_is_refused() {
    let request = request("CREATE", &json!(null), &json!(null));
    let verdict = request.decode::<ConfigMap>().unwrap_err();
    assert!(
        verdict.message.contains("has no object"),
        "{}",
        verdict.message
    );
}

#[test]
fn a_rejection_keeps_its_message_and_code_and_warnings_pass_through() {
    let no = validated(Err::<(), _>(Rejection::new("bucket is empty").code(422)));
    assert_eq!(
        (no.allowed, no.code, no.message.as_str()),
        (false, 422, "bucket is empty")
    );
    let warned = validated(Ok::<_, Rejection>(Warnings::from_iter(["careful"])));
    assert!(warned.allowed);
    assert_eq!(warned.warnings, ["careful"]);
    assert_eq!(
        Rejection::new("x").code(99).status(),
        400,
        "codes are kept in 400–599"
    );
}

#[test]
fn a_mutation_becomes_the_patch_of_what_the_handler_changed_only() {
    let request = request("CREATE", &map(&json!({"a": "1"})), &json!(null));
    let (mut object, _) = request.decode::<ConfigMap>().unwrap();
    let before = snapshot(&object).unwrap();
    object
        .metadata
        .labels
        .get_or_insert_default()
        .insert("team".into(), "x".into());
    let verdict = mutated(&before, &object, ());
    let patch = serde_json::to_value(verdict.patch.unwrap()).unwrap();
    assert_eq!(
        patch,
        json!([{"op": "add", "path": "/metadata/labels", "value": {"team": "x"}}])
    );
    let unchanged = mutated(
        &before,
        &serde_json::from_value::<ConfigMap>(before.clone()).unwrap(),
        (),
    );
    assert!(unchanged.allowed && unchanged.patch.is_none());
    let refused = mutated(&before, &object, Err::<(), _>(Rejection::new("no")));
    assert!(!refused.allowed && refused.patch.is_none());
}
