//! `ktr-statusline`: Claude Code's `statusLine` command (issue 8 §4).
//!
//! Prints one line such as `Opus · work · ktr 78% · rebuild→4%` for the
//! JSON Claude Code pipes it, and remembers the session's window size.
//! `--segment` prints only ktr's part; `--color` colors it unless
//! `NO_COLOR` is set. Always exits 0.
//!
//! Usage: `ktr-statusline [--config PATH] [--segment] [--color]`. The logic
//! is [`ktr::pipeline::stages::statusline`].

fn main() {
    ktr::pipeline::hook::main_with_flags(
        "ktr-statusline",
        ktr::pipeline::stages::statusline::HELP,
        ktr::pipeline::stages::statusline::FLAGS,
        ktr::pipeline::stages::statusline::statusline,
    )
}
