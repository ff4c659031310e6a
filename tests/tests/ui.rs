//! trybuild UI tests of `#[daemon]`, `#[timer]`, `#[reconcile]` and the change handlers (`#[on_create]`,
//! `#[on_update]`, `#[on_delete]`, `#[on_resume]`): `tests/ui/fail` (one mistake per file, each
//! with its blessed `.stderr`) and `tests/ui/pass` (compiled and run).
//!
//! The snapshots are blessed with rustc 1.95, the toolchain CI uses. After an intended change
//! of a diagnostic: `TRYBUILD=overwrite cargo test -p kopf-tests --test ui`, then review
//! `git diff tests/ui`.

use std::path::Path;

fn cases(dir: &str) -> usize {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .filter(|entry| {
            entry
                .as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "rs"))
        })
        .count()
}

#[test]
fn ui() {
    // trybuild passes silently when a glob matches nothing: make sure the cases are there.
    assert!(
        cases("ui/fail") >= 100,
        "expected at least 100 compile_fail cases"
    );
    assert!(cases("ui/pass") >= 14, "expected the pass cases");
    let t = trybuild::TestCases::new();
    t.pass("ui/pass/*.rs");
    t.compile_fail("ui/fail/*.rs");
}
