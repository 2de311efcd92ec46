//! Recall over the lineage: which files a search reads — the
//! current session and every session it was rebuilt from, or every
//! transcript of the project — each through the one path rule, and `get`
//! of one hit by its id. The search itself is the engine's
//! (`ktr_engine::recall`).

pub mod archive;
mod ask;
mod everywhere;
mod folder;
pub mod hit_id;
pub mod lineage;
pub mod notice;
mod sources;
mod window;

pub use ask::{Answer, Ask, parse_turns, recall};
pub use everywhere::SessionInfo;
pub use hit_id::{HitFile, HitId, Part};
pub use lineage::{Link, Member, lineage};
pub use sources::{Lost, Scope, Searched, get, sources};
