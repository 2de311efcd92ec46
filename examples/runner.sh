#!/bin/sh
# runner.sh — a `claude -p --resume` loop for ktr's pointer mode.
#
# Each prompt (one per line, from stdin or a FIFO) runs as
#     claude -p --resume "$(cat POINTER)" "$prompt"
# and between runs, when a rebuild is pending (`ktr request --confirm REBUILD`
# or the MCP tool), it runs `ktr-prepare --config C --transcript T`, which
# freezes the session, writes the rebuilt one, verifies it and moves the
# pointer, all before the next prompt. If the rebuild fails the pointer is
# untouched and the loop carries on with the old session.
#
# Usage:
#   runner.sh --config C --pointer P --project D [--fifo F]
#     C  the ktr config (activation = "pointer", resume_pointer_path = P)
#     P  the pointer file: it names the session to resume (write it once)
#     D  the Claude Code project dir holding <session>.jsonl (project_dir)
#     F  read prompts from this FIFO (created 0600 if missing), forever
#
# Environment: CLAUDE (default claude), KTR (default ktr), KTR_PREPARE
# (default ktr-prepare). No shell string is ever built from a prompt: every
# value goes to the programs as one argument.
set -u

me=runner.sh
usage() {
    sed -n '12,17p' "$0" | sed 's/^# \{0,1\}//'
}
say() {
    printf '%s: %s\n' "$me" "$*" >&2
}

config='' pointer='' project='' fifo=''
while [ $# -gt 0 ]; do
    case $1 in
        --config | --pointer | --project | --fifo)
            if [ $# -lt 2 ]; then
                say "$1 needs a value"
                exit 2
            fi
            case $1 in
                --config) config=$2 ;;
                --pointer) pointer=$2 ;;
                --project) project=$2 ;;
                --fifo) fifo=$2 ;;
            esac
            shift 2
            ;;
        -h | --help)
            usage
            exit 0
            ;;
        *)
            say "unknown argument $1; see $me --help"
            exit 2
            ;;
    esac
done
if [ -z "$config" ] || [ -z "$pointer" ] || [ -z "$project" ]; then
    say "--config, --pointer and --project are required; see $me --help"
    exit 2
fi
CLAUDE=${CLAUDE:-claude}
KTR=${KTR:-ktr}
KTR_PREPARE=${KTR_PREPARE:-ktr-prepare}

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

# Whether the latest operation waits to be carried out.
pending() {
    "$KTR" --config "$config" status --json </dev/null 2>/dev/null |
        grep -q '^  "status": "pending",$'
}

# Carry out a pending rebuild of the current session (the runner's "Stop").
rebuild_if_pending() {
    pending || return 0
    id=$(session) || return 0
    say "rebuild pending: preparing a new session from $id"
    if "$KTR_PREPARE" --config "$config" --transcript "$project/$id.jsonl" </dev/null >&2; then
        say "now resuming $(session)"
    else
        say "rebuild did not complete; staying on $id (see: $KTR --config $config status)"
    fi
}

run_prompt() {
    id=$(session) || return 1
    "$CLAUDE" -p --resume "$id" "$1" </dev/null
}

# Read prompts until end of input.
loop() {
    while IFS= read -r prompt || [ -n "$prompt" ]; do
        [ -n "$prompt" ] || continue
        rebuild_if_pending
        run_prompt "$prompt" || say "claude exited with status $?"
        rebuild_if_pending
    done
}

if [ -n "$fifo" ]; then
    if [ ! -p "$fifo" ]; then
        mkfifo -m 600 "$fifo" || exit 1
    fi
    # Reopen after each writer closes: a FIFO loop runs until killed.
    while :; do
        loop <"$fifo"
    done
else
    loop
fi
