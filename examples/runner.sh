#!/bin/sh
# runner.sh — a `claude -p --resume` loop for ktr's pointer mode.
#
# Each prompt (one per line, from stdin or a FIFO) runs as
#     cd CLAUDE_WORKDIR && claude -p [ARG...] --resume "$(cat POINTER)" "$prompt"
# and never overlaps a switch:
#   - after each run it waits while an operation is on its way (the Stop
#     hook of that run starts prepare → verify → activate when a rebuild or
#     a rollback was requested, e.g. through the MCP tool): the next prompt
#     starts only when the pointer names the session it must resume;
#   - before each run, a rebuild requested while nothing ran (`ktr request
#     --confirm REBUILD`) is carried out here with `ktr-prepare`;
#   - ktr-prompt (the UserPromptSubmit hook) marks any turn that starts
#     anyway, and activation then refuses to switch (back to pending).
#   - a prompt whose run Claude Code refused because ktr's compaction guard
#     blocked the auto-compaction (`claude -p` exits 1, "Prompt is too
#     long") is sent once more, to the rebuilt session, when the switch
#     went through; ktr left it out of that session for this.
# Whoever ran it, each operation's outcome is printed once, on stderr:
#     runner.sh: operation ID activated: now resuming NEW
#     runner.sh: operation ID failed: <reason>; staying on OLD
# If a rebuild fails the pointer is untouched and the loop carries on.
#
# Usage:
#   runner.sh --config C [--pointer P] [--project D] [--fifo F] [-- ARG...]
#     C  the ktr config (activation = "pointer"); the pointer file, the
#        project dir and the directory claude runs in are read from it
#     P  optional: must be the config's resume_pointer_path (checked)
#     D  optional: must be the config's project_dir (checked)
#     F  read prompts from this FIFO (created 0600 if missing), forever
#     ARG  extra arguments for every `claude -p`, e.g. the launch flags and
#        `--allowedTools mcp__ktr__thread_rebuild_request` (headless: no
#        one can answer a permission prompt)
#
# Environment: CLAUDE (default claude), KTR (default ktr), KTR_PREPARE
# (default ktr-prepare), RUNNER_WAIT (seconds to wait for an operation,
# default 600). No shell string is ever built from a prompt: every value
# goes to the programs as one argument.
set -u

me=runner.sh
usage() {
    sed -n '25,36p' "$0" | sed 's/^# \{0,1\}//'
}
say() {
    printf '%s: %s\n' "$me" "$*" >&2
}

config='' pointer_arg='' project_arg='' fifo=''
while [ $# -gt 0 ]; do
    case $1 in
        --config | --pointer | --project | --fifo)
            if [ $# -lt 2 ]; then
                say "$1 needs a value"
                exit 2
            fi
            case $1 in
                --config) config=$2 ;;
                --pointer) pointer_arg=$2 ;;
                --project) project_arg=$2 ;;
                --fifo) fifo=$2 ;;
            esac
            shift 2
            ;;
        -h | --help)
            usage
            exit 0
            ;;
        --)
            shift
            break
            ;;
        *)
            say "unknown argument $1; see $me --help"
            exit 2
            ;;
    esac
done
if [ -z "$config" ]; then
    say "--config is required; see $me --help"
    exit 2
fi
CLAUDE=${CLAUDE:-claude}
KTR=${KTR:-ktr}
KTR_PREPARE=${KTR_PREPARE:-ktr-prepare}
RUNNER_WAIT=${RUNNER_WAIT:-600}

# One value of the config, as ktr resolves it.
setting() {
    "$KTR" --config "$config" config "$1" </dev/null
}
activation=$(setting activation) || {
    say "cannot read $config with $KTR (fix the config, or set KTR to the ktr binary)"
    exit 2
}
if [ "$activation" != pointer ]; then
    say "$config has activation = \"$activation\"; the runner needs activation = \"pointer\""
    exit 2
fi
pointer=$(setting resume_pointer_path) || exit 2
project=$(setting project_dir) || exit 2
workdir=$(setting claude_workdir) || exit 2
state=$(setting state_dir) || exit 2
if [ -n "$pointer_arg" ] && [ "$pointer_arg" != "$pointer" ]; then
    say "--pointer $pointer_arg is not the config's resume_pointer_path $pointer; ktr would move that one"
    exit 2
fi
if [ -n "$project_arg" ] && [ "$project_arg" != "$project" ]; then
    say "--project $project_arg is not the config's project_dir $project"
    exit 2
fi

# The session the pointer names; fails loudly on an empty or odd pointer.
session() {
    id=$(cat "$pointer" 2>/dev/null) || id=''
    case $id in
        '' | *[!A-Za-z0-9_-]*)
            say "pointer $pointer does not name a session; write the session id into it"
            return 1
            ;;
    esac
    printf '%s\n' "$id"
}

