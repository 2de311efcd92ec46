#!/usr/bin/env python3
"""Generate a large, realistic Claude Code transcript (JSONL) for benchmarks.

The output imitates a long-running Claude Code 2.1.328 session in a tmux
pane with a Telegram channel plugin:

* ~95 % of the bytes are tool-result bytes (``tool_result`` blocks plus the
  top-level ``toolUseResult`` objects that duplicate them): Bash and Read
  output with JSON escapes (``\\n \\t \\" \\\\``), ``\\u001b`` colour codes,
  escaped ``\\uXXXX`` text inside files and raw CJK text;
* assistant replies written as several lines sharing ``message.id``
  (thinking with signature, multi-line Chinese/English text, tool calls,
  parallel tool calls whose siblings hang off the chain as Claude Code
  writes them);
* typed prompts in Chinese and English, some opening with
  ``<system-reminder>`` blocks; the first one carries the CLAUDE.md snapshot;
* Telegram channel messages (``isMeta:true`` ``<channel …>`` user records)
  answered through ``mcp__plugin_telegram_telegram__reply`` tool calls;
* attachments (``skill_listing``, ``hook_success``, ``hook_additional_context``,
  ``queued_command`` with ``commandMode: "prompt"`` / ``origin.kind: "channel"``);
* file-only records (``queue-operation``, ``last-prompt``,
  ``file-history-snapshot``, ``api-request``);
* one ``compact_boundary`` (``parentUuid: null``, ``logicalParentUuid``) plus
  its ``isCompactSummary`` user record once half the target size is written.

Everything is derived from ``--seed`` through one ``random.Random``: no wall
clock, no other randomness, so the same arguments give byte-identical files.
Records are written one at a time (constant memory). A one-line summary goes
to stderr.

Usage::

    python3 bench/gen_transcript.py --size-mb 100 --seed 1 --out /tmp/t.jsonl

``MB`` means 10^6 bytes. The file stops at the first turn boundary after the
target size, so it is slightly larger than requested.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import json
import random
import sys
import uuid

VERSION = "2.1.328"
MODEL = "claude-opus-5-5"
MB = 1_000_000
TELEGRAM_SOURCE = "plugin:telegram:telegram"
REPLY_TOOL = "mcp__plugin_telegram_telegram__reply"
BASE_EPOCH_MS = 1_793_520_000_000  # 2026-11-01T08:00:00Z; shifted per seed below
TURN_GAP_MS = (20_000, 2_400_000)  # between a finished reply and the next prompt
CHAT_TOOL_BYTES = 1500  # --mix chat: the occasional tool output stays small
ALNUM = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def dumps(obj) -> bytes:
    """Serialise like Claude Code (JSON.stringify): compact, raw UTF-8."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def session_id_for_seed(seed: int) -> str:
    """The session id the generator uses for ``seed`` (also the file stem)."""
    return str(uuid.UUID(int=random.Random(f"ktr-bench-session-{seed}").getrandbits(128), version=4))


# --------------------------------------------------------------------------
# Text material. Small hand-written pools, expanded with seeded variation.
# --------------------------------------------------------------------------

ZH_SENTENCES = [
    "请帮我看一下这个日志里为什么会有这么多重试。",
    "昨天晚上部署之后，worker 进程的内存一直在涨。",
    "我觉得问题可能出在配置文件的加载顺序上。",
    "先别改代码，先把现象复现出来再说。",
    "这个函数的名字起得不太好，读起来容易误会。",
    "测试全部通过了，但是在真实数据上还是会超时。",
    "能不能把这段逻辑拆成两个更小的函数？",
    "我们需要在周五之前把这个版本发出去。",
    "数据库迁移脚本要保证可以重复执行。",
    "麻烦你顺便检查一下 README 里的安装步骤是否还正确。",
    "中文注释和英文注释混在一起，有点乱。",
    "这个报错信息对用户来说不够清楚，要写明下一步怎么做。",
    "日志轮转的配置好像没有生效，文件已经超过两个 G 了。",
    "我刚才在手机上看了一下，通知延迟了大概三分钟。",
    "把超时时间改成三十秒试试看。",
    "这一步是只读的，不会修改任何文件。",
    "好的，那就按你说的方案来做。",
    "今天先到这里，明天继续看性能的问题。",
    "你上次说的那个边界情况，我在测试里补上了。",
    "请用中文回答，代码里的注释保持英文。",
    "这个正则表达式在遇到反斜杠的时候会出错。",
    "为什么这里要先排序再去重？直接用集合不行吗？",
    "我把 CI 的缓存清掉了，重新跑一遍。",
    "这段代码在 Windows 上路径分隔符会有问题。",
    "顺便看看有没有内存泄漏。",
]

EN_SENTENCES = [
    "Can you check why the retry counter keeps climbing in the worker log?",
    "The build is green locally but fails on CI with a linker error.",
    "Let's keep the public API unchanged and refactor the internals only.",
    "Please don't touch the migration files yet.",
    "I think the parser chokes on lines that end without a newline.",
    "Run the tests again and show me only the failures.",
    "What does the \"stable_file_seconds\" setting actually control?",
    "The config loader should name the key when a value has the wrong type.",
    "Looks good to me, go ahead and commit it.",
    "Could you explain the trade-off between streaming and loading the whole file?",
    "Let's measure before we optimise anything.",
    "The path is C:\\Users\\dev\\project on the Windows box, by the way.",
    "Please summarise what changed since this morning.",
    "I pasted the stack trace below; the interesting part is the second frame.",
    "We need a clear error message instead of a panic here.",
    "Make the benchmark deterministic so we can compare runs.",
    "Check whether the timestamps are monotonic after the merge.",
    "OK, ship it after the tests pass.",
    "Can you grep for every place that still uses the old name?",
    "Use tabs\tin the Makefile, not spaces.",
]

