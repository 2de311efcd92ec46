//! `ktr` — the admin CLI. Read-only checks first (`doctor`, `dirty`,
//! `plan`), then the commands with side effects, each behind its
//! confirmation word. One file per subcommand, each a small `run()`.

mod cli;
mod dirty;
mod doctor;
mod hooks;
mod out;
mod plan;

use std::process::ExitCode;

use cli::Command;

fn main() -> ExitCode {
    let result = cli::parse(std::env::args_os().skip(1)).and_then(|cmd| match cmd {
        Command::Help => {
            out::print(cli::HELP);
            Ok(0)
        }
        Command::Version => {
            out::print(&format!("ktr {}\n", env!("CARGO_PKG_VERSION")));
            Ok(0)
        }
        Command::Plan(args) => plan::run(&args),
        Command::Dirty(args) => dirty::run(&args),
        Command::Doctor(args) => doctor::run(&args),
        Command::Hooks(args) => hooks::run(&args),
    });
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("ktr: {e}");
            ExitCode::from(e.exit_code() as u8)
        }
    }
}
