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
# RS_PYTHON (python3), RS_LAUNCHER, TUNE_MARGIN, TUNE_BUDGET.
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
if [ ! -e "$WORK/tiny/draft_ref/model.safetensors" ]; then
  "$PY" "$HERE/make_tiny.py" "$WORK/tiny" $TINY_FLAGS || exit 6
fi

# The suite's profile (SERVER_FLAGS, the tiny model), with few prompts and short answers.
PROFILE="$OUT/tune-profile.toml"
"$PY" - "$HERE" "$WORK" "$OUT" "$ROOT" "$PY" "$LAUNCHER" "$SIM" "$MARGIN" "$PROFILE" <<'PYEOF' || exit 6
import shlex, sys, time
from pathlib import Path
here, work, out, root, py, launcher, sim, margin, profile = sys.argv[1:]
sys.path.insert(0, here)
import suite
ctx = suite.Ctx(work=Path(work), out=Path(out), tiny=Path(work) / "tiny", root=Path(root),
                python=py, launcher=shlex.split(launcher), sim=sim == "1",
                deadline=time.time() + 600)
doc = suite.profile_doc(ctx)
doc["name"] += "-tune"
doc["bench"].update({"prompts_per_category": 1, "max_new_tokens": 48, "warmup": 1,
                     "repeats": 1, "max_repeats": 3, "request_timeout_s": 60.0})
doc["tune"] = {"steps": [1, 2, 3, 4], "max_launches": 4, "margin": float(margin),
               "repeats": 1}
Path(profile).write_text(suite.toml(doc), encoding="utf-8")
print("profile written:", profile)
PYEOF
echo "setup done in $(( $(date +%s) - T0 )) s"

timeout --signal=INT "$BUDGET" "$PY" -m specgate.cli tune --profile "$PROFILE" \
  --reports "$WORK/tune-reports" --no-baseline
RC=$?
for f in tune.md tune.png recommended.toml tune.json; do
  cp "$WORK/tune-reports/tune/$f" "$OUT/$f" 2>/dev/null || echo "no $f"
done
echo "total $(( $(date +%s) - T0 )) s, tune exit $RC"
exit $RC