ASSISTANT_ZH = [
    "我先看了一下日志，重试主要集中在凌晨两点到三点之间。",
    "原因是连接池的上限太小，高峰期请求会排队，然后触发超时重试。",
    "我建议把 `max_connections` 从 8 调到 32，并加上指数退避。",
    "测试已经全部通过，共 214 个用例，耗时 3.2 秒。",
    "这个改动只影响配置加载，不会改变对外的接口。",
    "我把报错信息改成了一行，说明出了什么问题以及下一步该怎么做。",
    "路径处理现在统一用 `Path`，Windows 上的反斜杠也能正确处理。",
    "需要注意的是，旧的缓存文件格式不兼容，第一次启动会重建。",
    "我没有修改迁移脚本，只是加了一个检查。",
    "下面是具体的改动：",
    "总结一下：问题已经定位，修复也验证过了。",
    "如果你同意，我就提交这个改动。",
]

ASSISTANT_EN = [
    "I looked at the log first: the retries cluster between 02:00 and 03:00.",
    "The root cause is a connection pool that is too small for the nightly batch.",
    "Here is what I changed:",
    "All 214 tests pass; the slowest one takes 0.8 s.",
    "This only touches the loader, the public API stays the same.",
    "The error now says which key is wrong and what value is expected.",
    "I did not run the migration; it is read-only until you confirm.",
    "One caveat: the old cache format is not compatible, so the first start rebuilds it.",
    "Next step would be to profile the parser on the 100 MB fixture.",
    "Let me know if you want me to commit this.",
]

BULLETS = [
    "- `shared/src/config.rs`: reject unknown keys and name them",
    "- `bins/ktr/main.rs`: print one-line errors, exit code 2 on usage errors",
    "- 新增测试：`tests/plan.rs` 覆盖空文件和只有一行的文件",
    "- 日志里的 `\\n` 现在会被正确转义",
    "- Removed the unused `regex` feature flags",
    "- 配置项 `dirty_budget_bytes` 的默认值保持 524288",
    "- `README.md`: 更新了安装步骤 (install steps)",
    "- Retry with exponential backoff: 100 ms, 200 ms, 400 ms, capped at 5 s",
]

THINKING_EN = [
    "The user wants the failing case first. I should read the log before touching the code.",
    "Two tool calls can run in parallel here: the grep and the file read are independent.",
    "The output is long; I only need the lines with ERROR and the surrounding context.",
    "The test failure is in the parser, not in the config loader as I first assumed.",
    "I should answer in Chinese since the user wrote in Chinese, keeping identifiers in English.",
]

RUST_LINES = [
    "use std::io::{{self, BufRead, BufReader}};",
    "pub fn parse_line(line: &[u8]) -> Result<Record<'_>, Error> {{",
    "    let rec: Record = serde_json::from_slice(line).map_err(|e| Error::parse({n}, e))?;",
    "    if rec.kind == \"assistant\" && rec.message.id.is_some() {{",
    "        return Err(Error::config(\"project_dir must be a string\"));",
    "    }}",
    "    // 按行读取，避免一次性加载整个文件",
    "    let path = PathBuf::from(\"C:\\\\Users\\\\dev\\\\proj_{n}\\\\session.jsonl\");",
    "    println!(\"{{}}\\t{{}}\\n\", name, value_{n});",
    "    assert_eq!(escape(\"a\\\"b\"), \"a\\\\\\\"b\");",
    "#[derive(Debug, Deserialize)]",
    "struct Counter{n} {{ hits: u64, misses: u64 }}",
    "impl fmt::Display for Kind{n} {{",
    "        Some(x) => total += x as u64 * {n},",
    "    let re = Regex::new(r\"^mcp__[\\w.-]*(companion|telegram)[\\w.-]*__reply$\").unwrap();",
    "    const MSG: &str = \"\\u4e2d\\u6587\\u6d88\\u606f {n}\";",
    "}}",
    "",
    "    let mut total_{n} = 0usize;",
    "    for (index, item) in items.iter().enumerate().skip({w}) {{",
    "        total_{n} += item.len() + index;",
    "    /// Returns the number of complete records read so far, blank lines excluded.",
    "    pub fn records_seen(&self) -> usize {{ self.records + {w} }}",
    "        let window = &buffer[start..start + {ms}.min(buffer.len() - start)];",
    "    // Keep the original bytes: the ledger counts raw JSON, never a re-serialisation.",
    "    match record.kind {{ Kind::User => users += 1, Kind::Assistant => assistants += 1, _ => {{}} }}",
    "        self.window.tool_result_bytes += block.len() as u64; // counted once",
    "pub(crate) fn estimate_tokens(text: &str) -> u64 {{ text.chars().map(weight).sum::<f64>() as u64 }}",
]

PY_LINES = [
    "def load_config(path: str) -> dict:",
    "    \"\"\"读取配置文件并校验每一个键。\"\"\"",
    "    with open(path, encoding=\"utf-8\") as fh:",
    "        data = json.loads(fh.read())  # line {n}",
    "    for key, value in data.items():",
    "        if key not in KNOWN_KEYS:",
    "            raise ValueError(f\"unknown key {{key!r}} at line {n}\")",
    "\tresult = re.sub(r\"\\\\s+\", \" \", text)",
    "    print(\"done:\\t%d records\" % {n})",
    "    WINDOWS_PATH = r\"C:\\Temp\\bench_{n}\\out.jsonl\"",
    "class Worker{n}(Thread):",
    "    return {{\"ok\": True, \"count\": {n}, \"msg\": \"\\u5b8c\\u6210\"}}",
    "",
    "    total_{n} = sum(len(item) for item in items[{w}:])",
    "    # Stream the file line by line so memory stays flat on big transcripts.",
    "    for lineno, raw in enumerate(fh, start={w}):",
    "        if lineno % 10000 == 0 and verbose:",
    "            stats.setdefault(record.get('type'), 0)",
    "    elapsed_{n} = time.perf_counter() - started",
    "    return sorted(results, key=lambda r: (r.size, r.name))[:{ms}]",
]

