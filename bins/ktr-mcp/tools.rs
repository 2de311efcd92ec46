//! The tools (SPEC §11, and recall), each a thin call into the library. Every
//! failure reaches the model as a tool result with `isError: true` and the
//! library's one-line message; successes are structured JSON.

use std::path::PathBuf;
use std::sync::Arc;

use rmcp::handler::server::wrapper::{Json, Parameters};
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::schemars::JsonSchema;
use rmcp::{ServerHandler, tool, tool_handler, tool_router};
use serde::Deserialize;

use ktr_admin::doctor;
use ktr_admin::report::StatusView;
use ktr_base::config::Config;
use ktr_base::ids::OperationId;
use ktr_base::{Error, Result};
use ktr_engine::plan;
use ktr_pipeline::operation::Store;
use ktr_pipeline::targets::Target;
use ktr_pipeline::window_cache;

use crate::outputs::{Changed, Dirty, Doctor, PlanView, RecallPage, Recalled, Status};
use crate::served::Session;

/// The server: which config to load and which session it serves.
#[derive(Clone)]
pub struct Server {
    config: Option<PathBuf>,
    served: Arc<Session>,
}

/// `thread_rebuild_dirty` / `thread_rebuild_plan` parameters.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct TranscriptArgs {
    /// A `*.jsonl` transcript directly inside `project_dir`. Leave it out to use the session being served (else the newest transcript in `project_dir`).
    #[serde(default)]
    pub transcript_path: Option<String>,
}

/// `thread_rebuild_request` parameters.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct RequestArgs {
    /// Why the session should be rebuilt, in a few words (recorded in the operation).
    pub reason: String,
    /// Exactly `REBUILD` — pass it only after the human explicitly agreed to the rebuild.
    pub confirmation: String,
}

/// `thread_rebuild_status` parameters.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct StatusArgs {
    /// The operation to show. Leave it out for the most recent one.
    #[serde(default)]
    pub operation_id: Option<String>,
}

/// `thread_rebuild_cancel` parameters.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct CancelArgs {
    /// The pending operation to cancel (from `thread_rebuild_request` or `thread_rebuild_status`).
    pub operation_id: String,
    /// Exactly `CANCEL` — pass it only after the human explicitly asked to cancel.
    pub confirmation: String,
}

/// `thread_rebuild_rollback_request` parameters.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct RollbackArgs {
    /// The activated operation to switch back (from `thread_rebuild_status`).
    pub operation_id: String,
    /// Exactly `ROLLBACK` — pass it only after the human explicitly asked to go back.
    pub confirmation: String,
}

/// `thread_rebuild_recall` parameters.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct RecallArgs {
    /// What to find: a literal (ASCII letters in either case, other scripts exactly), or a regex with regex=true.
    pub query: String,
    /// Treat the query as a regex (Rust syntax).
    #[serde(default)]
    pub regex: bool,
    /// Only these kinds: `user`, `assistant`, `tool_use`, `tool_result`, `thinking`, `injection` (or `attachment`), `image`.
    #[serde(default)]
    pub kinds: Vec<String>,
    /// Only this tool's calls and results (`Bash`, `Read`, `mcp__server__tool`).
    #[serde(default)]
    pub tool: Option<String>,
    /// Only these sessions (ids or their first characters, as hits show them).
    #[serde(default)]
    pub sessions: Vec<String>,
    /// Only records at or after this time (2026-05-01 or 2026-05-01T12:00:00Z, UTC).
    #[serde(default)]
    pub since: Option<String>,
    /// Only records at or before this time.
    #[serde(default)]
    pub until: Option<String>,
    /// Only these turns: 5, 5-9, 5- or -9.
    #[serde(default)]
    pub turns: Option<String>,
    /// Hits to return (default 10, at most 30).
    #[serde(default)]
    pub limit: Option<u32>,
    /// Read everything and count every match (slower).
    #[serde(default)]
    pub count: bool,
    /// Also list each copy of text your window already holds as a hit (by default such matches are folded into `carried` and do not use the limit).
    #[serde(default)]
    pub all_copies: bool,
    /// Records to show before and after each hit (at most 20).
    #[serde(default)]
    pub context: u32,
    /// Only tool calls whose input names this path (a file, a folder), and their results.
    #[serde(default)]
    pub file: Option<String>,
    /// With scope all: only these projects (their working folders, or folder names under ~/.claude/projects).
    #[serde(default)]
    pub projects: Vec<String>,
    /// lineage (default: this session and every session it was rebuilt from), project (every transcript of the project) or all (every project's sessions and ktr's backups of them, each with the line that resumes it).
    #[serde(default)]
    pub scope: Option<String>,
}

