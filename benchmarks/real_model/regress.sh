#!/bin/bash
# Another drafter in the gate that an earn.sh run left in $RS_WORK: a regression on real text.
# A smaller data size is trained as earn.py trains it (sf_train.py with the judged drafter's own
# command, on the first 1/N of the data's seeded order: third N = 3, ninth N = 9), then
# `pytest -m probe` runs on a copy of the run's probe profile with only the drafter changed
# (specgate launches both servers), in a copy of the run's probe history: regress.* compare the
# new drafter with the run's last passing probe, as a CI gate compares a new checkpoint (the
# run's own history is left as it was, so every such probe meets the same reference).
#
#   bash benchmarks/real_model/regress.sh --specforge UNPACKED_SPECFORGE_0.2.0 [--size ninth]
#
# Environment: see ../real_sglang/env.sh (OUT, RS_WORK: the earn.sh run's work folder,
# RS_PYTHON, RS_WHEELS, RS_SIM; RS_WORK defaults to earn.sh's /tmp/earn). $OUT gets
# regress.log, profile.toml, pytest.log, verdict.json, live/ (the probe's per-request
# results), reports/ (the history copy the probe ran in) and SIZE/ (the drafter's summary,
# prediction and training log; its weights go to $RS_WORK/drafters/SIZE). Exit status: pytest's
# (1 when a claim failed), 2 for bad arguments, 3 when the run left no probe profile, record
# or passing probe, or the training failed.
set -u
SPECFORGE=
SIZE=ninth
while [ $# -gt 0 ]; do
  case "$1" in
    --specforge|--size)
      [ $# -ge 2 ] || { echo "$1 needs a value (see the header of $0)"; exit 2; } ;;&
    --specforge) SPECFORGE=$2; shift 2 ;;
    --size) SIZE=$2; shift 2 ;;
    *) echo "unknown argument $1 (see the header of $0)"; exit 2 ;;
  esac
done
[ -n "$SPECFORGE" ] || { echo "usage: $0 --specforge DIR [--size ninth|third]"; exit 2; }
case "$SIZE" in third|ninth) ;; *) echo "--size $SIZE: third or ninth"; exit 2 ;; esac
SPECFORGE=$(cd "$SPECFORGE" && pwd) || exit 2
OUT=${OUT:-/tmp/regress-out}
RS_WORK=${RS_WORK:-/tmp/earn}
RS_LOG=regress.log
. "$(dirname "${BASH_SOURCE[0]}")/../real_sglang/env.sh" || exit $?
RM=$ROOT/benchmarks/real_model

# the judged drafter's training command, on the first 1/N of the data (regress.py)
CMD=$("$PY" -m benchmarks.real_model.regress command "$WORK" "$SIZE") || exit 3
mkdir -p "$OUT/$SIZE"
# the probe profile with only the drafter changed; its name, and so its history, stay
"$PY" -m benchmarks.real_model.regress profile "$WORK" "$SIZE" "$OUT/profile.toml" || exit 3
echo "[regress.sh] training $SIZE: sf_train.py $CMD"
eval "set -- $CMD"
"$PY" -m benchmarks.real_model.sf_train "$@" --specforge "$SPECFORGE" > "$OUT/$SIZE/train.log" 2>&1 \
  || { echo "[regress.sh] sf_train.py failed: $(tail -n 3 "$OUT/$SIZE/train.log")"; exit 3; }
tail -n 1 "$OUT/$SIZE/train.log"
for f in summary.json prediction.json; do
  [ -e "$WORK/drafters/$SIZE/$f" ] && cp "$WORK/drafters/$SIZE/$f" "$OUT/$SIZE/"
done

# a copy of the run's probe history: the reference is the run's last passing probe
[ -d "$WORK/reports/probe/history" ] || { echo "$WORK/reports/probe/history: no probe history"; exit 3; }
rm -rf "$OUT/reports" && mkdir -p "$OUT/reports" && cp -r "$WORK/reports/probe/history" "$OUT/reports/"
echo "[regress.sh] pytest -m probe of $SIZE against the history of $WORK/reports/probe"
(cd "$WORK" && "$PY" -m pytest -m probe --profile "$OUT/profile.toml" \
   --reports "$OUT/reports" -p no:cacheprovider) > "$OUT/pytest.log" 2>&1
RC=$?
rm -f "$OUT/verdict.json"
cp "$OUT/reports/verdict.json" "$OUT/" 2>/dev/null
mkdir -p "$OUT/live"
cp "$OUT/reports/live/results.json" "$OUT/reports/live/progress.log" "$OUT/live/" 2>/dev/null
"$PY" - "$OUT/verdict.json" <<'PYEOF' || echo "[regress.sh] no verdict written: see $OUT/pytest.log"
import json, sys
v = json.load(open(sys.argv[1]))
print(f"outcome {v.get('outcome')}")
for c in v.get("claims", []):
    if c["id"].startswith(("regress.", "spec.")):
        print(f"  {c['status'].upper():8} {c['id']}: {str(c.get('message'))[:240]}")
PYEOF
echo "[regress.sh] pytest exit $RC; results in $OUT"
exit "$RC"