MD_LINES = [
    "# 部署说明 / Deployment notes",
    "## 第 {n} 步：检查配置",
    "这个项目用于收集和分析应用日志，每天大约增长两千行。",
    "The service restarts automatically when the unit file changes ({n} times so far).",
    "1. 日志轮转（log rotation）—— 文件已经太大了。",
    "2. 错误告警（error alerting）—— ERROR 行应该触发通知。",
    "> 注意：不要在生产环境直接运行迁移脚本。",
    "| key | default | 说明 |",
    "| `timeout_{n}` | 30 | 超时时间（秒） |",
    "```bash",
    "cargo build --release && ./target/release/ktr plan --json",
    "```",
    "",
]

JSON_LINES = [
    "  {{\"id\": {n}, \"name\": \"worker-{n}\", \"path\": \"C:\\\\data\\\\w{n}.log\", \"ok\": true}},",
    "  {{\"msg\": \"\\u4efb\\u52a1\\u5b8c\\u6210\", \"level\": \"info\", \"seq\": {n}}},",
    "  {{\"text\": \"line one\\nline two\\ttabbed\", \"quote\": \"say \\\"hi\\\"\", \"n\": {n}}},",
    "  {{\"user\": \"小明\", \"comment\": \"这个功能很好用\", \"stars\": {n}}},",
]

LOG_LINES = [
    "\x1b[32m2026-11-{d:02d}T{h:02d}:{m:02d}:{s:02d}Z  INFO\x1b[0m worker-{w} processed batch {n} in {ms} ms",
    "\x1b[33m2026-11-{d:02d}T{h:02d}:{m:02d}:{s:02d}Z  WARN\x1b[0m retry {w}/5 for job {n}: connection reset by peer",
    "\x1b[31m2026-11-{d:02d}T{h:02d}:{m:02d}:{s:02d}Z ERROR\x1b[0m job {n} failed: timeout after {ms} ms",
    "2026-11-{d:02d}T{h:02d}:{m:02d}:{s:02d}Z INFO 任务 {n} 已完成，耗时 {ms} 毫秒",
    "2026-11-{d:02d}T{h:02d}:{m:02d}:{s:02d}Z DEBUG payload={{\"id\":{n},\"tag\":\"w{w}\",\"path\":\"C:\\\\tmp\\\\{n}\"}}",
    "   Compiling ktr-shared v0.1.{w} (/home/dev/ktr/shared)",
    "test tests::case_{n} ... \x1b[32mok\x1b[0m",
    "test tests::escape_{n} ... \x1b[31mFAILED\x1b[0m",
    "{n}\t{ms}\t{w}\tok",
    "-rw-r--r-- 1 dev dev {ms:>8} Nov {d:2d} {h:02d}:{m:02d} file_{n}.jsonl",
    "src/lib.rs:{n}:    // TODO(小王): handle \"\\r\\n\" line endings",
    "warning: unused variable: `x{n}` --> shared/src/read.rs:{ms}:9",
    "2026-11-{d:02d} {h:02d}:{m:02d}:{s:02d},{ms:03d} worker-{w} INFO scheduler: dispatched job {n} to queue default (pending={ms}, running={w})",
    "2026-11-{d:02d} {h:02d}:{m:02d}:{s:02d},{ms:03d} worker-{w} INFO http: GET /api/v1/sessions/{n}/events?limit=200 200 {ms}us",
    "2026-11-{d:02d} {h:02d}:{m:02d}:{s:02d} 调度器：任务 {n} 已分配到 worker-{w}，队列长度 {ms}，预计等待 {s} 秒",
    "    Finished `release` profile [optimized] target(s) in {s}.{w}s",
    "commit {ms:x}{n:x}{w:x} Author: dev <dev@example.com> Date: Sun Nov {d} {h:02d}:{m:02d}:{s:02d} 2026 +0000",
]

BASH_COMMANDS = [
    ("cargo test --workspace 2>&1 | tail -200", "Run the test suite"),
    ("grep -rn \"TODO\" src/ shared/src/", "Find TODO markers"),
    ("journalctl -u claude-session.service --since \"2 hours ago\" --no-pager", "Read the service log"),
    ("tail -n 2000 /var/log/app/worker.log", "Show the end of the worker log"),
    ("ls -la ~/.claude/projects/-home-dev-ktr/", "List the project transcripts"),
    ("git log --stat -n 30", "Recent commits with stats"),
    ("python3 tools/stats.py data/app.log | head -500", "Compute log statistics"),
    ("cargo build --release 2>&1", "Build in release mode"),
]

SOURCE_FILES = [  # (path, line templates, how often the model reads it)
    ("/home/dev/ktr/shared/src/transcript.rs", RUST_LINES, 4),
    ("/home/dev/ktr/shared/src/config.rs", RUST_LINES, 3),
    ("/home/dev/ktr/tools/stats.py", PY_LINES, 2),
    ("/home/dev/ktr/docs/部署说明.md", MD_LINES, 2),
    ("/home/dev/ktr/README.md", MD_LINES, 2),
    ("/home/dev/ktr/tests/fixtures/users.json", JSON_LINES, 1),
]
SOURCE_PATHS = [f[0] for f in SOURCE_FILES]
SOURCE_WEIGHTS = [f[2] for f in SOURCE_FILES]