/// `thread_rebuild_recall_get` parameters.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct RecallGetArgs {
    /// A hit's id, exactly as `thread_rebuild_recall` returned it.
    pub id: String,
    /// The page (from 0; each at most 16 KB).
    #[serde(default)]
    pub page: u32,
}

/// The most hits one MCP answer holds (Claude Code truncates large tool results).
const MCP_RECALL_LIMIT: u32 = 30;

/// A tool's answer: its typed output (structured content, advertised as
/// the tool's `outputSchema`), or the library's one-line message as a
/// result with `isError: true`. The tools spell the type out:
/// `#[tool]` finds the output schema by reading `Result<Json<T>, _>` in
/// the signature.
type Answer<T> = std::result::Result<Json<T>, CallToolResult>;

#[tool_router]
impl Server {
    /// A server reading `config` (None: the default location) for `served`.
    pub fn new(config: Option<PathBuf>, served: Session) -> Server {
        Server {
            config,
            served: Arc::new(served),
        }
    }

    #[tool(
        description = "Read-only health report of the ktr installation: config, project dir, workdir, target, hooks, MCP registration, state dir, stuck operations. Each failed check says how to fix it.",
        annotations(read_only_hint = true)
    )]
    async fn thread_rebuild_doctor(&self) -> std::result::Result<Json<Doctor>, CallToolResult> {
        let config = self.config.clone();
        run("thread_rebuild_doctor", move || {
            Ok(Doctor::of(doctor::check(config.as_deref())))
        })
        .await
    }

    #[tool(
        description = "Read-only dirty ledger: how many bytes of the current context window are residue (tool results, thinking, injections…) versus conversation, the window object (tokens used as measured by the API, window size, where a rebuild would start, how much it frees, each with its source) and whether a rebuild is advised. Call this first.",
        annotations(read_only_hint = true)
    )]
    async fn thread_rebuild_dirty(
        &self,
        Parameters(args): Parameters<TranscriptArgs>,
    ) -> std::result::Result<Json<Dirty>, CallToolResult> {
        let this = self.clone();
        run("thread_rebuild_dirty", move || {
            let (chosen, plan) = this.plan(args.transcript_path)?;
            Ok(Dirty::of(plan, chosen))
        })
        .await
    }

    #[tool(
        description = "Read-only plan of a rebuild: turns carried verbatim, estimated tokens of the new window, what is left out and why, and blocked_reason if a check refuses. Writes nothing. Show it to the human before asking for REBUILD.",
        annotations(read_only_hint = true)
    )]
    async fn thread_rebuild_plan(
        &self,
        Parameters(args): Parameters<TranscriptArgs>,
    ) -> std::result::Result<Json<PlanView>, CallToolResult> {
        let this = self.clone();
        run("thread_rebuild_plan", move || {
            let (chosen, plan) = this.plan(args.transcript_path)?;
            Ok(PlanView::of(plan, chosen))
        })
        .await
    }

    #[tool(
        description = "Request a rebuild of this session. Only after the human explicitly agreed; confirmation must be exactly REBUILD. Refused (with the reason) when the configured target (tmux pane, systemd unit, pointer) does not run this session; the result names the target that would be switched. It only records a pending operation: finish your reply normally, the switch happens after the reply ends (Stop hook). Outside tmux (the result's target is the person's terminal) ktr switches nothing itself: once the rebuild is verified the human types the one line ktr offers, `/resume <id>`, with the input line empty (the statusline, the next Stop line and thread_rebuild_status show it; the old session stays as it was; speaking first withdraws the offer and a new one follows) — tell them so.",
        annotations(read_only_hint = false, destructive_hint = false)
    )]
    async fn thread_rebuild_request(
        &self,
        Parameters(args): Parameters<RequestArgs>,
    ) -> std::result::Result<Json<Changed>, CallToolResult> {
        let this = self.clone();
        run("thread_rebuild_request", move || {
            let config = this.load_config()?;
            ktr_pipeline::operation::confirm(&args.confirmation, "REBUILD")?;
            let session = this.served.now(&config).binding(&config)?;
            let target = Session::target_for(&config, session.as_ref())?;
            let op = Store::for_config(&config)?.request(&args.reason, &args.confirmation, session.as_ref())?;
            Ok(Changed {
                operation: StatusView::of(&op),
                target: Some(target),
                next: Some("Finish your reply normally now; do not wait or poll. After this reply ends the Stop hook starts the rebuild in the background and the session is switched over; check later with thread_rebuild_status."),
            })
        })
        .await
    }

    #[tool(
        description = "Read-only status of a rebuild operation (default: this session's most recent, else the most recent), and every session's operation in flight: status, reasons, error, session_conflict, needs_attention, estimated vs measured context tokens, history.",
        annotations(read_only_hint = true)
    )]
    async fn thread_rebuild_status(
        &self,
        Parameters(args): Parameters<StatusArgs>,
    ) -> std::result::Result<Json<Status>, CallToolResult> {
        let this = self.clone();
        run("thread_rebuild_status", move || {
            let config = this.load_config()?;
            let store = Store::at(&config.state_dir).with_config(&config);
            let recovered = store.recover_stale()?;
            let op = if let Some(id) = args.operation_id {
                Some(store.load(&OperationId::parse(&id)?)?)
            } else {
                // Several sessions at once: this session's latest first.
                let now = this.served.now(&config);
                let list = store.list()?;
                let mine = now.id().and_then(|served| {
                    list.iter().rev().find(|op| {
                        op.session_id.as_ref() == Some(served)
                            || op.candidate.as_ref().map(|c| &c.session_id) == Some(served)
                    })
                });
                mine.or(list.last()).cloned()
            };
            let target = Target::from_config(&config);
            Ok(Status {
                note: if op.is_none() {
                    "no operation has been requested yet"
                } else {
                    ""
                },
                operation: op.map(|op| {
                    StatusView::of(&op)
                        .looking_at(&target)
                        .with_progress(&store)
                }),
                recovered_stale: recovered.iter().map(|o| o.id.to_string()).collect(),
                in_flight: ktr_admin::sessions::in_flight(&store.list()?),
            })
        })
        .await
    }

    #[tool(
        description = "Cancel a pending rebuild (only while it is still pending). Only after the human asked; confirmation must be exactly CANCEL.",
        annotations(read_only_hint = false, destructive_hint = false)
    )]
    async fn thread_rebuild_cancel(
        &self,
        Parameters(args): Parameters<CancelArgs>,
    ) -> std::result::Result<Json<Changed>, CallToolResult> {
        let this = self.clone();
        run("thread_rebuild_cancel", move || {
            let config = this.load_config()?;
            let op = Store::for_config(&config)?
                .cancel(&OperationId::parse(&args.operation_id)?, &args.confirmation)?;
            Ok(Changed {
                operation: StatusView::of(&op),
                target: None,
                next: None,
            })
        })
        .await
    }

    #[tool(
        description = "Ask to switch an activated rebuild back to the old session. Only after the human asked; confirmation must be exactly ROLLBACK. Finish your reply normally: the switch back happens after the reply ends (Stop hook). Outside tmux the human types the offered `/resume <old id>` line instead.",
        annotations(read_only_hint = false, destructive_hint = false)
    )]
    async fn thread_rebuild_rollback_request(
        &self,
        Parameters(args): Parameters<RollbackArgs>,
    ) -> std::result::Result<Json<Changed>, CallToolResult> {
        let this = self.clone();
        run("thread_rebuild_rollback_request", move || {
            let config = this.load_config()?;
            let op = Store::for_config(&config)?
                .rollback_request(&OperationId::parse(&args.operation_id)?, &args.confirmation)?;
            Ok(Changed {
                operation: StatusView::of(&op),
                target: None,
                next: Some("Finish your reply normally now; the switch back to the old session happens after this reply ends (Stop hook)."),
            })
        })
        .await
    }

    #[tool(
        description = "Read-only verbatim search of everything this session's history held — earlier tool output, files read, commands run, thinking, injections, and every session it was rebuilt from (even when Claude Code deleted their transcripts: ktr's backups). Use it before running a command again or re-reading a file whose output is no longer in your context window. No summaries, no scoring: each hit cites session, line, time, turn, kind, tool and its input (a call and its result are one hit), the prompt that asked, a snippet (match in ⟦⟧) and an id for thread_rebuild_recall_get. What your window already holds is folded into `carried` and does not use the limit. Newest first, tool output before conversation; at most 30 hits per call (narrow with kinds/tool/file/sessions/since/until/turns; scope all for every project).",
        annotations(read_only_hint = true)
    )]
    async fn thread_rebuild_recall(
        &self,
        Parameters(args): Parameters<RecallArgs>,
    ) -> std::result::Result<Json<Recalled>, CallToolResult> {
        let this = self.clone();
        run("thread_rebuild_recall", move || {
            let config = this.load_config()?;
            let limit = args.limit.unwrap_or(10);
            if limit == 0 || limit > MCP_RECALL_LIMIT {
                return Err(Error::usage(format!(
                    "limit {limit} is out of range: give 1 to {MCP_RECALL_LIMIT} (a larger answer would be cut by Claude Code); narrow the query or filters instead"
                )));
            }
            let current = this.served.now(&config).choose(&config, None)?.path;
            let ask = ktr_pipeline::recall::Ask {
                query: args.query,
                regex: args.regex,
                kinds: args.kinds,
                tool: args.tool,
                sessions: args.sessions,
                since: args.since,
                until: args.until,
                turns: args.turns.as_deref().map(ktr_pipeline::recall::parse_turns).transpose()?,
                limit: limit as usize,
                count: args.count,
                all_copies: args.all_copies,
                file: args.file,
                projects: args.projects,
                context: args.context as usize,
                scope: args.scope.as_deref().map(ktr_pipeline::recall::Scope::parse).transpose()?.unwrap_or_default(),
                current: current.file_stem().map(|s| s.to_string_lossy().into_owned()),
            };
            Ok(Recalled::of(ktr_pipeline::recall::recall(&config, &ask)?))
        })
        .await
    }

    #[tool(
        description = "Read-only: one recall hit whole, verbatim — the record's texts (tool output, file contents, thinking…; images as type and size only), in pages of at most 16 KB. Pass the hit's id from thread_rebuild_recall, and page (from 0) while page + 1 < pages.",
        annotations(read_only_hint = true)
    )]
    async fn thread_rebuild_recall_get(
        &self,
        Parameters(args): Parameters<RecallGetArgs>,
    ) -> std::result::Result<Json<RecallPage>, CallToolResult> {
        let this = self.clone();
        run("thread_rebuild_recall_get", move || {
            let config = this.load_config()?;
            let store = Store::at(&config.state_dir);
            let page = ktr_pipeline::recall::get(&store, &config.project_dir, &args.id, args.page)?;
            Ok(RecallPage::of(args.id, page))
        })
        .await
    }
}

