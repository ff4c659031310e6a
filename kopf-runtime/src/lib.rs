//! # kopf-runtime
//!
//! A Kubernetes operator framework centred on per-resource **daemons** and **timers**, in the
//! spirit of Python's [kopf](https://kopf.readthedocs.io).
#![doc(test(attr(deny(warnings))))]
#![forbid(unsafe_code)]

mod core;

pub use crate::core::effects::Effect;
pub use crate::core::handler::{Call, ErasedHandler, Invocation, MatchError, Output, Services};
pub use crate::core::object::{ObjectError, ObjectRef, ObjectState};
pub use crate::core::outcome::{BoxError, ErrorKind, HandlerError, HandlerResult};
pub use crate::core::spec::{
    ErrorsMode, FieldFilter, Filters, HandlerKind, HandlerSpec, JsonLiteral, MetaFilter,
    SourceLocation, TimerSchedule, ValueFilter,
};
pub use crate::core::stop::{StopReason, Stopper};
pub use crate::core::resource::ResourceInfo;
pub use crate::core::sink::{PatchError, PatchSink, PatchSinkHandle};
