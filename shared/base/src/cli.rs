//! What every ktr executable does with the words all of them share and with
//! its stdout: `--help` and `--version` print on stdout and exit 0; a usage
//! error names the program once on stderr and exits 2; a closed stdout (the
//! reader went away, as in `ktr plan --show-candidate | head`) ends the
//! program quietly with 0, as ripgrep does.

use std::io::Write;

/// The version every executable reports (the workspace's).
pub(crate) const VERSION: &str = env!("CARGO_PKG_VERSION");

/// How an executable was called: for its help, its version, or to run with
/// the parsed arguments `T`.
#[derive(Debug, PartialEq, Eq)]
pub enum Call<T> {
    Help,
    Version,
    Run(T),
}

/// Write `text` to stdout and flush it. A closed stdout exits 0 quietly;
/// another write error is said on stderr and exits 1.
pub fn print(program: &str, text: &str) {
    let mut stdout = std::io::stdout().lock();
    written(
        program,
        stdout
            .write_all(text.as_bytes())
            .and_then(|()| stdout.flush()),
    );
}

/// [`print`] with a newline after `line`.
pub fn print_line(program: &str, line: &str) {
    print(program, &format!("{line}\n"));
}

/// After a write to stdout: exit 0 quietly if the reader went away, say
/// what failed and exit 1 on another error; nothing when it was written.
pub fn written(program: &str, result: std::io::Result<()>) {
    if let Err(e) = result {
        if is_closed_pipe(&e) {
            std::process::exit(0);
        }
        let _ = writeln!(std::io::stderr(), "{program}: cannot write output: {e}");
        std::process::exit(1);
    }
}

/// Whether a write failed because the reader of stdout went away.
pub fn is_closed_pipe(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::BrokenPipe
}

/// `--help`: `help` on stdout, exit 0.
pub fn help(program: &str, help: &str) -> ! {
    print_line(program, help.trim_end_matches('\n'));
    std::process::exit(0)
}

/// `--version`: `<program> <version>` on stdout, exit 0.
pub fn version(program: &str) -> ! {
    print_line(program, &format!("{program} {VERSION}"));
    std::process::exit(0)
}

/// A usage error: `<program>: <message>` on stderr, exit 2.
pub fn usage_error(program: &str, message: &str) -> ! {
    let _ = writeln!(std::io::stderr(), "{program}: {message}");
    std::process::exit(2)
}
