#!/bin/bash
# Issue 11: reproduce every item against the binaries in $BIN, each in its own sandbox.
# Prints one line per check: item, what was done, what happened.
BIN=${BIN:-/work/wt/hostile/target/release}
base=$(mktemp -d /tmp/hostile/sb.XXXX)
line='{"type":"user","uuid":"u1","parentUuid":null,"sessionId":"s1","timestamp":"2026-01-01T00:00:00Z","message":{"role":"user","content":"hello"}}'
new() { T=$base/$1; mkdir -p $T/home $T/proj $T/state; export HOME=$T/home KTR_CONFIG=$T/config.toml; chmod 700 $T/state
  printf 'project_dir = "%s"\nstate_dir = "%s"\nactivation = "pointer"\nresume_pointer_path = "%s/pointer"\nverify_workdir_matches_project = false\nactivation_delay_seconds = 0\nstable_file_seconds = 1\nstable_file_timeout_seconds = 5\n' "$T/proj" "$T/state" "$T" > $KTR_CONFIG
  if [ -n "$2" ]; then k=${2%% =*}; sed -i "/^$k = /d" $KTR_CONFIG; echo "$2" >> $KTR_CONFIG; fi
  echo "$line" > $T/proj/s1.jsonl; }
r() { local s=$(date +%s.%N); timeout ${TO:-8} "$@" >$T/out 2>$T/err; rc=$?; el=$(echo "$(date +%s.%N) - $s" | bc | cut -c1-4); echo "rc=$rc ${el}s"; }
e() { head -c ${1:-140} $T/err | tr '\n' '|'; }
o() { head -c ${1:-140} $T/out | tr '\n' '|'; }
for k in healthcheck_seconds systemd_restart_timeout_seconds activation_delay_seconds; do
  new 1$k "$k = 1e300"
  echo "1 $k=1e300: status $(r $BIN/ktr status) $(e); stop $(echo '{}' | r $BIN/ktr-stop) $(o 80)"
