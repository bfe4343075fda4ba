#!/bin/bash
# `specgate tune` on real SGLang 0.5.17: make_tiny.py's target and random EAGLE-3 drafter, or a
# drafter loop.sh trained (TUNE_MODEL), over chains of TUNE_STEPS steps (topk 1).
#
#   bash benchmarks/real_sglang/tune.sh
#
# Every configuration is launched (TUNE_MARGIN=0.99 by default), so the table sets the model's
# predictions against measurements at each. Without TUNE_BASELINE=1 no baseline is launched.
# Environment: see env.sh, and:
#   TUNE_MODEL=DIR   tune the drafter loop.sh trained (DIR/target, DIR/drafter; the loop's
#                    profile, its 42 prompts cut to TUNE_PROMPTS per category) instead of
#                    make_tiny.py's random one
#   TUNE_STEPS=1,2,3,4  the chains considered; TUNE_LAUNCHES (4) the most launched
#   TUNE_BASELINE=1  launch the baseline too (speed-ups in the table; one more start)
#   TUNE_PROMPTS (1) prompts per category, TUNE_TOKENS (48) max_new_tokens, TUNE_MAX_REPEATS (3)
#   TUNE_MARGIN (0.99); TUNE_BUDGET=SECONDS stops `specgate tune` after this long (default: no
#                    limit)
#   TUNE_REPORTS=DIR  the reports folder (default $RS_WORK/tune-reports); with TUNE_MODEL,
#                    loop.sh's $RS_WORK/reports lets a probe after it reuse the tune's baseline
#                    (same prompts and tokens: TUNE_PROMPTS=6 TUNE_TOKENS=128)
# Dry run against specgate's simulator:
#   RS_SIM=1 RS_PYTHON=.venv/bin/python bash benchmarks/real_sglang/tune.sh
# Writes $OUT/tune-run.log, tune.md, tune.png, recommended.toml, tune.json, tune-profile.toml.
# Exit codes: 0 a recommendation, 1 none, 4-6 setup failed.
set -u
MARGIN=${TUNE_MARGIN:-0.99}
BUDGET=${TUNE_BUDGET:-}
RS_LOG=tune-run.log
. "$(dirname "${BASH_SOURCE[0]}")/env.sh" || exit $?
echo "tune: root $ROOT, work $WORK, out $OUT, sim $SIM, margin $MARGIN, budget ${BUDGET:-none}"
"$PY" -c 'import specgate.measure.tune' || exit 5
if [ -z "${TUNE_MODEL:-}" ] && [ ! -e "$WORK/tiny/draft_ref/model.safetensors" ]; then
  "$PY" -m benchmarks.real_sglang.make_tiny "$WORK/tiny" $TINY_FLAGS || exit 6
fi

# The suite's profile (SERVER_FLAGS, the tiny model), with few prompts and short answers.
PROFILE="$OUT/tune-profile.toml"
"$PY" - "$HERE" "$WORK" "$OUT" "$ROOT" "$PY" "$LAUNCHER" "$SIM" "$MARGIN" "$PROFILE" <<'PYEOF' || exit 6
import os, shlex, sys, time
from pathlib import Path
here, work, out, root, py, launcher, sim, margin, profile = sys.argv[1:]
from benchmarks.real_sglang import suite  # the checkout's root is this folder
model = os.environ.get("TUNE_MODEL")
steps = [int(x) for x in os.environ.get("TUNE_STEPS", "1,2,3,4").split(",")]
tokens = int(os.environ.get("TUNE_TOKENS", "48"))
if model:
    from benchmarks.real_sglang import loop
    doc = loop.profile(Path(model), shlex.split(launcher), sim == "1", tokens, max(steps),
                       name_config=False)
else:
    ctx = suite.Ctx(work=Path(work), out=Path(out), tiny=Path(work) / "tiny", root=Path(root),
                    python=py, launcher=shlex.split(launcher), sim=sim == "1",
                    deadline=time.time() + 3600)
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
timeout --signal=INT "${BUDGET:-604800}" "$PY" -m specgate.cli tune --profile "$PROFILE" \
  --reports "$REPORTS" $NOBASE
RC=$?
for f in tune.md tune.png recommended.toml tune.json; do
  cp "$REPORTS/tune/$f" "$OUT/$f" 2>/dev/null || echo "no $f"
done
echo "total $(( $(date +%s) - T0 )) s, tune exit $RC"
exit $RC
