//! `ktr-ack`: the Claude Code `SessionStart` hook (matcher `resume`, SPEC §12).
//!
//! When Claude Code resumes the candidate session of an activating or
//! activated operation, this records Claude Code's own receipt (with the
//! measured `context_tokens` of the new window) in the operation and in
//! `artifacts/<id>/ack.json`. It always exits 0 and prints
//! `{"suppressOutput":true}`; problems go to stderr.
//!
//! Usage: `ktr-ack [--config PATH]` with the hook JSON on stdin. The logic
//! is [`ktr_pipeline::stages::ack`].

fn main() {
    ktr_pipeline::hook::main(
        "ktr-ack",
        ktr_pipeline::stages::ack::HELP,
        ktr_pipeline::stages::ack::ack,
    )
}
