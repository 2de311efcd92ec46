#!/usr/bin/env python3
"""Check a generated transcript and report its shape and byte mix.

Checks (exit 1 and list the problems when any fails):

* every line is valid UTF-8 JSON holding an object;
* uuids are unique; every ``parentUuid`` is null or names an earlier uuid;
  null parents appear only on the first chain record and on
  ``compact_boundary`` records, whose ``logicalParentUuid`` names an earlier
  uuid and which are followed by an ``isCompactSummary`` user record;
* top-level ``timestamp``s are parseable ISO-8601 and strictly increasing;
* assistant lines sharing ``message.id`` are consecutive lines;
* ``sessionId``/``version`` are the same on every record carrying them;
* every ``tool_result`` answers an earlier ``tool_use`` and every
  ``tool_use`` gets exactly one result.

Byte mix: each record's parts are re-serialised compactly (the way the
generator and Claude Code write them) and attributed to a category; what is
left of the line is ``envelope`` (metadata keys, uuids, usage...).

Usage: ``python3 bench/validate_transcript.py FILE [--json]``
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import sys


def size(obj) -> int:
    """Bytes of ``obj`` serialised compactly with raw UTF-8."""
    return len(json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def escapes(obj) -> int:
    """Backslashes in the serialised form: one per JSON escape (\\n, \\", \\u001b ...)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).count("\\")


FILE_ONLY = {"queue-operation", "last-prompt", "file-history-snapshot", "file-history-delta", "api-request",
             "api-request-blob", "api-request-shape", "cost-state", "ai-title", "progress", "mode", "atis-latch",
             "tools-used", "permission-mode", "custom-title"}


class Report:
    """Accumulates counters, byte categories and problems while streaming."""

    def __init__(self):
        self.lines = 0
        self.bytes = 0
        self.types = collections.Counter()
        self.attachments = collections.Counter()
        self.cat = collections.Counter()
        self.counts = collections.Counter()
        self.problems: list[str] = []
        self.escapes = 0
        self.tool_escapes = 0

    def problem(self, lineno: int, msg: str) -> None:
        if len(self.problems) < 50:
            self.problems.append(f"line {lineno}: {msg}")
        self.counts["problems"] += 1


def parse_ts(s) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
    except (AttributeError, ValueError):
        return None


def classify_user(rec: dict, rep: Report) -> int:
    """Attribute a user record's content; return the bytes attributed."""
    msg = rec.get("message") or {}
    content = msg.get("content")
    used = 0
    if "toolUseResult" in rec:
        n = size(rec["toolUseResult"])
        rep.cat["tool_result"] += n
        rep.tool_escapes += escapes(rec["toolUseResult"])
        used += n
    if rec.get("isCompactSummary"):
        n = size(content)
        rep.cat["compact_summary"] += n
        rep.counts["compact_summaries"] += 1
        return used + n
    if isinstance(content, list):
        for block in content:
            n = size(block)
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "tool_result":
                rep.cat["tool_result"] += n
                rep.tool_escapes += escapes(block)
            elif kind == "text" and block.get("text", "").startswith("<system-reminder>"):
                rep.cat["injected_block"] += n
                rep.counts["system_reminder_blocks"] += 1
            else:
                rep.cat["user_text"] += n
            used += n
        if not any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
            rep.counts["typed_prompts"] += 1
            if any(isinstance(b, dict) and b.get("text", "").startswith("<system-reminder>") for b in content):
                rep.counts["prompts_with_system_reminder"] += 1
    elif isinstance(content, str):
        n = size(content)
        used += n
        if rec.get("isMeta") and content.startswith("<channel "):
            rep.cat["channel_message"] += n
            rep.counts["channel_messages"] += 1
        else:
            rep.cat["user_text"] += n
            rep.counts["typed_prompts"] += 1
            if content.startswith("<system-reminder>"):
                rep.counts["prompts_with_system_reminder"] += 1
    return used


def classify_assistant(rec: dict, rep: Report) -> int:
    used = 0
    for block in (rec.get("message") or {}).get("content") or []:
        n = size(block)
        kind = block.get("type")
        if kind == "thinking":
            rep.cat["thinking"] += n
            rep.counts["thinking_blocks"] += 1
            if block.get("signature"):
                rep.counts["thinking_with_signature"] += 1
        elif kind == "text":
            rep.cat["assistant_text"] += n
        elif kind == "tool_use":
            rep.cat["tool_use"] += n
            rep.counts["tool_calls"] += 1
            if block.get("name", "").endswith("__reply"):
                rep.counts["reply_tool_calls"] += 1
        else:
            rep.cat["other"] += n
        used += n
    return used


def validate(path: str) -> Report:
    rep = Report()
    uuids: set[str] = set()
    tool_uses: dict[str, int] = {}
    answered: set[str] = set()
    session = version = None
    last_ts = None
    chain_started = False
    prev_msg_id = None
    closed_msg_ids: set[str] = set()
    expect_summary_after = None
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            rep.lines += 1
            rep.bytes += len(raw)
            rep.escapes += raw.count(b"\\")
            try:
                rec = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                rep.problem(lineno, f"not valid JSON/UTF-8: {e}")
                continue
            if not isinstance(rec, dict):
                rep.problem(lineno, "not a JSON object")
                continue
            kind = rec.get("type")
            rep.types[kind] += 1
            line_bytes = len(raw.rstrip(b"\n"))

            # identity and ordering
            for key, seen in (("sessionId", session), ("version", version)):
                if key in rec:
                    if seen is None:
                        session = rec[key] if key == "sessionId" else session
                        version = rec[key] if key == "version" else version
                    elif rec[key] != seen:
                        rep.problem(lineno, f"{key} changes: {rec[key]!r} != {seen!r}")
            if "timestamp" in rec:
                ts = parse_ts(rec["timestamp"])
                if ts is None:
                    rep.problem(lineno, f"unparseable timestamp {rec['timestamp']!r}")
                elif last_ts is not None and ts <= last_ts:
                    rep.problem(lineno, f"timestamp not increasing: {rec['timestamp']}")
                else:
                    last_ts = ts

            # chain
            if "uuid" in rec:
                u = rec["uuid"]
                if u in uuids:
                    rep.problem(lineno, f"duplicate uuid {u}")
                parent = rec.get("parentUuid", "MISSING")
                if parent == "MISSING":
                    rep.problem(lineno, "chain record without parentUuid field")
                elif parent is None:
                    if kind == "system" and rec.get("subtype") == "compact_boundary":
                        rep.counts["compact_boundaries"] += 1
                        if rec.get("logicalParentUuid") not in uuids:
                            rep.problem(lineno, "compact_boundary logicalParentUuid does not name an earlier uuid")
                        expect_summary_after = u
                    elif chain_started:
                        rep.problem(lineno, "unexpected second root (parentUuid null)")
                    else:
                        rep.counts["roots"] += 1
                elif parent not in uuids:
                    rep.problem(lineno, f"parentUuid {parent} does not name an earlier uuid")
                if expect_summary_after and u != expect_summary_after:
                    if not (kind == "user" and rec.get("isCompactSummary") and parent == expect_summary_after):
                        rep.problem(lineno, "compact_boundary not followed by its isCompactSummary record")
                    expect_summary_after = None
                uuids.add(u)
                chain_started = True

            # assistant message ids
            msg = rec.get("message") if isinstance(rec.get("message"), dict) else {}
            mid = msg.get("id") if kind == "assistant" else None
            if mid != prev_msg_id:
                if prev_msg_id is not None:
                    closed_msg_ids.add(prev_msg_id)
                if mid in closed_msg_ids:
                    rep.problem(lineno, f"assistant lines of message.id {mid} are not consecutive")
                prev_msg_id = mid

            # tool pairing
            if kind == "assistant":
                for b in msg.get("content") or []:
                    if b.get("type") == "tool_use":
                        tool_uses[b["id"]] = lineno
            elif kind == "user" and isinstance(msg.get("content"), list):
                for b in msg["content"]:
                    if isinstance(b, dict) and b.get("type") == "tool_result":
                        tid = b.get("tool_use_id")
                        if tid not in tool_uses:
                            rep.problem(lineno, f"tool_result for unknown tool_use {tid}")
                        elif tid in answered:
                            rep.problem(lineno, f"second tool_result for {tid}")
                        answered.add(tid)

            # byte mix
            if kind in FILE_ONLY:
                rep.cat["file_only"] += line_bytes
                continue
            if kind == "user":
                used = classify_user(rec, rep)
            elif kind == "assistant":
                used = classify_assistant(rec, rep)
            elif kind == "attachment":
                att = rec.get("attachment") or {}
                rep.attachments[att.get("type")] += 1
                used = size(att)
                rep.cat["attachment"] += used
                if att.get("type") == "queued_command":
                    rep.counts["queued_commands"] += 1
                    if att.get("commandMode") == "prompt" and (att.get("origin") or {}).get("kind") == "channel":
                        rep.counts["queued_channel_prompts"] += 1
            elif kind == "system":
                used = line_bytes
                rep.cat["system"] += used
            else:
                used = line_bytes
                rep.cat["unknown:" + str(kind)] += used
            rep.cat["envelope"] += line_bytes - used
    missing = [t for t in tool_uses if t not in answered]
    if missing:
        rep.problem(0, f"{len(missing)} tool_use blocks without a result (first {missing[0]})")
    rep.cat["newlines"] = rep.lines
    rep.counts["session_id"] = session
    rep.counts["version"] = version
    return rep


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Validate a generated Claude Code transcript and report its byte mix.")
    p.add_argument("file")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    a = p.parse_args(argv)
    rep = validate(a.file)
    mix = {k: round(100 * v / rep.bytes, 2) for k, v in sorted(rep.cat.items(), key=lambda kv: -kv[1])}
    density = {"file": round(1000 * rep.escapes / max(1, rep.bytes), 1),
               "tool_results": round(1000 * rep.tool_escapes / max(1, rep.cat["tool_result"]), 1)}
    out = {"file": a.file, "lines": rep.lines, "bytes": rep.bytes, "byte_mix_percent": mix,
           "escapes_per_kb": density,
           "record_types": dict(rep.types.most_common()), "attachments": dict(rep.attachments.most_common()),
           "counts": dict(rep.counts), "problems": rep.problems, "ok": not rep.problems}
    if a.json:
        print(json.dumps(out, ensure_ascii=False, indent=2))
    else:
        print(f"{a.file}: {rep.lines} lines, {rep.bytes} bytes ({rep.bytes / 1e6:.1f} MB)")
        print("byte mix %: " + ", ".join(f"{k} {v}" for k, v in mix.items()))
        print(f"JSON escapes per KB: whole file {density['file']}, tool results {density['tool_results']}")
        print("record types: " + ", ".join(f"{k} {v}" for k, v in rep.types.most_common()))
        print("attachments: " + ", ".join(f"{k} {v}" for k, v in rep.attachments.most_common()))
        print("counts: " + ", ".join(f"{k} {v}" for k, v in rep.counts.items()))
        print("OK" if not rep.problems else "PROBLEMS:\n  " + "\n  ".join(rep.problems))
    return 0 if not rep.problems else 1


if __name__ == "__main__":
    sys.exit(main())
