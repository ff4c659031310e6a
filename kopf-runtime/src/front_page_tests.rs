//! The crate's front page lists every public item of the crate root: its "What is where"
//! section names each `pub use` and `pub mod` of `lib.rs` in backticks.
//!
//! ```text
//!  lib.rs ──┬── root items: `pub use` / `pub mod` lines at column 0 (not `#[doc(hidden)]`)
//!           └── the front page: `//!` lines, from "# What is where" to the next heading
//!                         │
//!                         ▼
//!            every root item named as `Name` there, else reported
//! ```

/// The names of the public items of a crate root: the `pub use` and `pub mod` items written at
/// column 0 (so not those inside inline modules), without those marked `#[doc(hidden)]`; a
/// `pub use` names the last segment of each path it imports (or what it renames it `as`).
fn root_items(source: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut hidden = false;
    let mut lines = source.lines();
    while let Some(line) = lines.next() {
        if line.starts_with("#[doc(hidden)]") {
            hidden = true;
            continue;
        }
        if line.starts_with("#[") || line.starts_with("//") || line.trim().is_empty() {
            continue;
        }
        let was_hidden = std::mem::take(&mut hidden);
        if let Some(rest) = line.strip_prefix("pub mod ") {
            let name = rest.trim_end_matches([';', '{', ' ']);
            if !was_hidden {
                names.push(name.to_owned());
            }
        } else if let Some(rest) = line.strip_prefix("pub use ") {
            let mut statement = rest.to_owned();
            while !statement.contains(';') {
                let Some(more) = lines.next() else { break };
                statement.push_str(more);
            }
            if !was_hidden {
                names.extend(imported(&statement));
            }
        }
    }
    names
}

/// The names a `use` statement (without its `pub use `) brings in.
fn imported(statement: &str) -> Vec<String> {
    let body = statement.trim().trim_end_matches(';');
    let list = match (body.find('{'), body.rfind('}')) {
        (Some(open), Some(close)) => &body[open + 1..close],
        _ => body,
    };
    list.split(',')
        .map(str::trim)
        .filter(|path| !path.is_empty())
        .map(|path| {
            let name = path.rsplit(" as ").next().unwrap_or(path);
            name.rsplit("::").next().unwrap_or(name).trim().to_owned()
        })
        .collect()
}

/// The text of the front page's "What is where" section (the `//!` lines up to the next
/// heading).
fn what_is_where(source: &str) -> String {
    let page = source
        .lines()
        .filter_map(|line| line.strip_prefix("//!"))
        .map(str::trim);
    page.skip_while(|line| *line != "# What is where")
        .skip(1)
        .take_while(|line| !line.starts_with("# "))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The root items of `source` its front page does not name in backticks.
fn unlisted(source: &str) -> Vec<String> {
    let listed = what_is_where(source);
    root_items(source)
        .into_iter()
        .filter(|name| !listed.contains(&format!("`{name}`")))
        .collect()
}

#[test]
fn the_front_page_lists_every_public_root_item() {
    let source = include_str!("lib.rs");
    let items = root_items(source);
    // The parse found the items at all: one of each kind of line, and none of an inline module.
    for name in [
        "engine",
        "ha",
        "stats",
        "prelude",
        "Operator",
        "daemon",
        "prometheus_client",
    ] {
        assert!(
            items.iter().any(|i| i == name),
            "{name} not found in {items:?}"
        );
    }
    assert!(
        !items.iter().any(|i| i == "__private" || i == "inventory"),
        "{items:?}"
    );
    assert_eq!(
        unlisted(source),
        Vec::<String>::new(),
        "not on the front page of lib.rs"
    );
}

#[test]
fn a_root_item_missing_from_the_front_page_is_reported() {
    let source = "\
//! # A crate
//!
//! # What is where
//!
//! - [`Listed`], and the module [`tools`].
//!
//! # Guides
//!
//! [`Unlisted`] is only named outside the section.
mod private;
pub mod tools;
#[cfg(feature = \"x\")]
pub use crate::private::{
    Listed,
    Unlisted,
};
pub use crate::private::Renamed as Alias;
#[doc(hidden)]
/// Hidden, documented after the attribute.
pub mod __hidden {
    pub use crate::private::Inner;
}
";
    assert_eq!(root_items(source), ["tools", "Listed", "Unlisted", "Alias"]);
    assert_eq!(unlisted(source), ["Unlisted", "Alias"]);
}