done
new 1sd ''; sed -i 's|^state_dir = .*|state_dir = ""|' $KTR_CONFIG; echo "1 state_dir='': status $(r $BIN/ktr status) $(e)"
new 2a ''; mkfifo $T/state/active; mkdir -p $T/state/operations
echo "2 FIFO active: ktr-stop $(echo '{}' | r $BIN/ktr-stop) $(o 60); ops $(r $BIN/ktr ops)"
mkfifo $T/state/operations/0000aaaa-0000-4000-8000-000000000001.json
echo "2 FIFO op file: ops $(r $BIN/ktr ops) $(e 100); ktr-ack $(echo '{"session_id":"s1","source":"resume"}' | r $BIN/ktr-ack); doctor $(r $BIN/ktr doctor)"
new 2b ''; mkdir -p $T/state/operations; ln -s /dev/zero $T/state/active
echo "2 /dev/zero active: ktr-stop $(echo '{}' | r $BIN/ktr-stop) $(o 60)"
mkfifo $T/fifo.toml; echo "2 FIFO --config: ops $(r $BIN/ktr ops --config $T/fifo.toml) $(e)"
new 2c 'stable_file_seconds = 2'
( $BIN/ktr-prepare --transcript $T/proj/s1.jsonl --confirm REBUILD >$T/prep.out 2>&1; echo "rc=$?" >> $T/prep.out ) &
sleep 1; rm $T/proj/s1.jsonl; mkfifo $T/proj/s1.jsonl; wait_s=0
for i in $(seq 1 20); do grep -q rc= $T/prep.out && break; sleep 0.5; done
echo "2 FIFO swapped in during stability wait: prepare $(grep rc= $T/prep.out || echo HUNG) $(grep -o 'a FIFO[^;]*' $T/prep.out | head -1); status=$($BIN/ktr status --json 2>/dev/null | grep -o '"status": *"[a-z_]*"' | head -1)"
new 3 ''; echo SECRET > $base/outside.jsonl; sleep 0.05; ln -s $base/outside.jsonl $T/proj/z.jsonl
echo "3 newest is symlink out: plan $(r $BIN/ktr plan --json) secret_in_output=$(grep -c SECRET $T/out) source=$(grep -o '"source_path": *"[^"]*"' $T/out)"
rm $T/proj/z.jsonl; echo "$line" > $T/proj/s1.jsonl
( $BIN/ktr-prepare --transcript $T/proj/s1.jsonl --confirm REBUILD >$T/prep.out 2>&1; echo "rc=$?" >> $T/prep.out ) &
sleep 0.5; mv $T/proj/s1.jsonl $T/proj/s1.real; ln -s $base/outside.jsonl $T/proj/s1.jsonl
for i in $(seq 1 20); do grep -q rc= $T/prep.out && break; sleep 0.5; done
echo "3 symlink swapped in during stability wait: prepare $(grep rc= $T/prep.out) $(grep -o 'symlink[^;]*' $T/prep.out | head -1); candidates=$(ls $T/proj | grep -vc 's1\.')"
new 4 ''; echo orig > $T/victim.log; ln -s $T/victim.log $T/state/ktr.log
echo "4 ktr.log symlink: request $(r $BIN/ktr request --confirm REBUILD) $(e 120); victim lines=$(wc -l < $T/victim.log)"
rm $T/state/ktr.log; mkdir $T/outdir; ln -s $T/outdir $T/state/artifacts
ID=$(ls $T/state/operations | head -1 | sed 's/.json//')
echo "4 artifacts symlink: ktr-prepare $(r $BIN/ktr-prepare --transcript $T/proj/s1.jsonl) files_in_outside=$(ls $T/outdir | wc -l)"
new 4b ''; echo keep > $base/cand-0000.jsonl
python3 - "$T" "$base" <<'PY'
import json,sys
T,B=sys.argv[1],sys.argv[2]
op={"id":"0000aaaa-0000-4000-8000-000000000001","status":"running","created_at":"2026-01-01T00:00:00.000Z","updated_at":"2020-01-01T00:00:00.000Z","worker":{"pid":999999,"start_time":1,"stage":"prepare"},"candidate":{"session_id":"cand-0000","path":B+"/cand-0000.jsonl","sha256":"x"}}
import os; os.makedirs(T+"/state/operations",exist_ok=True)
open(T+"/state/operations/"+op["id"]+".json","w").write(json.dumps(op))
open(T+"/state/active","w").write(op["id"]+" running\n")
PY
KTR_WORKER_GRACE_SECONDS=0 r $BIN/ktr status >/dev/null; echo "4 edited candidate.path outside: status -> outside file exists=$([ -e $base/cand-0000.jsonl ] && echo yes || echo NO-DELETED)"
new 4c ''; mkdir -p $base/other; chmod 755 $base/other; chown nobody $base/other 2>/dev/null; sed -i "s|^state_dir = .*|state_dir = \"$base/other\"|" $KTR_CONFIG
echo "4 state dir of another user: doctor $(r $BIN/ktr doctor) $(grep -i 'state dir' $T/out | head -1)"
new 5 ''; mkdir -p $T/state/operations; echo '{"id":"0000aaaa-0000-4000-8000-000000000002","status":"exploded"}' > $T/state/operations/0000aaaa-0000-4000-8000-000000000002.json
echo "5 damaged: ops $(r $BIN/ktr ops) $(e 90); doctor $(r $BIN/ktr doctor) $(grep -i damaged $T/out | head -c 80)"
echo "5 repair: list $(r $BIN/ktr repair) $(o 60); move $(r $BIN/ktr repair --confirm REPAIR) aside=$(ls $T/state/damaged 2>/dev/null | wc -l) left=$(ls $T/state/operations | wc -l)"
new 6 ''; r $BIN/ktr request --confirm REBUILD >/dev/null; ID=$(ls $T/state/operations | sed 's/.json//')
python3 -c "import json,sys;p='$T/state/operations/$ID.json';d=json.load(open(p));d['status']='running';json.dump(d,open(p,'w'))"; rm $T/state/active
echo "6 active deleted while running: 2nd request $(r $BIN/ktr request --confirm REBUILD --reason two) $(e 100); ops=$(ls $T/state/operations | wc -l) active=$(cat $T/state/active 2>/dev/null)"
new 7 ''; sed -i 's|^state_dir = .*|state_dir = "st"|' $KTR_CONFIG; mkdir -p $T/cwd
echo "7 relative state_dir from another cwd: $(cd $T/cwd && r $BIN/ktr request --confirm REBUILD) state_in_cwd=$([ -e $T/cwd/st ] && echo yes || echo no) state_beside_config=$([ -e $T/st ] && echo yes || echo no)"
new 8 ''; mkdir -p $T/shared; chmod 1777 $T/shared; sed -i "s|^state_dir = .*|state_dir = \"$T/shared\"|" $KTR_CONFIG
echo "8 shared 1777 state dir: request $(r $BIN/ktr request --confirm REBUILD) $(e 100); mode=$(stat -c %a $T/shared)"
new 9 ''
printf 'not json\n{"jsonrpc":"2.0","id":7,"method":"initialize","params":"garbage"}\n[{"jsonrpc":"2.0","id":11,"method":"ping"}]\n' | timeout 5 $BIN/ktr-mcp > $T/mcp.out 2>/dev/null
echo "9 mcp: $(tr '\n' '|' < $T/mcp.out | head -c 400)"
python3 -c "print('{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"ping\",\"p\":\"'+'x'*(17<<20)+'\"}')" | timeout 10 $BIN/ktr-mcp > $T/mcp2.out 2>/dev/null
echo "9 mcp 17 MB message: $(head -c 200 $T/mcp2.out)"
new 10 ''; r $BIN/ktr request --confirm REBUILD >/dev/null; mkdir $T/proj/d1.jsonl
echo "{\"session_id\":\"d1\",\"transcript_path\":\"$T/proj/d1.jsonl\"}" > $T/in.json
echo "10 Stop naming a dir *.jsonl: $(r $BIN/ktr-stop < $T/in.json) $(o 80); status=$(grep -o '"status": *"[a-z_]*"' $T/state/operations/*.json | head -1 | sed 's/.*: *//')"
new 11 ''; mkdir -p $T/dot; echo '{"theme":"dark"}' > $T/dot/settings.json; ln -s $T/dot/settings.json $T/settings.json
echo "11 symlinked settings.json: merge $(r $BIN/ktr hooks merge --settings $T/settings.json --prefix $T/bin) $(o 140); still_link=$([ -L $T/settings.json ] && echo yes || echo NO); target_has_ktr=$(grep -c ktr-stop $T/dot/settings.json)"
echo "11 unmerge: $(r $BIN/ktr hooks unmerge --settings $T/settings.json) still_link=$([ -L $T/settings.json ] && echo yes || echo NO) target=$(tr -d '\n ' < $T/dot/settings.json)"
new 12 ''; r $BIN/ktr request --confirm REBUILD >/dev/null
python3 -c "
import fcntl,time,sys; f=open('$T/state/coordinator.lock','a'); fcntl.flock(f,fcntl.LOCK_EX); time.sleep(15)" & LP=$!
sleep 2; echo "{\"session_id\":\"s1\",\"transcript_path\":\"$T/proj/s1.jsonl\"}" > $T/in.json
echo "12 Stop under lock contention: $(TO=20 r $BIN/ktr-stop < $T/in.json) $(o 140)"; kill $LP
new 13 ''; python3 -c "print(('$line'+chr(10))*50000,end='')" > $T/proj/s1.jsonl
( end=$((SECONDS+40)); while [ $SECONDS -lt $end ]; do echo "$line" >> $T/proj/s1.jsonl; done ) & AP=$!
sleep 0.3; echo "13 plan on a fast-growing file: $(TO=60 r /usr/bin/time -f %MkB $BIN/ktr plan --json) rss=$(tail -1 $T/err) changed=$(grep -o '"source_changed_while_read": *[a-z]*' $T/out)"; kill $AP
new 14 ''; sed -i "s|^project_dir = .*|project_dir = \"$T/nope\"|" $KTR_CONFIG
echo "14 request with a missing project_dir: $(r $BIN/ktr request --confirm REBUILD) $(e 140)"
echo "sandboxes under $base"
