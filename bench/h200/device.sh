#!/usr/bin/env bash
# Runs ON the lent H200 machine, from the root of the carried checkout (see bench/h200/README.md).
#   bash bench/h200/device.sh SPEC RUN_ID COMMIT [evidence run options...]
# Unpacks the staged vLLM 0.26.0 (skips what is there), runs `evidence run` under a time limit
# (SIGTERM first: the runner stops cleanly and the run resumes in the next call), and packs the
# run directory into $OUT so it comes back.
set -uo pipefail
SPEC=$1 RUN_ID=$2 COMMIT=$3; shift 3
bash .stage/p1/unpack.sh .stage || exit 3
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
       VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0 EVIDENCE_CODE_COMMIT=$COMMIT
nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv,noheader
timeout -k 30 "${LIMIT:-540}" python3 -m evidence.cli run "$SPEC" --run-id "$RUN_ID" --no-progress "$@"
rc=$?
echo "evidence run exit code: $rc"
tail -n 5 "runs/$RUN_ID/events.jsonl" 2>/dev/null
tar -C runs -cJf "$OUT/$RUN_ID.tar.xz" "$RUN_ID" && ls -la "$OUT"
exit 0
