#!/usr/bin/env bash
# Runs ON the lent H200 machine, from the root of the carried checkout (see bench/h200/README.md).
# A run longer than one device command (10 minutes): the runner is started in its own process session, so it
# goes on between commands while the machine is held, and every later command waits on it and packs what it
# has recorded so far into $OUT (nothing is lost if the machine goes back: the next machine resumes from it).
#
#   bash bench/h200/detached.sh start SPEC RUN_ID COMMIT [evidence run options...]
#   bash bench/h200/detached.sh wait RUN_ID SECONDS     # until the run ends or SECONDS pass, then pack
#   bash bench/h200/detached.sh stop RUN_ID             # SIGTERM: the runner stops between requests, then pack
set -uo pipefail
MODE=$1; shift
RUNS=/tmp/runs
bash .stage/p1/unpack.sh .stage >/dev/null || exit 3
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
       VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0
pack() {  # the run folder so far, xz, in parts under the 16 MiB a returned file may have
  local id=$1
  tar -C "$RUNS" -cf - "$id" | xz -6 -T0 > "/tmp/$id.tar.xz"
  split -b 15m -d "/tmp/$id.tar.xz" "$OUT/$id.tar.xz.part"
  cp "/tmp/run-$id.log" "$OUT/$id.log" 2>/dev/null
  ls -la "$OUT"
}
alive() { [ -f "/tmp/run-$1.pid" ] && kill -0 "$(cat "/tmp/run-$1.pid")" 2>/dev/null; }
case $MODE in
  start)
    SPEC=$1 RUN_ID=$2 COMMIT=$3; shift 3
    mkdir -p "$RUNS"
    nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv,noheader
    EVIDENCE_CODE_COMMIT=$COMMIT setsid nohup python3 -m evidence.cli run "$SPEC" --runs-dir "$RUNS" \
      --run-id "$RUN_ID" --no-progress "$@" > "/tmp/run-$RUN_ID.log" 2>&1 < /dev/null &
    echo $! > "/tmp/run-$RUN_ID.pid"
    sleep 20; tail -n 5 "/tmp/run-$RUN_ID.log" ;;
  wait)
    RUN_ID=$1 SECS=$2 t0=$SECONDS
    while alive "$RUN_ID" && (( SECONDS - t0 < SECS )); do sleep 5; done
    alive "$RUN_ID" && echo "run still going after ${SECS}s" || echo "run ended"
    grep -c '"trial_complete"' "$RUNS/$RUN_ID/events.jsonl" 2>/dev/null | sed 's/^/trials done: /'
    tail -n 3 "/tmp/run-$RUN_ID.log"; pack "$RUN_ID" ;;
  stop)
    RUN_ID=$1
    alive "$RUN_ID" && kill -TERM "$(cat "/tmp/run-$RUN_ID.pid")"
    for _ in $(seq 60); do alive "$RUN_ID" || break; sleep 1; done
    tail -n 3 "/tmp/run-$RUN_ID.log"; pack "$RUN_ID" ;;
esac
exit 0
