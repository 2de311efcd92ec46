//! `ktr-prompt`: the Claude Code `UserPromptSubmit` hook (SPEC §10, the turn
//! gate). With nothing in flight it reads one small file and lets the
//! prompt through; during a switch it refuses the prompt with a one-line
//! reason.
//!
//! Usage: `ktr-prompt [--config PATH]` with the hook JSON on stdin. The
//! logic is [`ktr_pipeline::stages::prompt`].

fn main() {
    ktr_pipeline::hook::main(
        "ktr-prompt",
        ktr_pipeline::stages::prompt::HELP,
        ktr_pipeline::stages::prompt::prompt,
    )
}
