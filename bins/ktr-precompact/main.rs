//! `ktr-precompact`: the compaction guard, Claude Code's `PreCompact` hook.
//!
//! Before Claude Code auto-compacts a session with a rebuild pending (or
//! with the standing approval `on_auto_compaction = "rebuild"`), it blocks
//! the compaction (`{"decision":"block",…}`) and starts the lossless
//! rebuild instead, when the rebuild's plan passes. `/compact` typed by
//! hand is never blocked. Always exits 0.
//!
//! Usage: `ktr-precompact [--config PATH]` with the hook JSON on stdin. The
//! logic is [`ktr_pipeline::stages::precompact`].

fn main() {
    ktr_pipeline::hook::main(
        "ktr-precompact",
        ktr_pipeline::stages::precompact::HELP,
        ktr_pipeline::stages::precompact::precompact,
    )
}