#[tool_handler(
    name = "ktr",
    instructions = "ktr rebuilds this long-running Claude Code session losslessly: every real user/assistant turn is copied verbatim onto a fresh session (tool results, thinking and injections are dropped) and Claude Code is switched over to it. Always call thread_rebuild_dirty and thread_rebuild_plan first and tell the human what they show (noise, turns carried, estimated tokens, blocked_reason). Call thread_rebuild_request only after the human explicitly agreed in this conversation, with confirmation exactly REBUILD; never on your own initiative. After requesting, finish your reply normally and do not wait or poll: the switch happens after this reply ends (Stop hook), in the background. thread_rebuild_cancel (CANCEL, pending only) and thread_rebuild_rollback_request (ROLLBACK, activated only) likewise need the human's explicit word. thread_rebuild_recall finds verbatim anything earlier in this session's history (tool output, files read, thinking), also from before a rebuild — use it before running a command again or re-reading a file whose output is no longer in your window; thread_rebuild_recall_get reads a hit whole. No tool deletes anything."
)]
impl ServerHandler for Server {}

/// The server in a project ktr does not serve (`--plugin`): no tools, and
/// instructions that say so.
#[derive(Clone)]
pub struct Unserved;

impl ServerHandler for Unserved {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        let mut info = rmcp::model::ServerConfig::default();
        info.server_info.name = "ktr".into();
        info.server_info.version = env!("CARGO_PKG_VERSION").into();
        info.instructions = Some(
            "ktr does not serve this project (its config names another project_dir, or the session lies outside Claude Code's projects folder), so it offers no tools here.".into(),
        );
        info
    }
}

