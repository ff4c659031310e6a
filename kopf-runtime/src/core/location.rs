//! Where a handler was defined: a leaf, so that what orders or reports handlers by their
//! definition needs nothing else of the spec.

/// Where a handler was defined (for duplicate-id and failure messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceLocation {
    /// The source file, as `file!()` gives it.
    pub file: &'static str,
    /// The line of the handler function.
    pub line: u32,
    /// The column of the handler function.
    pub column: u32,
}

impl SourceLocation {
    /// Where a hand-built handler (`HandlerSpec::new`) is "defined".
    pub(crate) const UNKNOWN: Self = Self {
        file: "<unknown>",
        line: 0,
        column: 0,
    };
}

impl std::fmt::Display for SourceLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}
