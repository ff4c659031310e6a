//! The operator's `--help` as users see it, against a committed snapshot
//! (`tests/snapshots/operator-help.txt`; `KOPF_BLESS=1` rewrites it after a deliberate change).
#![cfg(feature = "cli")]

use clap::CommandFactory as _;
use kopf_runtime::OperatorArgs;

#[test]
fn the_help_matches_the_snapshot() {
    let help = OperatorArgs::command()
        .name("my-operator")
        .term_width(100)
        .render_long_help()
        .to_string();
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/operator-help.txt");
    if std::env::var_os("KOPF_BLESS").is_some() {
        std::fs::write(&path, &help).expect("the snapshot can be written");
    }
    let snapshot = std::fs::read_to_string(&path).expect("the snapshot exists (KOPF_BLESS=1)");
    assert_eq!(
        help, snapshot,
        "--help changed: check it, then bless it with KOPF_BLESS=1"
    );
    // Environment values never show (a token in a variable would leak into logs).
    assert!(!help.contains("[env: KOPF_NAMESPACE="), "{help}");
    assert!(help.contains("[env: KOPF_NAMESPACE]"), "{help}");
}

#[test]
fn the_command_is_well_formed() {
    OperatorArgs::command().debug_assert();
}
