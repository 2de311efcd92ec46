//! `ktr-statusline`: Claude Code's `statusLine` command.
//!
//! Prints one line such as `Opus · work · ktr 78% of 1M · rebuild→4%` for the
//! JSON Claude Code pipes it, and remembers the session's window size.
//! `--segment` prints only ktr's part; `--color` colors it unless
//! `NO_COLOR` is set. Always exits 0.
//!
//! Usage: `ktr-statusline [--config PATH] [--segment] [--color]`. The logic
//! is [`ktr_pipeline::stages::statusline`].

fn main() {
    ktr_pipeline::hook::main_with_flags(
        "ktr-statusline",
        ktr_pipeline::stages::statusline::HELP,
        ktr_pipeline::stages::statusline::FLAGS,
        ktr_pipeline::stages::statusline::statusline,
    )
}
