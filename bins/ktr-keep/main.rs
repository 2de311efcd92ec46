//! `ktr-keep` — the key recorder in the popup a tmux in-place switch opens
//! on each client showing the pane (SPEC §12): records the keys typed
//! while Claude Code loads the resumed session and replays them into the
//! pane when the switch is over.
//!
//! Usage: `ktr-keep --dir DIR --pane PANE [--socket SOCKET] [--max-seconds N]`
//! (run by `ktr-activate` / `ktr-rollback`). The logic is
//! [`ktr_pipeline::recorder`].

fn main() {
    ktr_pipeline::recorder::main();
}
