//! The operator's `--help` as users see it, against a committed snapshot
//! (`tests/snapshots/operator-help.txt`; `KOPF_BLESS=1` rewrites it after a deliberate change).
#![cfg(feature = "cli")]

use std::collections::BTreeSet;

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

/// The flag table of `docs/operations.md` ("Command line"): every row's flags and variables.
fn documented_flags() -> (BTreeSet<String>, BTreeSet<String>) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operations.md");
    let page = std::fs::read_to_string(path).expect("docs/operations.md is readable");
    let rows = (page.lines())
        .skip_while(|line| !line.starts_with("| flag | environment | meaning |"))
        .skip(2)
        .take_while(|line| line.starts_with('|'));
    let (mut flags, mut vars) = (BTreeSet::new(), BTreeSet::new());
    for row in rows {
        let row = row.replace("\\|", "/"); // `human\|json`: one cell
        let cells: Vec<&str> = row.split('|').skip(1).collect();
        let words = |cell: &str| -> Vec<String> {
            (cell.split(['`', ',', ' ', '|', '\\']))
                .map(|word| word.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '-'))
                .map(str::to_owned)
                .collect()
        };
        let first = cells.first().copied().unwrap_or_default();
        flags.extend(words(first).into_iter().filter(|w| w.starts_with("--")));
        let second = cells.get(1).copied().unwrap_or_default();
        let variable = |w: &String| {
            w.len() > 1
                && (w.chars()).all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        };
        vars.extend(words(second).into_iter().filter(variable));
    }
    (flags, vars)
}

#[test]
fn the_flag_table_of_the_docs_lists_every_flag_and_variable() {
    let command = OperatorArgs::command();
    let flags: BTreeSet<String> = (command.get_arguments())
        .filter_map(|arg| arg.get_long())
        .map(|long| format!("--{long}"))
        .collect();
    let vars: BTreeSet<String> = (command.get_arguments())
        .filter_map(|arg| arg.get_env())
        .map(|var| var.to_string_lossy().into_owned())
        .collect();
    let (documented, documented_vars) = documented_flags();
    let missing: Vec<_> = flags.difference(&documented).collect();
    let stale: Vec<_> = documented.difference(&flags).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "docs/operations.md's flag table drifted from OperatorArgs: flags without a row \
         {missing:?}, rows without a flag {stale:?}"
    );
    let missing: Vec<_> = vars.difference(&documented_vars).collect();
    let unknown: Vec<_> = documented_vars.difference(&vars).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "docs/operations.md's flag table drifted from OperatorArgs: variables without a row \
         {missing:?}, variables OperatorArgs does not read {unknown:?}"
    );
}