SKILLS = [
    ("review-notes", "Review the project notes with a focus"),
    ("dataviz", "Use this skill whenever you are about to create ANY chart, graph, plot, dashboard, or data visualization"),
    ("update-config", "Use this skill to configure the Claude Code harness via settings.json"),
    ("keybindings-help", "Use when the user wants to customize keyboard shortcuts"),
    ("simplify", "Review changed code for reuse, quality, and efficiency, then fix any issues found"),
    ("loop", "Run a prompt or slash command on a recurring interval"),
    ("telegram:access", "Manage who may message this session through the Telegram channel"),
]

TELEGRAM_USERS = ["alice", "小明", "bob", "王老师"]


class Clock:
    """Strictly increasing ISO-8601 timestamps driven by the seeded RNG."""

    def __init__(self, rng: random.Random, seed: int):
        self.rng = rng
        self.ms = BASE_EPOCH_MS + (seed % 97) * 3_600_000

    def tick(self, lo: int = 1, hi: int = 40) -> str:
        """Advance by lo..hi milliseconds and return the new timestamp."""
        self.ms += self.rng.randint(lo, hi)
        return self.now()

    def now(self) -> str:
        secs, ms = divmod(self.ms, 1000)
        t = dt.datetime.fromtimestamp(secs, dt.timezone.utc)
        return f"{t:%Y-%m-%dT%H:%M:%S}.{ms:03d}Z"


class Pools:
    """Concrete text lines expanded once from the templates (seeded)."""

    def __init__(self, rng: random.Random, size: int = 3000):
        self.log = [self._fill(rng, rng.choice(LOG_LINES)) for _ in range(size)]
        self.files = {}
        for path, templates, _ in SOURCE_FILES:
            self.files[path] = [self._fill(rng, rng.choice(templates)) for _ in range(size)]
        self.avg_log = sum(len(s.encode()) + 1 for s in self.log) / len(self.log)

    @staticmethod
    def _fill(rng: random.Random, template: str) -> str:
        return template.format(
            n=rng.randint(1, 99999), ms=rng.randint(1, 60000), w=rng.randint(0, 15),
            d=rng.randint(1, 28), h=rng.randint(0, 23), m=rng.randint(0, 59), s=rng.randint(0, 59))


class Writer:
    """Streams records to the output file and keeps the counters."""

    def __init__(self, out):
        self.out = out
        self.bytes = 0
        self.records = 0
        self.tool_result_bytes = 0

    def write(self, record: dict, tool_result_bytes: int = 0) -> None:
        line = dumps(record) + b"\n"
        self.out.write(line)
        self.bytes += len(line)
        self.records += 1
        self.tool_result_bytes += tool_result_bytes


