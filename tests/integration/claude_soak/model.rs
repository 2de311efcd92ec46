//! The soak's model: what each turn's prompt asks and what the fake API
//! answers, in a realistic mix — plain text, thinking before the text, a
//! Bash call whose output is 5–50 KB (the larger ones Claude Code offloads
//! to `tool-results/`), now and then an image read or a subagent.
//!
//! Every prompt starts with its tag `S<n> ` (four digits), every reply text
//! with `S<n>-R `, every output line with `S<n>-OUT-<k> `: so the verdict
//! can find each word of the run where it must be, exactly once.

use serde_json::json;

use crate::support::fake_api::{Block, Rule, text, thinking, tool};
use crate::support::rng::Rng;

/// What a turn does besides its prompt and reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Text,
    Think,
    Tool,
    Image,
    Agent,
}

/// The 1×1 PNG the image turns read (`<work>/pixel.png`).
pub(super) const PIXEL_PNG: [u8; 70] = [
    137, 80, 78, 71, 13, 10, 26, 10, 0, 0, 0, 13, 73, 72, 68, 82, 0, 0, 0, 1, 0, 0, 0, 1, 8, 6, 0,
    0, 0, 31, 21, 196, 137, 0, 0, 0, 13, 73, 68, 65, 84, 120, 218, 99, 100, 96, 248, 95, 15, 0, 2,
    135, 1, 128, 235, 71, 186, 146, 0, 0, 0, 0, 73, 69, 78, 68, 174, 66, 96, 130,
];

/// The filler after each output line's tag: ~60 bytes a line.
const FILLER: &str = "lorem ipsum dolor sit amet consectetur adipiscing";

/// Words the person and the model use (a few CJK ones: typed as they are).
const WORDS: &[&str] = &[
    "the", "window", "session", "deploy", "keys", "graph", "cache", "note", "plan", "review",
    "table", "branch", "commit", "test", "merge", "night", "river", "paper", "quiet", "signal",
    "继续", "好的", "日志", "today", "again", "later", "small", "large", "bright", "clear",
];

/// One turn of the soak.
#[derive(Debug, Clone)]
pub(super) struct Turn {
    pub n: usize,
    pub kind: Kind,
    /// What the person types (no newline).
    pub prompt: String,
    /// The reply's text block.
    pub reply: String,
    /// For a tool turn: how many output lines the command prints.
    pub output_lines: usize,
    /// Said in the session outside tmux (else in the tmux one).
    pub outside: bool,
}

impl Turn {
    /// Turn `n`, its kind drawn from the mix.
    pub(super) fn draw(n: usize, rng: &mut Rng) -> Turn {
        let kind = match rng.between(0, 99) {
            0..=34 => Kind::Text,
            35..=54 => Kind::Think,
            55..=89 => Kind::Tool,
            90..=94 => Kind::Image,
            _ => Kind::Agent,
        };
        let tag = Turn::tag_of(n);
        let prompt = format!("{tag} {}", words(rng, 2, 6));
        let reply = format!("{tag}-R {}", words(rng, 10, 120));
        let output_lines = if kind == Kind::Tool {
            // 5–50 KB at ~60 bytes a line.
            rng.between(85, 850) as usize
        } else {
            0
        };
        Turn {
            n,
            kind,
            prompt,
            reply,
            output_lines,
            outside: false,
        }
    }

    /// `S0042`: the tag every word of turn `n` starts with.
    pub(super) fn tag_of(n: usize) -> String {
        format!("S{n:04}")
    }

    /// The trigger the fake API answers the prompt by (tag and space: a
    /// tool result's `S0042-OUT-…` lines never match it).
    pub(super) fn trigger(&self) -> String {
        format!("{} ", Turn::tag_of(self.n))
    }

    /// Output line `k` (1-based) of a tool turn, as the command prints it.
    pub(super) fn output_line(&self, k: usize) -> String {
        format!("{}-OUT-{k:05} {FILLER}", Turn::tag_of(self.n))
    }

    /// The rules that make the fake API answer this turn. `agent_tool` is
    /// the name the CLI gives its subagent tool; `work` its directory.
    pub(super) fn rules(&self, agent_tool: &str, work: &str, rng: &mut Rng) -> Vec<Rule> {
        let tag = Turn::tag_of(self.n);
        let answer = text(&self.reply);
        let mut rules = Vec::new();
        let replies: Vec<Vec<Block>> = match self.kind {
            Kind::Text => vec![vec![answer]],
            Kind::Think => {
                let thought = format!("{tag} thinking: {}", words(rng, 30, 300));
                vec![vec![thinking(&thought, &format!("sig-{tag}")), answer]]
            }
            Kind::Tool => {
                let command = format!("seq -f '{tag}-OUT-%05g {FILLER}' 1 {}", self.output_lines);
                vec![
                    vec![tool(
                        "Bash",
                        json!({"command": command, "description": "print the lines"}),
                    )],
                    vec![answer],
                ]
            }
            Kind::Image => vec![
                vec![tool(
                    "Read",
                    json!({"file_path": format!("{work}/pixel.png")}),
                )],
                vec![answer],
            ],
            Kind::Agent => {
                let sub = format!("{tag}-SUB look around");
                // The subagent's own request names `sub`: answered first.
                rules.push(Rule::new(
                    &sub,
                    vec![vec![text(&format!("{tag}-SUBR all quiet"))]],
                ));
                vec![
                    vec![tool(
                        agent_tool,
                        json!({
                            "description": "soak subtask",
                            "prompt": sub,
                            "subagent_type": "general-purpose"
                        }),
                    )],
                    vec![answer],
                ]
            }
        };
        rules.push(Rule::new(&self.trigger(), replies));
        rules
    }
}

/// `lo..=hi` words from [`WORDS`], space-separated.
fn words(rng: &mut Rng, lo: i64, hi: i64) -> String {
    let n = rng.between(lo, hi);
    (0..n)
        .map(|_| WORDS[rng.between(0, WORDS.len() as i64 - 1) as usize])
        .collect::<Vec<_>>()
        .join(" ")
}
