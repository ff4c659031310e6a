//! What the supervisor keeps of an object, measured with a counting allocator (dhat's): a watched object
//! that no handler matches keeps only its identity, not its body; a matched one keeps its body
//! for its handlers, as compact text rather than a tree. One test only, so that nothing else
//! allocates meanwhile.

mod common;

use common::*;
use serde_json::{Map, Value, json};

#[global_allocator]
static ALLOCATOR: dhat::Alloc = dhat::Alloc;

/// The bytes allocated and not yet freed.
fn live_bytes() -> isize {
    isize::try_from(dhat::HeapStats::get().curr_bytes).unwrap_or(isize::MAX)
}

const OBJECTS: usize = 2000;
/// The size of each object's spec.
const SPEC_BYTES: usize = 8 * 1024;

/// A spec of one long string.
fn long_string() -> Value {
    json!({ "payload": "x".repeat(SPEC_BYTES) })
}

/// A spec of many short fields, in maps: what a tree keeps worst.
fn many_fields() -> Value {
    let fields = |n: usize| {
        (0..n)
            .map(|i| (format!("f{i}"), json!(i)))
            .collect::<Map<_, _>>()
    };
    json!({ "a": fields(40), "b": {"c": fields(40), "d": fields(40)} })
}

/// The bytes per object that holding `OBJECTS` such objects as they arrive (trees) takes: what
/// the supervisor would keep without compacting them.
fn as_trees(spec: &Value) -> isize {
    let before = live_bytes();
    let held: Vec<_> = (0..OBJECTS)
        .map(|i| Obj::new(&format!("t{i}")).spec(spec.clone()).build())
        .collect();
    let per_object = (live_bytes() - before) / OBJECTS as isize;
    drop(held);
    per_object
}

/// Observes `OBJECTS` objects (labelled `run=<run>`) and returns the bytes kept per object.
async fn kept_per_object(h: &Harness, prefix: &str, run: &str, spec: Value) -> isize {
    h.spin().await;
    let before = live_bytes();
    let objects: Vec<_> = (0..OBJECTS)
        .map(|i| {
            Obj::new(&format!("{prefix}{i}"))
                .label("run", run)
                .spec(spec.clone())
                .build()
        })
        .collect();
    drop(spec);
    for object in objects {
        h.sup.observe(object);
    }
    h.spin().await;
    (live_bytes() - before) / OBJECTS as isize
}

#[tokio::test(start_paused = true)]
async fn an_unmatched_object_keeps_only_its_identity() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let waiting = daemon("d").when_run_label().run(|ctx| async move {
        ctx.until_stopped().await;
        ok()
    });
    let h = Harness::new(vec![waiting]);
    let unmatched = kept_per_object(&h, "u", "no", long_string()).await;
    let matched = kept_per_object(&h, "m", "yes", long_string()).await;
    let fields = kept_per_object(&h, "f", "yes", many_fields()).await;
    let trees = as_trees(&many_fields());
    eprintln!(
        "bytes kept per object: unmatched {unmatched}, matched {matched} (with a running \
         daemon); with many short fields {fields}, as trees alone {trees}"
    );
    // The body (a spec of 8 KiB) is not kept for an unmatched object; the identity (as text),
    // the entry and the effect the harness records are.
    assert!(
        unmatched < 2048,
        "an unmatched object keeps {unmatched} bytes"
    );
    // Positive control: a matched object keeps its body (and a daemon's task).
    assert!(
        matched > SPEC_BYTES as isize,
        "a matched object keeps {matched} bytes"
    );
    // A matched object's body is kept as text: for many short fields, less than half what its
    // tree alone takes (the control: the same objects held as they arrive), daemon and all.
    assert!(
        fields < trees / 2,
        "an object of many short fields keeps {fields} bytes; its tree alone is {trees}"
    );
    assert_eq!(h.stats().objects, 3 * OBJECTS);
}
