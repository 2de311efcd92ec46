//! `ktr` — the admin CLI. Read-only checks first (`doctor`, `dirty`,
//! `plan`), then the commands with side effects, each behind its
//! confirmation word. One file per subcommand, each a small `run()`.

mod cancel;
mod cli;
mod config_get;
mod demo;
mod dirty;
mod doctor;
mod hooks;
mod ops;
mod out;
mod plan;
mod prune;
mod purge;
mod recall;
mod repair;
mod request;
mod rollback_request;
mod state;
mod status;

use std::process::ExitCode;

use cli::Command;

fn main() -> ExitCode {
    ktr_base::fsutil::ignore_file_size_signal();
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
        Command::Request(args) => request::run(&args),
        Command::Status(args) => status::run(&args),
        Command::Cancel(args) => cancel::run(&args),
        Command::RollbackRequest(args) => rollback_request::run(&args),
        Command::Ops(args) => ops::run(&args),
        Command::Prune(args) => prune::run(&args),
        Command::Purge(args) => purge::run(&args),
        Command::Repair(args) => repair::run(&args),
        Command::Demo(args) => demo::run(&args),
        Command::Hooks(args) => hooks::run(&args),
        Command::Config(args) => config_get::run(&args),
        Command::Recall(args) => recall::run(&args),
    });
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("ktr: {}", ktr_base::text::printable(&e.to_string()));
            ExitCode::from(e.exit_code() as u8)
        }
    }
}
