//! The object pipeline every write goes through, whatever the client or protocol:
//! decode → defaults → server metadata → validation → admission → persist → after-commit.
//! Admission comes after validation so that what a hook reserves (a ClusterIP) is only
//! reserved for an object that will be written. HTTP handlers are
//! thin adapters over it (they turn requests into [`Write`]s and results into responses);
//! the garbage collector and termination controllers call it directly. Per-resource steps
//! are [`hooks`] registered by group and resource (see [`crate::admission`]). Each kind of
//! write has its own file (`create`, `apply`, `modify`, `scale`, `delete`), built from the
//! steps they share (`steps`); every one commits through [`commit`].

mod apply;
pub mod commit;
mod create;
pub mod decode;
mod delete;
pub mod hooks;
mod modify;
pub mod params;
pub mod reserved;
mod scale;
mod steps;
pub mod stored;

pub use apply::apply;
pub use create::create;
pub use decode::{check_decoded, decode_body};
pub use delete::delete;
pub use modify::{Change, apply_conflict, apply_patch, modify};
pub use params::{FieldValidation, Write, parse_json};
pub use scale::{Patcher, scale_of, update_scale};
pub use steps::{Ownership, Target, Written, invalid, ownership_schema};