class SessionGenerator:
    """Produces one session, turn by turn, until the target size is reached."""

    def __init__(self, seed: int, target_bytes: int, out, mix: str = "tools", max_turns: int = 0,
                 huge_bytes: int = 0, startup_bytes: int = 0):
        self.rng = random.Random(seed)
        self.target = target_bytes
        self.mix = mix                # "tools" (residue-heavy) or "chat" (conversation-heavy)
        self.max_turns = max_turns    # stop after this many turns instead of at target_bytes
        self.huge_bytes = huge_bytes  # one typed prompt of about this many bytes (0: none)
        self.startup_bytes = startup_bytes  # a SessionStart context of about this many bytes (0: short)
        self.w = Writer(out)
        self.clock = Clock(self.rng, seed)
        self.pools = Pools(self.rng)
        self.session_id = session_id_for_seed(seed)
        self.cwd = "/home/dev/ktr"
        self.tail = {"userType": "external", "entrypoint": "cli", "cwd": self.cwd,
                     "sessionId": self.session_id, "version": VERSION, "gitBranch": "main"}
        self.leaf = None          # uuid of the newest record on the live chain
        self.turns = 0            # turns as SPEC §6 counts them (see count_user_speech)
        self.prompts = 0          # typed prompts + channel messages (+ queued ones)
        self.spoke = False        # assistant speech since the last user speech
        self.compacted = False
        self.telegram_msg_id = 1000
        self.last_prompt = ""

    # ---- ids -------------------------------------------------------------

    def new_uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def token(self, n: int) -> str:
        return "".join(self.rng.choices(ALNUM, k=n))

    def new_message_id(self) -> str:
        return "msg_01" + self.token(22)

    def new_tool_id(self) -> str:
        return "toolu_01" + self.token(22)

    # ---- text ------------------------------------------------------------

    def sentences(self, lo: int, hi: int, zh: bool, en: bool, pool_zh=ZH_SENTENCES, pool_en=EN_SENTENCES) -> str:
        pool = (pool_zh if zh else []) + (pool_en if en else [])
        return "".join(self.rng.choice(pool) + (" " if self.rng.random() < 0.5 else "")
                       for _ in range(self.rng.randint(lo, hi))).strip()

    def user_text(self) -> str:
        """A typed prompt: Chinese, English or mixed, sometimes multi-paragraph."""
        r = self.rng.random()
        zh, en = (True, False) if r < 0.45 else (False, True) if r < 0.8 else (True, True)
        paras = [self.sentences(1, 3, zh, en) for _ in range(self.rng.choice((1, 1, 1, 2, 3)))]
        if self.rng.random() < 0.1:
            paras.append("```\n" + "\n".join(self.rng.choices(self.pools.log, k=self.rng.randint(2, 6))) + "\n```")
        return "\n\n".join(paras)

    def assistant_text(self, final: bool) -> str:
        """Multi-line markdown answer mixing Chinese and English."""
        zh = self.rng.random() < 0.6
        pool = ASSISTANT_ZH if zh else ASSISTANT_EN
        if not final:
            return self.rng.choice(pool)
        parts = [" ".join(self.rng.choices(pool, k=self.rng.randint(1, 3)))]
        if self.rng.random() < 0.7:
            parts.append("\n".join(self.rng.sample(BULLETS, self.rng.randint(2, 5))))
        parts.append(" ".join(self.rng.choices(pool, k=self.rng.randint(1, 2))))
        return "\n\n".join(parts)

    def signature(self) -> str:
        return base64.b64encode(self.rng.randbytes(self.rng.randint(180, 700))).decode()

    # ---- generic records ---------------------------------------------------

    def chain_record(self, fields: dict, after: dict | None = None, parent: str | None = None,
                     use_leaf: bool = True, tool_result_bytes: int = 0, ts: str | None = None) -> str:
        """Write a record on the uuid chain and return its uuid.

        Key order follows Claude Code: parentUuid, isSidechain, *fields*, uuid,
        timestamp, *after*, then the common tail (userType … gitBranch).
        The parent is the current leaf unless ``use_leaf`` is false.
        """
        u = self.new_uuid()
        rec = {"parentUuid": self.leaf if use_leaf else parent, "isSidechain": False}
        rec.update(fields)
        rec["uuid"] = u
        rec["timestamp"] = ts or self.clock.tick()
        if after:
            rec.update(after)
        rec.update(self.tail)
        self.w.write(rec, tool_result_bytes)
        return u

    def attachment(self, att: dict) -> None:
        self.leaf = self.chain_record({"attachment": att, "type": "attachment"})

    def file_only(self, rec: dict) -> None:
        self.w.write(rec)

    # ---- session pieces ----------------------------------------------------

    def claude_md(self) -> str:
        lines = ["<system-reminder>", "As you answer the user's questions, you can use the following context:",
                 "# claudeMd", "Codebase and user instructions are shown below. Be sure to adhere to these instructions.",
                 "", "Contents of /home/dev/ktr/CLAUDE.md (project instructions, checked into the codebase):", ""]
        lines += self.rng.choices(self.pools.files["/home/dev/ktr/README.md"], k=40)
        lines += ["", "# currentDate", "Today's date is 2026-11-01.", "",
                  "      IMPORTANT: this context may or may not be relevant to your tasks.", "</system-reminder>"]
        return "\n".join(lines)

    def skill_listing(self, initial: bool) -> None:
        content = "\n".join(f"- {name}: {desc}" for name, desc in SKILLS)
        self.attachment({"type": "skill_listing", "content": content, "skillCount": len(SKILLS),
                         "isInitial": initial, "names": [n for n, _ in SKILLS]})

    def session_start_hooks(self) -> None:
        ctx = "PROJECT MEMORY\n\n" + "\n".join(self.rng.choices(ZH_SENTENCES + EN_SENTENCES, k=12))
        if self.startup_bytes:
            ctx += "\n\n" + self.long_text(self.startup_bytes)
            self.startup_bytes = 0
        stdout = json.dumps({"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": ctx}}, indent=2)
        self.attachment({"type": "hook_success", "hookName": "SessionStart:startup", "toolUseID": self.new_uuid(),
                         "hookEvent": "SessionStart", "content": "", "stdout": stdout, "stderr": "", "exitCode": 0,
                         "command": "${CLAUDE_PLUGIN_ROOT}/hooks/session-start.sh", "durationMs": self.rng.randint(20, 300)})
        self.attachment({"type": "hook_additional_context", "content": [ctx], "hookName": "SessionStart",
                         "toolUseID": "SessionStart", "hookEvent": "SessionStart"})

    def huge_text(self) -> str:
        """One very long typed message (pasted logs and chat), about ``huge_bytes`` bytes."""
        text = self.long_text(self.huge_bytes)
        self.huge_bytes = 0
        return text

    def long_text(self, size_bytes: int) -> str:
        """Pasted logs and chat, about ``size_bytes`` bytes."""
        parts, size = [], 0
        while size < size_bytes:
            part = self.sentences(20, 40, True, True) + "\n" + "\n".join(self.rng.choices(self.pools.log, k=20))
            parts.append(part)
            size += len(part.encode()) + 2
        return "\n\n".join(parts)

    def typed_prompt(self, first: bool) -> None:
        """queue-operation pair, file-history-snapshot, then the user record."""
        text = self.huge_text() if self.huge_bytes and not first else self.user_text()
        self.last_prompt = text
        self.file_only({"type": "queue-operation", "operation": "enqueue", "timestamp": self.clock.tick(*TURN_GAP_MS),
                        "sessionId": self.session_id, "content": text})
        self.file_only({"type": "queue-operation", "operation": "dequeue", "timestamp": self.clock.tick(1, 5),
                        "sessionId": self.session_id})
        u = self.new_uuid()
        self.file_only({"type": "file-history-snapshot", "messageId": u,
                        "snapshot": {"messageId": u, "trackedFileBackups": self.tracked_backups(),
                                     "timestamp": self.clock.tick(1, 5)},
                        "isSnapshotUpdate": False})
        if first:
            content = [{"type": "text", "text": self.claude_md()}, {"type": "text", "text": text}]
        elif self.rng.random() < 0.15:
            reminder = ("<system-reminder>\nThe user opened the file /home/dev/ktr/shared/src/read.rs in the IDE. "
                        "This may or may not be related to the current task.\n</system-reminder>")
            if self.rng.random() < 0.5:
                content = reminder + "\n" + text
            else:
                content = [{"type": "text", "text": reminder}, {"type": "text", "text": text}]
        else:
            content = text
        chained = not first or self.leaf is not None  # after a startup context written first
        rec = {"parentUuid": self.leaf if chained else None, "isSidechain": False, "promptId": self.new_uuid(),
               "type": "user", "message": {"role": "user", "content": content}, "uuid": u,
               "timestamp": self.clock.tick(1, 5), "permissionMode": "default", "promptSource": "user",
               "origin": {"kind": "human"}}
        rec.update(self.tail)
        self.w.write(rec)
        self.leaf = u
        if self.rng.random() < 0.1:
            self.attachment({"type": "hook_additional_context",
                             "content": ["<user-prompt-submit-hook>\n" + self.sentences(1, 2, True, True) +
                                         "\n</user-prompt-submit-hook>"],
                             "hookName": "UserPromptSubmit", "toolUseID": self.new_uuid(),
                             "hookEvent": "UserPromptSubmit"})

    def tracked_backups(self) -> dict:
        out = {}
        for path in self.rng.sample(SOURCE_PATHS, self.rng.randint(0, 3)):
            rel = path.removeprefix(self.cwd + "/")
            out[rel] = {"backupFileName": self.token(16).lower() + "@v2", "version": 2,
                        "backupTime": self.clock.now()}
        return out

    def channel_envelope(self) -> tuple[str, str]:
        self.telegram_msg_id += self.rng.randint(1, 3)
        who = self.rng.choice(TELEGRAM_USERS)
        words = self.sentences(1, 2, True, self.rng.random() < 0.4)
        text = (f'<channel source="{TELEGRAM_SOURCE}" chat_id="1" message_id="{self.telegram_msg_id}" '
                f'user="{who}" ts="{self.clock.now()}">\n{words}\n</channel>')
        return text, str(self.telegram_msg_id)

    def channel_prompt(self) -> str:
        """A Telegram message delivered as an isMeta user record; returns its message id."""
        self.clock.tick(*TURN_GAP_MS)
        text, mid = self.channel_envelope()
        self.leaf = self.chain_record({"promptId": self.new_uuid(), "type": "user",
                                       "message": {"role": "user", "content": text}, "isMeta": True,
                                       "origin": {"kind": "channel", "server": TELEGRAM_SOURCE}})
        return mid

    def queued_channel_message(self) -> None:
        """A channel message that arrived mid-turn (queued_command attachment)."""
        self.count_user_speech()
        text, _ = self.channel_envelope()
        self.attachment({"type": "queued_command", "prompt": text, "commandMode": "prompt",
                         "origin": {"kind": "channel", "server": TELEGRAM_SOURCE}, "timestamp": self.clock.now()})

    # ---- assistant replies -------------------------------------------------

    def api_request(self) -> str:
        ref = self.new_uuid()
        self.file_only({"type": "api-request", "sessionId": self.session_id, "id": ref, "timestamp": self.clock.tick(50, 400),
                        "version": VERSION, "querySource": "repl_main_thread",
                        "params": {"model": MODEL, "max_tokens": 128000, "thinking": {"type": "adaptive", "display": "omitted"},
                                   "output_config": {"effort": "medium"}},
                        "keep": 0, "requestDigest": self.token(64).lower()})
        return ref

    def assistant_line(self, msg_id: str, req_id: str, ref: str, block: dict, stop: str | None, index: int) -> str:
        """One content block of an API reply, as its own assistant line."""
        fields = {"message": {"id": msg_id, "type": "message", "role": "assistant", "model": MODEL, "content": [block],
                              "stop_reason": stop, "stop_sequence": None,
                              "usage": {"input_tokens": self.rng.randint(3, 40),
                                        "cache_creation_input_tokens": self.rng.randint(0, 9000),
                                        "cache_read_input_tokens": self.rng.randint(20000, 180000),
                                        "output_tokens": self.rng.randint(20, 3000), "service_tier": "standard"}},
                  "apiBlockIndex": index, "requestId": req_id, "requestRef": ref, "type": "assistant"}
        return self.chain_record(fields, ts=self.clock.tick(300, 9000))

    def reply(self, tools: list[tuple[str, dict]], text: str | None) -> list[tuple[str, str, str, dict]]:
        """One API reply: thinking?, text?, tool calls. Returns [(tool_use uuid, id, name, input)]."""
        ref = self.api_request()
        msg_id, req_id = self.new_message_id(), "req_011" + self.token(21)
        blocks = []
        if self.rng.random() < (0.2 if self.mix == "chat" else 0.7):
            thinking = self.rng.choice(THINKING_EN) if self.rng.random() < 0.2 else ""
            blocks.append({"type": "thinking", "thinking": thinking, "signature": self.signature()})
        if text:
            blocks.append({"type": "text", "text": text})
            self.spoke = True
        if any(name == REPLY_TOOL for name, _ in tools):
            self.spoke = True
        calls = []
        for name, inp in tools:
            calls.append((self.new_tool_id(), name, inp))
            blocks.append({"type": "tool_use", "id": calls[-1][0], "name": name, "input": inp})
        out = []
        for i, block in enumerate(blocks):
            stop = ("tool_use" if tools else "end_turn") if i == len(blocks) - 1 else None
            self.leaf = self.assistant_line(msg_id, req_id, ref, block, stop, i)
            if block["type"] == "tool_use":
                out.append((self.leaf, block["id"], block["name"], block["input"]))
        return out

    def tool_results(self, calls: list[tuple[str, str, str, dict]], remaining: int) -> None:
        """Write one result per call, in completion order, each hanging off its tool_use line.

        As in Claude Code 2.1.328, the chain continues from the last result written;
        the other calls and results stay as siblings sharing the reply's message.id.
        """
        order = list(calls)
        self.rng.shuffle(order)
        for tu_uuid, tool_id, name, inp in order:
            content, tur, is_error = self.tool_output(name, inp, remaining // max(1, len(calls)))
            block = {"tool_use_id": tool_id, "type": "tool_result", "content": content}
            if is_error is not None:
                block["is_error"] = is_error
            nbytes = len(dumps(block)) + (len(dumps(tur)) if tur is not None else 0)
            fields = {"promptId": self.new_uuid(), "type": "user", "message": {"role": "user", "content": [block]}}
            after = {"toolUseResult": tur} if tur is not None else {}
            after["sourceToolAssistantUUID"] = tu_uuid
            self.leaf = self.chain_record(fields, after, parent=tu_uuid, use_leaf=False,
                                          tool_result_bytes=nbytes, ts=self.clock.tick(20, 30000))

    # ---- tool outputs --------------------------------------------------------

    def output_size(self, cap: int) -> int:
        """Heavy-tailed size of one tool output in bytes."""
        r = self.rng.random()
        if r < 0.55:
            n = self.rng.randint(200, 4000)
        elif r < 0.90:
            n = self.rng.randint(5000, 50000)
        else:
            n = self.rng.randint(80_000, 350_000)
        return max(200, min(n, cap))

    def lines_of(self, pool: list[str], nbytes: int, contiguous: bool) -> list[str]:
        avg = 48 if pool is not self.pools.log else self.pools.avg_log
        k = max(1, int(nbytes / avg))
        if contiguous:
            start = self.rng.randrange(len(pool))
            return [pool[(start + i) % len(pool)] for i in range(k)]
        return self.rng.choices(pool, k=k)

    def tool_output(self, name: str, inp: dict, cap: int):
        """Return (tool_result content, toolUseResult or None, is_error or None)."""
        if name == "Bash":
            stdout = "\n".join(self.lines_of(self.pools.log, self.output_size(cap), False))
            tur = {"stdout": stdout, "stderr": "", "interrupted": False, "isImage": False, "noOutputExpected": False}
            content = stdout
            if len(stdout) > 30000 and self.rng.random() < 0.5:
                content = (f"<persisted-output>\nOutput too large ({len(stdout) / 1024:.1f}KB). Full output saved to: "
                           f"/home/dev/.claude/projects/-home-dev-ktr/{self.session_id}/tool-results/"
                           f"{self.token(9).lower()}.txt\n\nPreview (first 2KB):\n{stdout[:2000]}\n...\n</persisted-output>")
            return content, tur, False
        if name == "Read":
            lines = self.lines_of(self.pools.files[inp["file_path"]], self.output_size(cap), True)
            numbered = "\n".join(f"{i}\t{line}" for i, line in enumerate(lines, 1))
            tur = {"type": "text", "file": {"filePath": inp["file_path"], "content": "\n".join(lines),
                                            "numLines": len(lines), "startLine": 1, "totalLines": len(lines)}}
            return numbered, (tur if self.rng.random() < 0.8 else None), None
        if name == "Grep":
            lines = self.lines_of(self.pools.log, self.output_size(cap), False)
            body = "\n".join(f"{self.rng.choice(SOURCE_PATHS)}:{i + 1}:{line}" for i, line in enumerate(lines))
            tur = {"mode": "content", "numFiles": len(SOURCE_FILES), "filenames": [], "content": body, "numLines": len(lines)}
            return body, tur, None
        if name == "Edit":
            path = inp["file_path"]
            original = "\n".join(self.lines_of(self.pools.files[path], self.output_size(cap), True))
            tur = {"filePath": path, "oldString": inp["old_string"], "newString": inp["new_string"],
                   "originalFile": original,
                   "structuredPatch": [{"oldStart": 12, "oldLines": 1, "newStart": 12, "newLines": 1,
                                        "lines": ["-" + inp["old_string"], "+" + inp["new_string"]]}],
                   "userModified": False, "replaceAll": False}
            return f"The file {path} has been updated successfully.", tur, None
        if name == REPLY_TOOL:
            sent = [{"type": "text", "text": f"sent (id: {self.telegram_msg_id + 1})"}]
            return sent, sent, None
        raise ValueError(name)

    def random_tool(self) -> tuple[str, dict]:
        r = self.rng.random()
        if r < 0.45:
            cmd, desc = self.rng.choice(BASH_COMMANDS)
            return "Bash", {"command": cmd, "description": desc}
        path = self.rng.choices(SOURCE_PATHS, SOURCE_WEIGHTS)[0]
        if r < 0.85:
            return "Read", {"file_path": path}
        if r < 0.95:
            return "Grep", {"pattern": self.rng.choice(["TODO", "unwrap\\(\\)", "重试", "timeout"]),
                            "path": self.cwd, "output_mode": "content", "-n": True}
        return "Edit", {"file_path": path, "old_string": self.rng.choice(self.pools.files[path]),
                        "new_string": self.rng.choice(self.pools.files[path])}

    # ---- turns -------------------------------------------------------------

    def count_user_speech(self) -> None:
        """User speech opens a new turn only after assistant speech (SPEC §6)."""
        self.prompts += 1
        if self.spoke or self.turns == 0:
            self.turns += 1
        self.spoke = False

    def turn(self, first: bool) -> None:
        self.count_user_speech()
        channel = not first and self.rng.random() < 0.25
        # A huge startup context comes first, as Claude Code writes it
        # (the default order is kept: the seeded files stay the same).
        early_start = first and self.startup_bytes
        if early_start:
            self.session_start_hooks()
        if channel:
            chat_msg = self.channel_prompt()
        else:
            self.typed_prompt(first)
            chat_msg = None
        if first:
            if not early_start:
                self.session_start_hooks()
            self.skill_listing(initial=True)
        if self.mix == "chat":
            steps = self.rng.choice((0, 0, 0, 0, 0, 0, 0, 0, 1, 1))
        else:
            steps = self.rng.choice((0, 1, 1, 2, 2, 3, 3, 4, 5, 6, 8))
        for _ in range(steps):
            remaining = CHAT_TOOL_BYTES if self.mix == "chat" else max(2000, self.target - self.w.bytes)
            ntools = self.rng.choice((1, 1, 1, 1, 2, 2, 3))
            text = self.assistant_text(final=False) if self.rng.random() < 0.35 else None
            calls = self.reply([self.random_tool() for _ in range(ntools)], text)
            self.tool_results(calls, remaining)
            if self.rng.random() < 0.04:
                self.queued_channel_message()
            if self.w.bytes >= self.target and not self.max_turns:
                break
        answer = self.assistant_text(final=True)
        if chat_msg is not None:
            calls = self.reply([(REPLY_TOOL, {"chat_id": "1", "text": answer, "reply_to": chat_msg})], None)
            self.tool_results(calls, 1000)
            if self.rng.random() < 0.3:
                self.reply([], self.assistant_text(final=False))
        else:
            self.reply([], answer)
        self.leaf = self.chain_record({
            "type": "system", "subtype": "stop_hook_summary", "hookCount": 1,
            "hookInfos": [{"command": "/home/dev/.local/bin/ktr-stop", "durationMs": self.rng.randint(1, 4)}],
            "hookErrors": [], "failedHookErrorIndexes": [], "hookAdditionalContext": [],
            "preventedContinuation": False, "stopReason": "", "hasOutput": False, "level": "suggestion"},
            {"toolUseID": self.new_uuid()})
        if self.last_prompt and not channel:
            self.file_only({"type": "last-prompt", "lastPrompt": self.last_prompt.replace("\n", " ")[:200],
                            "leafUuid": self.leaf, "sessionId": self.session_id})

    def compact(self) -> None:
        """/compact: boundary (parentUuid null, logicalParentUuid) + summary record."""
        self.file_only({"type": "queue-operation", "operation": "enqueue", "timestamp": self.clock.tick(),
                        "sessionId": self.session_id, "content": "/compact"})
        self.file_only({"type": "queue-operation", "operation": "dequeue", "timestamp": self.clock.tick(1, 5),
                        "sessionId": self.session_id})
        boundary = self.new_uuid()
        rec = {"parentUuid": None, "logicalParentUuid": self.leaf, "isSidechain": False, "type": "system",
               "subtype": "compact_boundary", "content": "Conversation compacted", "isMeta": False,
               "timestamp": self.clock.tick(2000, 9000), "uuid": boundary, "level": "info",
               "compactMetadata": {"trigger": "manual", "preTokens": self.rng.randint(150000, 190000),
                                   "durationMs": self.rng.randint(20000, 90000)}}
        rec.update(self.tail)
        self.w.write(rec)
        self.leaf = boundary
        summary = ("This session is being continued from a previous conversation that ran out of context. "
                   "The summary below covers the earlier portion of the conversation.\n\nSummary:\n"
                   "1. Primary Request and Intent:\n   " + self.sentences(3, 6, True, True) +
                   "\n\n2. Key Technical Concepts:\n" + "\n".join(self.rng.sample(BULLETS, 5)) +
                   "\n\n6. All user messages:\n" + "\n".join("    - " + self.sentences(1, 1, True, True) for _ in range(12)) +
                   "\n\n7. Pending Tasks:\n   - " + self.rng.choice(ZH_SENTENCES) +
                   "\n\nContinue the conversation from where it left off without asking the user any further questions.")
        self.leaf = self.chain_record({"promptId": self.new_uuid(), "type": "user",
                                       "message": {"role": "user", "content": summary},
                                       "isVisibleInTranscriptOnly": True, "isCompactSummary": True})
        self.skill_listing(initial=False)
        self.compacted = True

    def more(self) -> bool:
        if self.max_turns:
            return self.turns < self.max_turns
        return self.w.bytes < self.target

    def run(self) -> None:
        first = True
        while first or self.more():
            if (not first and not self.compacted and self.mix == "tools" and not self.max_turns
                    and self.w.bytes >= self.target // 2):
                self.compact()
            self.turn(first)
            first = False


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size-mb", type=float, default=100.0, help="target size in MB (10^6 bytes; default 100)")
    p.add_argument("--seed", type=int, default=1, help="RNG seed (default 1)")
    p.add_argument("--out", required=True, help="output path ('-' for stdout)")
    p.add_argument("--mix", choices=("tools", "chat"), default="tools",
                   help="tools: ~95%% tool results (default); chat: conversation-heavy, few small tool calls, no /compact")
    p.add_argument("--turns", type=int, default=0, help="stop after this many turns (overrides --size-mb)")
    p.add_argument("--huge-message-mb", type=float, default=0.0,
                   help="one typed prompt (the second) of about this many MB")
    p.add_argument("--huge-startup-mb", type=float, default=0.0,
                   help="a SessionStart hook context (the first records) of about this many MB")
    a = p.parse_args(argv)
    if a.size_mb <= 0 or a.turns < 0 or a.huge_message_mb < 0 or a.huge_startup_mb < 0:
        p.error("--size-mb must be > 0; --turns, --huge-message-mb and --huge-startup-mb must be >= 0")
    target = int(a.size_mb * MB)
    out = sys.stdout.buffer if a.out == "-" else open(a.out, "wb", buffering=1 << 20)
    try:
        gen = SessionGenerator(a.seed, target, out, a.mix, a.turns, int(a.huge_message_mb * MB),
                               int(a.huge_startup_mb * MB))
        gen.run()
    finally:
        if out is not sys.stdout.buffer:
            out.close()
    w = gen.w
    print(f"gen_transcript: session={gen.session_id} records={w.records} turns={gen.turns} prompts={gen.prompts} "
          f"bytes={w.bytes} ({w.bytes / MB:.1f} MB) tool_result_bytes={100 * w.tool_result_bytes / w.bytes:.1f}%",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