impl Server {
    /// The config serving this server's session: Claude Code starts it in
    /// the session's working directory, whose project folder it is (zero
    /// config), settled from the Claude Code process that started it.
    fn load_config(&self) -> Result<Config> {
        let mut config = Config::here(self.config.as_deref())?;
        ktr_pipeline::targets::discover::settle(
            &mut config,
            ktr_pipeline::process::runner_of(std::process::id()),
        );
        Ok(config)
    }

    /// Load the config, choose the transcript and plan it (read-only).
    fn plan(&self, given: Option<String>) -> Result<(String, plan::Planned)> {
        let config = self.load_config()?;
        let given = given.map(PathBuf::from);
        let chosen = self.served.now(&config).choose(&config, given.as_deref())?;
        let plan = window_cache::assess(&config, &chosen.path)?;
        Ok((chosen.why, plan))
    }
}

/// Run a library call off the async thread and turn its outcome into a
/// tool answer; log one line to stderr.
async fn run<T, F>(tool: &'static str, f: F) -> Answer<T>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T> + Send + 'static,
{
    let outcome = tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(Error::io(format!("{tool} stopped unexpectedly: {e}"))));
    match outcome {
        Ok(value) => {
            eprintln!("ktr-mcp: {tool}: ok");
            Ok(Json(value))
        }
        Err(e) => Err(error_result(tool, &e.message)),
    }
}

fn error_result(tool: &str, message: &str) -> CallToolResult {
    eprintln!("ktr-mcp: {tool}: {message}");
    CallToolResult::error(vec![ContentBlock::text(message)])
}