# Read the latest operation into op_id, op_status, op_error (empty when
# there is none); ktr's errors are printed, once per distinct message.
last_error='' op_id='' op_status='' op_error=''
latest() {
    if ! out=$("$KTR" --config "$config" status --json </dev/null 2>&1); then
        line=$(printf '%s\n' "$out" | head -n 1)
        if [ "$line" != "$last_error" ]; then
            say "cannot read the operation ($KTR status): $line"
            last_error=$line
        fi
        return 1
    fi
    last_error=''
    op_id=$(printf '%s\n' "$out" | sed -n 's/^  "id": "\(.*\)",$/\1/p')
    op_status=$(printf '%s\n' "$out" | sed -n 's/^  "status": "\(.*\)",$/\1/p')
    op_error=$(printf '%s\n' "$out" | sed -n 's/^  "error": "\(.*\)",$/\1/p')
}

# Print an operation's outcome once, whoever ran it.
reported=''
report() {
    [ -n "$op_id" ] || return 0
    [ "$reported" != "$op_id $op_status" ] || return 0
    case $op_status in
        activated) say "operation $op_id activated: now resuming $(session)" ;;
        rolled_back) say "operation $op_id rolled back${op_error:+ ($op_error)}: now resuming $(session)" ;;
        failed) say "operation $op_id failed: ${op_error:-see $KTR --config $config status}; resuming $(session)" ;;
        cancelled) say "operation $op_id cancelled" ;;
        pending) say "operation $op_id not switched yet: waits for the next prompt (see $KTR --config $config status)" ;;
        *) return 0 ;;
    esac
    reported="$op_id $op_status"
}

# Wait while an operation is on its way, then report where it ended (a
# pending one only when it went back to pending while we waited).
settle() {
    waited=0
    latest || return 0
    while :; do
        case $op_status in
            scheduled | running | verifying | activating | rollback_scheduled | rolling_back) ;;
            *) break ;;
        esac
        if [ "$waited" -ge "$((RUNNER_WAIT * 5))" ]; then
            say "operation $op_id is still $op_status after ${RUNNER_WAIT}s; going on with $(session)"
            return 0
        fi
        sleep 0.2
        waited=$((waited + 1))
        latest || return 0
    done
    if [ "$op_status" != pending ] || [ "$waited" -gt 0 ]; then
        report
    fi
}

# Carry out a rebuild requested while nothing ran (the runner's "Stop").
rebuild_if_pending() {
    latest || return 0
    [ "$op_status" = pending ] || return 0
    id=$(session) || return 0
    say "rebuild pending: preparing a new session from $id"
    if ! "$KTR_PREPARE" --config "$config" --transcript "$project/$id.jsonl" </dev/null >&2; then
        say "rebuild did not complete; staying on $id"
    fi
    latest && report
}

run_prompt() {
    settle
    rebuild_if_pending
    id=$(session) || {
        say "prompt not run: no session to resume"
        return 0
    }
    prompt=$1
    shift
    (cd "$workdir" && exec "$CLAUDE" -p "$@" --resume "$id" "$prompt" </dev/null)
    status=$?
    [ "$status" -eq 0 ] || say "claude -p --resume $id exited with status $status"
    settle
    [ "$status" -eq 0 ] || resend_blocked "$id" "$prompt" "$@"
}

# The guard blocked the compaction this prompt triggered and the rebuild it
# started instead went through: send the prompt once more, to the rebuilt
# session. Claimed by renaming ktr's mark of it, so never twice.
resend_blocked() {
    old=$1 prompt=$2
    shift 2
    mark="$state/prompts/$old.blocked"
    [ -f "$mark" ] && [ "$op_status" = activated ] || return 0
    grep -qF "\"operation\":\"$op_id\"" "$mark" 2>/dev/null || return 0
    new=$(session) || return 0
    [ "$new" != "$old" ] || return 0
    mv "$mark" "$mark.resending" 2>/dev/null || return 0
    say "the prompt ktr's compaction guard blocked goes to the rebuilt session $new"
    (cd "$workdir" && exec "$CLAUDE" -p "$@" --resume "$new" "$prompt" </dev/null)
    status=$?
    rm -f "$mark.resending"
    [ "$status" -eq 0 ] || say "claude -p --resume $new exited with status $status"
    settle
}

# Read prompts until end of input.
loop() {
    while IFS= read -r prompt || [ -n "$prompt" ]; do
        [ -n "$prompt" ] || continue
        run_prompt "$prompt" "$@"
    done
}

if [ -n "$fifo" ]; then
    if [ ! -p "$fifo" ]; then
        mkfifo -m 600 "$fifo" || exit 1
    fi
    # Reopen after each writer closes: a FIFO loop runs until killed.
    while :; do
        loop "$@" <"$fifo"
    done
else
    loop "$@"
fi
