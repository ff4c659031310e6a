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
    }
}
