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
cd "$ROOT" || exit 4
echo "rerun of benchmarks/results/$RESULT: files in $RERUN, models and reports in $RS_WORK"

# server_log_tail CONFIG DEST: the last 60 lines of the latest probe's CONFIG-server.log
# (baseline or speculative) in $RS_WORK/reports.
server_log_tail() {
  tail -n 60 "$RS_WORK/reports/live/$1-server.log" | cut -c1-600 > "$2"
}

# claim_message VERDICT_JSON CLAIM_ID: the message of one claim of a verdict.
claim_message() {
  "$PY" -c 'import json, sys
print(next(c["message"] for c in json.load(open(sys.argv[1]))["claims"] if c["id"] == sys.argv[2]))' \
    "$1" "$2"
}

# attachment NAME DEST: the latest Allure attachment called NAME in $RS_WORK/reports, to DEST.
attachment() {
  "$PY" - "$RS_WORK/reports/allure-results" "$1" "$2" <<'PYEOF'
import json, shutil, sys
from pathlib import Path
results, name, dest = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
found = [(doc.get("stop", 0), results / a["source"])
         for doc in (json.loads(f.read_text()) for f in results.glob("*-result.json"))
         for a in doc.get("attachments", []) if a.get("name") == name]
if not found:
    sys.exit(f"no attachment {name!r} in {results}")
shutil.copyfile(max(found)[1], dest)
PYEOF
}
