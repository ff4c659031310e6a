//! Example operators built with kopf-runtime, and the types they share (the example CRD).
//!
//! The examples are binaries in `src/bin/` (each says what it shows and how to run it); this
//! library holds the example CRD ([`crd`]) and the command line they share ([`cli`]).
#![forbid(unsafe_code)]
#![doc(test(attr(deny(warnings))))]

pub mod cli;
pub mod crd;

/// The user documentation in `docs/`, compiled as doctests: every ```` ```rust ```` block of
/// these pages is built (and run, unless marked `no_run`) by `cargo test --doc -p
/// kopf-examples`, so the docs cannot drift from the API.
#[cfg(doctest)]
pub mod docs {
    macro_rules! pages {
        ($($name:ident => $file:literal),* $(,)?) => {$(
            #[doc = include_str!(concat!("../../", $file))]
            pub struct $name;
        )*};
    }
    pages! {
        Readme => "README.md",
        ExamplesReadme => "kopf-examples/README.md",
        DocsIndex => "docs/README.md",
        Quickstart => "docs/quickstart.md",
        Filters => "docs/filters.md",
        Errors => "docs/errors.md",
        Finalizers => "docs/finalizers.md",
        Patches => "docs/patches.md",
        EventsAndLogging => "docs/events-and-logging.md",
        Shutdown => "docs/shutdown.md",
        Deploying => "docs/deploying.md",
        Testing => "docs/testing.md",
        ComingFromKopf => "docs/coming-from-kopf.md",
        Architecture => "docs/architecture.md",
        Daemons => "docs/daemons.md",
        Timers => "docs/timers.md",
        ChangeHandlers => "docs/change-handlers.md",
        Operations => "docs/operations.md",
        Handlers => "docs/handlers.md",
        HighAvailability => "docs/high-availability.md",
        Reconcile => "docs/reconcile.md",
        Children => "docs/children.md",
        Indexes => "docs/indexes.md",
        Webhooks => "docs/webhooks.md",
        ComingFromKubeRs => "docs/coming-from-kube-rs.md",
    }
}

#[cfg(test)]
mod tests {
    /// Pages with Rust blocks that are not compiled here yet, each with the reason.
    const NOT_YET: &[(&str, &str)] = &[];

    #[test]
    fn every_docs_page_with_rust_blocks_is_compiled() -> std::io::Result<()> {
        let listed = include_str!("lib.rs");
        let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs");
        let mut missing = Vec::new();
        for entry in std::fs::read_dir(docs)? {
            let path = entry?.path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            if !name.ends_with(".md") || NOT_YET.iter().any(|(page, _)| *page == name) {
                continue;
            }
            let text = std::fs::read_to_string(&path)?;
            if text.contains("```rust") && !listed.contains(&format!("\"docs/{name}\"")) {
                missing.push(name.to_owned());
            }
        }
        assert!(
            missing.is_empty(),
            "docs pages with ```rust blocks that no doctest compiles: {missing:?}; add each to the \
             `pages!` list in kopf-examples/src/lib.rs"
        );
        Ok(())
    }
}
