//! Which macro is expanding: the one value every stage of the pipeline is given. A leaf: it
//! imports nothing of the crate.

/// Which macro is expanding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Daemon,
    Timer,
    Create,
    Update,
    Delete,
    Resume,
    Reconcile,
}

impl Kind {
    /// The attribute as the user writes it, for messages: `#[daemon]`, `#[on_update]`...
    pub(crate) fn attr(self) -> &'static str {
        match self {
            Self::Daemon => "#[daemon]",
            Self::Timer => "#[timer]",
            Self::Create => "#[on_create]",
            Self::Update => "#[on_update]",
            Self::Delete => "#[on_delete]",
            Self::Resume => "#[on_resume]",
            Self::Reconcile => "#[reconcile]",
        }
    }

    /// Whether this is a change handler (`#[on_create]`, `#[on_update]`, `#[on_delete]`,
    /// `#[on_resume]`): called once per change of the object rather than kept running.
    pub(crate) fn is_change(self) -> bool {
        !matches!(self, Self::Daemon | Self::Timer | Self::Reconcile)
    }
}
