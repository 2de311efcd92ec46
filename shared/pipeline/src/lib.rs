//! The pipeline: acts on a plan. The operation file and its state machine
//! ([`operation`]), the stages and hooks that move it ([`stages`]), what
//! gets switched ([`targets`]), the process control they share
//! ([`process`]) and what the hooks remember about the window ([`window_cache`]).

pub mod binding;
pub(crate) mod gate;
pub mod hook;
pub mod operation;
pub mod pane;
pub mod plugin;
pub mod process;
pub mod prompt_back;
pub mod recall;
pub mod recorder;
pub mod stages;
pub mod targets;
pub mod title;
pub mod window_cache;
