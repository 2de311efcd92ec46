//! `ktr-mcp` — the MCP stdio server Claude Code starts at every launch
//! (SPEC §11). It exposes the `thread_rebuild_*` tools to the model:
//! read-only checks (`doctor`, `dirty`, `plan`, `status`, `recall`,
//! `recall_get`) and the three requests that need a human's confirmation
//! word (`request`, `cancel`, `rollback_request`).
//! Nothing here switches anything: a request only records a pending
//! operation; the Stop hook starts the work after the reply has finished.
//!
//! Usage: `ktr-mcp [--config PATH] [--session ID] [--plugin]`. stdout
//! carries the protocol; logs go to stderr. With `--plugin` (how the Claude
//! Code plugin starts it, in every project) it offers no tools in a working
//! directory whose project ktr does not serve
//! ([`ktr_pipeline::plugin::serves_dir`]).

mod frames;
mod outputs;
mod served;
mod tools;

use std::path::PathBuf;
use std::process::ExitCode;

use rmcp::ServiceExt;
use rmcp::service::ServerInitializeError;

use ktr_base::ids::SessionId;

const PROGRAM: &str = "ktr-mcp";

const USAGE: &str = "usage: ktr-mcp [--config PATH] [--session ID] [--plugin]";

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => ktr_base::cli::usage_error(PROGRAM, &format!("{message}; {USAGE}")),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ktr-mcp: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(serve(args))
}

/// Answer MCP requests on stdin/stdout until the client closes stdin.
async fn serve(args: Args) -> ExitCode {
    let unserved = args.plugin
        && std::env::current_dir()
            .is_ok_and(|cwd| !ktr_pipeline::plugin::serves_dir(args.config.as_deref(), &cwd));
    if unserved {
        eprintln!("ktr-mcp: ktr does not serve this project; no tools");
        return serve_with(tools::Unserved).await;
    }
    let served = served::Session::detect(args.session);
    eprintln!("ktr-mcp: serving {}", served.describe());
    serve_with(tools::Server::new(args.config, served)).await
}

/// Run `server` on stdin/stdout until the client closes stdin.
async fn serve_with<S: rmcp::ServerHandler>(server: S) -> ExitCode {
    let (input, output, writer) = frames::spawn(tokio::io::stdin(), tokio::io::stdout());
    let running = match server.serve((input, output)).await {
        Ok(running) => running,
        // Stdin closed before `initialize`: nobody to serve, not a failure.
        Err(ServerInitializeError::ConnectionClosed(_)) => {
            let _ = writer.await;
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("ktr-mcp: cannot initialize: {e}");
            return ExitCode::from(1);
        }
    };
    let stopped = running.waiting().await;
    let _ = writer.await;
    match stopped {
        Ok(reason) => {
            eprintln!("ktr-mcp: stopped ({reason:?})");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ktr-mcp: server task failed: {e}");
            ExitCode::from(1)
        }
    }
}

/// The command line.
struct Args {
    config: Option<PathBuf>,
    session: Option<SessionId>,
    plugin: bool,
}

fn parse_args() -> Result<Args, String> {
    use lexopt::prelude::*;
    let mut args = Args {
        config: None,
        session: None,
        plugin: false,
    };
    let mut parser = lexopt::Parser::from_env();
    while let Some(arg) = parser.next().map_err(|e| e.to_string())? {
        match arg {
            Long("config") => args.config = Some(value(&mut parser)?.into()),
            Long("session") => {
                let id = value(&mut parser)?
                    .into_string()
                    .map_err(|_| "--session must be UTF-8".to_string())?;
                args.session = Some(SessionId::parse(&id).map_err(|e| e.message)?);
            }
            Long("plugin") => args.plugin = true,
            Short('h') | Long("help") => ktr_base::cli::help(
                PROGRAM,
                &format!(
                    "{PROGRAM}: the MCP stdio server exposing the thread_rebuild_* tools (SPEC §11 lists them).\n\n{USAGE}"
                ),
            ),
            Short('V') | Long("version") => ktr_base::cli::version(PROGRAM),
            other => return Err(other.unexpected().to_string()),
        }
    }
    Ok(args)
}

fn value(parser: &mut lexopt::Parser) -> Result<std::ffi::OsString, String> {
    parser.value().map_err(|e| e.to_string())
}
