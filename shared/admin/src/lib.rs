//! For humans and installers: the health report ([`doctor`]), cleaning up
//! ([`prune`]), removing what uninstalling leaves ([`purge`]), the status
//! view ([`report`]), every session's operation in flight ([`sessions`])
//! and Claude Code's settings.json ([`settings`]).

pub mod doctor;
pub mod prune;
pub mod purge;
pub mod report;
pub(crate) mod retention;
pub mod sessions;
pub mod settings;
