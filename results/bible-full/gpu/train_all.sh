#!/bin/bash
# Train every run of configs/bible-full.yaml on the device machine, 8 processes in parallel,
# evaluate with the pipeline, strip and return the checkpoints (not part of the project).
#
#   bash .gpu/train_all.sh          (device: repo root; $OUT set by the device tool)
#
# Re-entrant: a second call on the still-warm machine continues where the first stopped
# (training resumes from checkpoint_last.pt; done steps are skipped) and returns the files
# the first call had no room for. Env: CONFIG, WORKDIR (local tests), DEADLINE (seconds after
# which training is interrupted so that the call can return), ROOT (where to run; default
# /work/main so that the paths inside the checkpoints are those of the CPU machine).
set -o pipefail
export PYTHONUNBUFFERED=1
START=$(date +%s)
CONFIG=${CONFIG:-configs/bible-full.yaml}
DEADLINE=${DEADLINE:-540}
OUT=${OUT:?OUT unset}
export STAGE=${STAGE:-/tmp/stage}
mkdir -p "$OUT" "$STAGE"
LOG="$OUT/train_all.$(date +%H%M%S).log"
exec > >(tee -a "$LOG") 2>&1
el() { echo $(( $(date +%s) - START )); }
say() { echo "[$(date +%T) +$(el)s] $*"; }

# --- the same paths as on the CPU machine --------------------------------------------------------
ROOT=${ROOT:-/work/main}
if [ "$(pwd -P)" != "$ROOT" ] && [ "$ROOT" != "." ]; then
  mkdir -p "$ROOT"
  cp -a . "$ROOT"/ || exit 1
  cd "$ROOT" || exit 1
fi
say "cwd $(pwd)"

# --- packages ----------------------------------------------------------------------------------
if [ -z "$NO_INSTALL" ]; then
  if [ ! -f /tmp/site/.ok ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl \
      && touch /tmp/site/.ok || { say "pip install failed"; exit 1; }
  fi
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
PY=${PY:-python3}
if [ -z "$NO_INSTALL" ]; then nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; fi
$PY -c 'import sys, torch, numpy, fairseq; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available(), "numpy", numpy.__version__, "fairseq", fairseq.__version__)' || exit 1
nproc

# --- corpus, data, initial encoders ------------------------------------------------------------
$PY -m pipelines.run "$CONFIG" ${WORKDIR:+--workdir "$WORKDIR"} --stage corpus --no-progress || { say "corpus failed"; exit 1; }
TRAIN_DIR=$($PY .gpu/train_one.py "$CONFIG" key) || exit 1
say "train directory $TRAIN_DIR"
$PY .gpu/train_one.py "$CONFIG" prepare || { say "prepare failed"; exit 1; }
say "prepared"
DATA_PID=""
if [ ! -f "$STAGE/train_data.tar.xz" ]; then nice -n 10 $PY .gpu/pack.py "$CONFIG" data > "$STAGE/data.log" 2>&1 & DATA_PID=$!; fi

# --- the 8 runs in parallel --------------------------------------------------------------------
RUNS=$($PY .gpu/train_one.py "$CONFIG" runs)
todo=""
for r in $RUNS; do [ -f "$TRAIN_DIR/runs/$r/done.json" ] || todo="$todo $r"; done
if [ -n "$todo" ]; then
  set -m   # each background job its own process group (killable with its fairseq child)
  T0=$(date +%s.%N)
  declare -A PIDS
  for r in $todo; do
    mkdir -p "$TRAIN_DIR/runs/$r"
    $PY .gpu/train_one.py "$CONFIG" train "$r" > "$TRAIN_DIR/runs/$r/gpu_driver.log" 2>&1 &
    PIDS[$r]=$!
    say "started $r (pid ${PIDS[$r]})"
  done
  set +m
  while :; do
    alive=0
    for r in $todo; do kill -0 "${PIDS[$r]}" 2>/dev/null && alive=$((alive + 1)); done
    line=""
    for r in $todo; do
      u=$(grep -o '"num_updates": "[0-9]*"' "$TRAIN_DIR/runs/$r/train.log" 2>/dev/null | tail -1 | grep -o '[0-9]*')
      line="$line $r=${u:-0}"
    done
    say "alive $alive:$line"
    [ $alive -eq 0 ] && break
    if [ "$(el)" -ge "$DEADLINE" ]; then
      say "deadline: interrupting the runs still going (they resume from checkpoint_last.pt)"
      for r in $todo; do kill -TERM -- -"${PIDS[$r]}" 2>/dev/null; done
      sleep 5
      for r in $todo; do kill -KILL -- -"${PIDS[$r]}" 2>/dev/null; done
      break
    fi
    sleep 20
  done
  fail=0
  for r in $todo; do wait "${PIDS[$r]}"; rc=$?; say "$r exit $rc"; [ $rc -eq 0 ] || fail=1; done
  T1=$(date +%s.%N)
  python3 - "$T0" "$T1" "$STAGE/parallel.json" $todo <<'EOF'
import json, sys, os
t0, t1, path, runs = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4:]
old = json.load(open(path)) if os.path.exists(path) else []
old.append({"start": t0, "end": t1, "wall_s": round(t1 - t0, 1), "runs": runs})
json.dump(old, open(path, "w"), indent=1)
print("parallel training:", json.dumps(old[-1]))
EOF
  for r in $todo; do echo "--- $r"; tail -n 4 "$TRAIN_DIR/runs/$r/gpu_driver.log"; done
fi

alldone=1
for r in $RUNS; do [ -f "$TRAIN_DIR/runs/$r/done.json" ] || alldone=0; done

# --- evaluation through the pipeline (finds every run done: only evaluates) ---------------------
if [ $alldone -eq 1 ] && [ ! -f "$TRAIN_DIR/done.json" ] && [ "$(el)" -lt "${EVAL_BY:-390}" ]; then
  say "evaluating"
  timeout $(( ${EVAL_END:-560} - $(el) )) $PY -m pipelines.run "$CONFIG" ${WORKDIR:+--workdir "$WORKDIR"} --stage train --no-progress \
    || say "train stage (evaluation) failed or ran out of time (rerun: it evaluates again)"
  say "evaluated"
  [ -f "$TRAIN_DIR/eval.json" ] && python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps({'evaluation': d['evaluation'], 'timings': d['timings'], 'train_seconds': d['train_seconds']}, indent=1))" "$TRAIN_DIR/eval.json"
fi

[ -n "$DATA_PID" ] && wait "$DATA_PID"  # the data tar
cat "$STAGE/data.log" 2>/dev/null

# --- strip, check, return ----------------------------------------------------------------------
$PY .gpu/pack.py "$CONFIG" strip || say "strip: some checkpoint failed its check"
$PY .gpu/pack.py "$CONFIG" emit "$OUT"
du -sh "$TRAIN_DIR"/runs/* 2>/dev/null
ls -la "$OUT"
say "end (all runs done: $alldone)"
