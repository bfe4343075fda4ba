#!/bin/bash
# `specgate tune` on real SGLang 0.5.17: the tiny random Llama target and its EAGLE-3 drafter
# (make_tiny.py), chains of 1 to 4 steps (topk 1), in the environment run_suite.sh sets up.
#
# On the GPU machine (bundle A in /tmp/site, as for run_suite.sh):
#   bash benchmarks/real_sglang/tune.sh
# Dry run here, against specgate's simulator (no GPU, no SGLang):
#   RS_SIM=1 RS_PYTHON=.venv/bin/python bash benchmarks/real_sglang/tune.sh
#
# Every configuration is launched (TUNE_MARGIN=0.99 by default) so the table compares the
# model's predictions with measurements at all four; the random drafter's acceptance is near 0,
# so the cycle time is what differs. No baseline launch (--no-baseline) keeps the starts at four:
# the first ~2-3 min (kernel compilation), the others ~50-60 s; TUNE_BUDGET (default 400 s)
# bounds `specgate tune` itself.
# Environment: OUT (default /tmp/rs-out), RS_WORK (/tmp/rs), RS_SITE (/tmp/site), RS_SIM,
# RS_PYTHON (python3), RS_LAUNCHER, TUNE_MARGIN, TUNE_BUDGET, RS_CUDA_GRAPHS (suite.py), and:
#   TUNE_MODEL=DIR   tune the drafter loop.sh trained (DIR/target, DIR/drafter; the loop's
#                    profile: its 42 prompts are cut to TUNE_PROMPTS per category) instead of
#                    make_tiny.py's random one
#   TUNE_STEPS=1,2,3,4  the chains considered; TUNE_LAUNCHES (4) the most launched
#   TUNE_BASELINE=1  launch the baseline too (speed-ups in the table; one more start)
#   TUNE_PROMPTS (1) prompts per category, TUNE_TOKENS (48) max_new_tokens, TUNE_MAX_REPEATS (3)
#   TUNE_REPORTS=DIR  the reports folder (default $RS_WORK/tune-reports); with TUNE_MODEL,
#                    $RS_WORK/reports of loop.sh lets the probe after it reuse the tune's baseline
#                    (same prompts and tokens: TUNE_PROMPTS=6 TUNE_TOKENS=128)
# Writes OUT/tune-run.log, OUT/tune.md, OUT/tune.png, OUT/recommended.toml, OUT/tune.json,
# OUT/tune-profile.toml. Exit codes: 0 a recommendation, 1 none, 3-6 setup as run_suite.sh.
set -u
T0=$(date +%s)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${OUT:-/tmp/rs-out}
WORK=${RS_WORK:-/tmp/rs}
SITE=${RS_SITE:-/tmp/site}
SIM=${RS_SIM:-0}
PY=${RS_PYTHON:-python3}
MARGIN=${TUNE_MARGIN:-0.99}
BUDGET=${TUNE_BUDGET:-400}
mkdir -p "$OUT" "$WORK"
exec > >(tee -a "$OUT/tune-run.log") 2>&1
echo "tune: root $ROOT, work $WORK, out $OUT, sim $SIM, margin $MARGIN, budget $BUDGET s"
cd "$ROOT" || exit 4

. "$HERE/env.sh" || exit $?
"$PY" -c 'import specgate.measure.tune' || exit 5
export PYTHONUNBUFFERED=1
if [ -z "${TUNE_MODEL:-}" ] && [ ! -e "$WORK/tiny/draft_ref/model.safetensors" ]; then
  "$PY" "$HERE/make_tiny.py" "$WORK/tiny" $TINY_FLAGS || exit 6
fi

# The suite's profile (SERVER_FLAGS, the tiny model), with few prompts and short answers.
PROFILE="$OUT/tune-profile.toml"
"$PY" - "$HERE" "$WORK" "$OUT" "$ROOT" "$PY" "$LAUNCHER" "$SIM" "$MARGIN" "$PROFILE" <<'PYEOF' || exit 6
import os, shlex, sys, time
from pathlib import Path
here, work, out, root, py, launcher, sim, margin, profile = sys.argv[1:]
sys.path.insert(0, here)
import suite
model = os.environ.get("TUNE_MODEL")
steps = [int(x) for x in os.environ.get("TUNE_STEPS", "1,2,3,4").split(",")]
tokens = int(os.environ.get("TUNE_TOKENS", "48"))
if model:
    import loop
    doc = loop.profile(Path(model), shlex.split(launcher), sim == "1", tokens, max(steps),
                       name_config=False)
else:
    ctx = suite.Ctx(work=Path(work), out=Path(out), tiny=Path(work) / "tiny", root=Path(root),
                    python=py, launcher=shlex.split(launcher), sim=sim == "1",
                    deadline=time.time() + 600)
    doc = suite.profile_doc(ctx)
doc["name"] += "-tune"
doc["bench"].update({"prompts_per_category": int(os.environ.get("TUNE_PROMPTS", "1")),
                     "max_new_tokens": tokens, "warmup": 1,
                     "repeats": 1, "max_repeats": int(os.environ.get("TUNE_MAX_REPEATS", "3")),
                     "request_timeout_s": 60.0})
doc["tune"] = {"steps": steps, "max_launches": int(os.environ.get("TUNE_LAUNCHES", "4")),
               "margin": float(margin), "repeats": 1}
Path(profile).write_text(suite.toml(doc), encoding="utf-8")
print("profile written:", profile)
PYEOF
echo "setup done in $(( $(date +%s) - T0 )) s"

NOBASE=--no-baseline
[ "${TUNE_BASELINE:-0}" = 1 ] && NOBASE=
REPORTS=${TUNE_REPORTS:-$WORK/tune-reports}
timeout --signal=INT "$BUDGET" "$PY" -m specgate.cli tune --profile "$PROFILE" \
  --reports "$REPORTS" $NOBASE
RC=$?
for f in tune.md tune.png recommended.toml tune.json; do
  cp "$REPORTS/tune/$f" "$OUT/$f" 2>/dev/null || echo "no $f"
done
echo "total $(( $(date +%s) - T0 )) s, tune exit $RC"
exit $RC
