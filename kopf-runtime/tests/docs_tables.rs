//! The tables of the docs that list what the code offers, against the code: a type injectable
//! into handlers (an `impl Inject<K> for T` in `src/`) has a row in `docs/handlers.md`'s table
//! of injectables, and every row names such a type; every option of `OperatorBuilder` has a
//! flag in `docs/operations.md`'s table or is named among the options without one. (The flag
//! table against `OperatorArgs` is checked in `cli_help.rs`, the metrics table beside the
//! metrics' encoding.)

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, files: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).expect("the source folder is readable");
    for entry in entries {
        let path = entry.expect("a readable entry").path();
        if path.is_dir() {
            sources(&path, files);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
}

/// A type's last path segment without generics: `kube::Client` → `Client`, `Memo<T>` → `Memo`.
fn base(ty: &str) -> String {
    let ty = ty.split('<').next().unwrap_or_default();
    ty.rsplit("::").next().unwrap_or_default().trim().to_owned()
}

/// The types with an `impl … Inject<K> for T` in the crate's code (not in doc comments).
fn injectable_types() -> BTreeSet<String> {
    let mut files = Vec::new();
    sources(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    let mut types = BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("a readable source file");
        for line in text.lines().filter(|line| line.starts_with("impl")) {
            if let Some((_, ty)) = line.split_once(" Inject<K> for ") {
                types.insert(base(ty.split_whitespace().next().unwrap_or_default()));
            }
        }
    }
    types
}

/// The types in the first column of `docs/handlers.md`'s table of injectables.
fn documented_injectables() -> BTreeSet<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/handlers.md");
    let page = std::fs::read_to_string(path).expect("docs/handlers.md is readable");
    (page.lines())
        .skip_while(|line| !line.starts_with("| type | what | blocking `fn`? |"))
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .filter_map(|row| row.split('`').nth(1))
        .map(base)
        .collect()
}

#[test]
fn the_injectables_table_lists_every_injectable_type() {
    let code = injectable_types();
    let documented = documented_injectables();
    assert!(
        code.len() >= 15,
        "the impls are found in the code: {code:?}"
    );
    let missing: Vec<_> = code.difference(&documented).collect();
    let stale: Vec<_> = documented.difference(&code).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "docs/handlers.md's injectables table drifted from the `Inject` impls: types without a \
         row {missing:?}, rows without an impl {stale:?}"
    );
}

/// The `pub fn` options of `OperatorBuilder` (`src/operator/builder.rs` and `builder/`).
fn builder_options() -> BTreeSet<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/operator");
    let mut files = vec![dir.join("builder.rs")];
    sources(&dir.join("builder"), &mut files);
    let mut options = BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("a readable source file");
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("    pub fn ") {
                let name = rest.split(['(', '<']).next().unwrap_or_default();
                options.insert(name.to_owned());
            }
        }
    }
    options
}

/// What `docs/operations.md` says of the builder's options: the long flags of its flag table,
/// and the options its paragraph "Builder options without a flag" names.
fn documented_options(page: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let flags = (page.lines())
        .skip_while(|line| !line.starts_with("| flag | environment | meaning |"))
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .filter_map(|row| row.split('|').nth(1))
        .flat_map(|cell| cell.split(['`', ',', ' ']))
        .filter_map(|word| word.strip_prefix("--"))
        .map(str::to_owned)
        .collect();
    let paragraph: Vec<&str> = (page.lines())
        .skip_while(|line| !line.starts_with("Builder options without a flag"))
        .take_while(|line| !line.is_empty())
        .collect();
    let without = (paragraph.join(" ").split('`').skip(1).step_by(2))
        .map(str::to_owned)
        .collect();
    (flags, without)
}

#[test]
fn every_builder_option_has_a_flag_or_is_said_to_have_none() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operations.md");
    let page = std::fs::read_to_string(path).expect("docs/operations.md is readable");
    let (flags, without) = documented_options(&page);
    // Where the flag is not the option's name with dashes.
    let flag_of = |option: &str| match option {
        "namespaces" => "namespace".to_owned(),
        "health_addr" => "health".to_owned(),
        "metrics" => "no-metrics".to_owned(),
        other => other.replace('_', "-"),
    };
    let options = builder_options();
    assert!(options.len() >= 25, "the options are found: {options:?}");
    let undocumented: Vec<_> = (options.iter())
        .filter(|option| *option != "args")
        .filter(|option| !flags.contains(&flag_of(option)) && !without.contains(*option))
        .collect();
    let stale: Vec<_> = without.difference(&options).collect();
    assert!(
        undocumented.is_empty() && stale.is_empty(),
        "docs/operations.md drifted from OperatorBuilder: options with neither a flag nor a \
         place among those without one {undocumented:?}; named as options but not on the \
         builder {stale:?}"
    );
}
