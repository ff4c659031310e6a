//! The typed handler layer: what `#[daemon]` and `#[timer]` generate code against. It turns a
//! user's function into an [`ErasedHandler`](crate::engine::ErasedHandler) (injecting parameters
//! by type, converting return values), and collects all handlers of the binary at start-up.

pub mod admission;
mod change;
mod child_error;
mod children;
pub(crate) mod echoes;
mod index;
mod inject;
mod live;
mod memo;
mod patch;
mod prepared;
mod reconcile;
mod registry;
mod resource;
mod status;
mod typed;

pub use change::{FieldChange, Old, decode_probe};
pub use child_error::ChildError;
pub use children::Children;
pub use echoes::{ChildWrites, Echoes};
pub(crate) use index::ErasedIndex;
pub use index::{Index, IndexDef, IndexPair, IndexRegistration, index_pairs};
pub use inject::{
    BlockingSafe, Data, Inject, Occurrence, Retry, Runtime, Started, assert_blocking_safe,
};
pub use live::Live;
pub use memo::Memo;
pub use patch::Patch;
pub use prepared::{ChangeHandlerKind, DaemonKind, HandlerReturn, PreparedCall, TimerKind};
pub use reconcile::{CleanupFn, ReconcileReturn, kind_ref, map_related, start_cleanup};
pub use registry::{Registration, Registry, RegistryError};
pub use resource::{ScopeKind, StaticResource};
pub use status::SchemalessStatus;
pub use typed::{TypedHandler, erase};
