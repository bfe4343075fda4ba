"""Security: loopback by default, API keys and tokens never written, nothing unpickled, no shell."""

from __future__ import annotations

import pickle
import re
import uuid
from pathlib import Path

import fault_support as fh
import pytest

from specgate.claims import vocab, weights
from specgate.claims.result import Status
from specgate.core.errors import CheckpointError
from specgate.core.profile import parse_profile
from specgate.io import vocab_maps
from specgate.serving import launch

SOURCE_DIRS = ("specgate", "fixtures", "benchmarks", "scripts")


class _Payload:
    """A pickle that creates a file when unpickled: proof that something executed it."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (exec, (f"open({str(self.target)!r}, 'w').close()",))


def _evil_pickle(path: Path, target: Path) -> Path:
    path.write_bytes(pickle.dumps({"d2t": _Payload(target)}))
    return path


@pytest.fixture(scope="module")
def assets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.getbasetemp().parent / "specgate-fault-assets"


def _written_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


@pytest.mark.slow
def test_api_key_and_tokens_never_reach_anything_written(tmp_path: Path, assets: Path) -> None:
    key = "sk-specgate-" + uuid.uuid4().hex
    hf_env = "hf_" + uuid.uuid4().hex  # in the harness's environment, inherited by the server
    hf_profile = "hf_" + uuid.uuid4().hex  # in [server] env: on the launch command line
    profile, marker = fh.write_profile(tmp_path, assets, api_key_env="SEC_API_KEY",
                                       extra_env={"HF_TOKEN": hf_profile})
    reports = tmp_path / "reports"
    run = fh.run_probe(profile, reports, timeout_s=90,
                       env=fh.child_env(SEC_API_KEY=key, HF_TOKEN=hf_env))
    left = fh.orphans(marker)
    fh.reap(left)
    assert not left, [p.cmdline() for p in left]
    # The key reached the server (--api-key) and every request carried it (Bearer): no claim
    # is broken only if /server_info and /generate accepted it. (Speed claims may fail on a
    # loaded machine; that is not what this test is about.)
    _assert_evaluated(run)
    log = (reports / "live" / "speculative-server.log").read_text(encoding="utf-8")
    assert "--api-key '***'" in log or "--api-key ***" in log
    assert "api_key='***'" in log  # the simulator, like SGLang, prints its server args
    assert "HF_TOKEN=***" in log
    leaks = []
    files = _written_files(reports)
    assert len(files) > 20  # verdict, junit, allure results and attachments, logs, history
    for path in files:
        data = path.read_bytes()
        leaks += [f"{path.relative_to(reports)}: {name}" for name, secret in
                  (("api key", key), ("HF_TOKEN (env)", hf_env), ("HF_TOKEN (profile)", hf_profile))
                  if secret.encode() in data]
    terminal = [name for name, secret in (("api key", key), ("HF_TOKEN", hf_env),
                                          ("HF_TOKEN", hf_profile)) if secret in run.output]
    fh.record("secrets: full probe with --api-key and HF_TOKEN", run, held=not leaks,
              orphans_found=len(left), secrets=len(leaks) + len(terminal),
              note=f"{len(files)} files grepped")
    assert not leaks, leaks
    assert not terminal, terminal


def _assert_evaluated(run: fh.ProbeRun) -> None:
    claims = run.claims()
    # The fault profile measures one prompt, and the paired speed-up needs two prompts for an
    # interval: spec.speedup and spec.breakeven are broken for that reason and no other.
    unpaired = ("spec.speedup", "spec.breakeven")
    for cid in unpaired:
        assert claims[cid]["status"] == "broken", claims[cid]
        assert "timed on both servers" in claims[cid]["message"], claims[cid]
    broken = {cid: c["message"] for cid, c in claims.items()
              if c["status"] == "broken" and cid not in unpaired}
    assert not broken, broken
    # "Evaluated" is the point here (the API key reached the server, the figures came back), so
    # the simulator's drafter meeting its threshold is part of it: no outcome but passed.
    assert claims["spec.accept_len"]["status"] == "passed", run.output[-3000:]
    assert claims["spec.accept_len"]["observed"] > 1.0, claims["spec.accept_len"]


def _offline(tmp_path: Path, assets: Path, host: str) -> fh.ProbeRun:
    profile, _ = fh.write_profile(tmp_path, assets, host=host)
    return fh.run_probe(profile, tmp_path / "reports", timeout_s=60, select="probe and not live")


@pytest.mark.slow
@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_report_warns_when_the_server_binds_beyond_loopback(tmp_path: Path, assets: Path,
                                                            host: str) -> None:
    run = _offline(tmp_path, assets, host)
    doc = run.verdict
    env_props = (tmp_path / "reports" / "allure-results" / "environment.properties").read_text(
        encoding="utf-8")
    if host == "127.0.0.1":
        assert doc["warnings"] == []
        assert "beyond loopback" not in run.output + env_props
        return
    assert len(doc["warnings"]) == 1
    assert "host = '0.0.0.0'" in doc["warnings"][0]
    assert "no [server] api_key_env" in doc["warnings"][0]
    assert "warning: [server] host = '0.0.0.0'" in run.output
    assert "beyond loopback" in env_props


def test_default_profile_binds_loopback() -> None:
    profile = parse_profile({"name": "x", "target": {"path": "/t"}})
    spec = launch.build_command(profile, "baseline")
    assert spec.host == "127.0.0.1"
    assert spec.argv[spec.argv.index("--host") + 1] == "127.0.0.1"
    assert launch.exposure_warning(profile) is None
    exposed = parse_profile({"name": "x", "server": {"host": "0.0.0.0", "api_key_env": "K"}})
    warning = launch.exposure_warning(exposed)
    assert warning is not None
    assert "answers anyone" not in warning
    attached = parse_profile({"name": "x", "server": {
        "host": "0.0.0.0", "url": "http://h:1", "baseline_url": "http://h:2"}})
    assert launch.exposure_warning(attached) is None


def test_pickle_weights_are_refused_not_loaded(tmp_path: Path) -> None:
    drafter = tmp_path / "drafter"
    drafter.mkdir()
    (drafter / "config.json").write_text('{"architectures": ["LlamaForCausalLMEagle3"]}')
    touched = tmp_path / "PWNED"
    for name in ("pytorch_model.bin", "model.pt"):
        _evil_pickle(drafter / name, touched)
    profile = parse_profile({"name": "x", "drafter": {"path": str(drafter)}})
    for claim in (weights.layout_claim(profile), weights.health_claim(profile),
                  vocab.invariants_claim(profile)):
        assert claim.status is Status.BROKEN, claim
        assert "safetensors" in claim.message
    assert not touched.exists()


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_pt_vocab_map_is_read_weights_only(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    touched = tmp_path / "PWNED"
    with pytest.raises(CheckpointError, match="weights-only"):
        vocab_maps.load_map(_evil_pickle(tmp_path / "map.pt", touched))
    assert not touched.exists()
    # The zip format torch.save writes, with a payload inside: refused the same way.
    torch.save({"d2t": _Payload(touched)}, tmp_path / "zip.pt")
    with pytest.raises(CheckpointError, match="weights-only"):
        vocab_maps.load_map(tmp_path / "zip.pt")
    assert not touched.exists()
    torch.save({"d2t": torch.arange(4), "t2d": torch.ones(8, dtype=torch.bool)},
               tmp_path / "ok.pt")
    assert vocab_maps.load_map(tmp_path / "ok.pt").d2t.tolist() == [0, 1, 2, 3]


def test_no_shell_strings_and_no_unpickling_in_the_code() -> None:
    found = []
    patterns = {
        "shell=True": re.compile(r"shell\s*=\s*True"),
        "os.system": re.compile(r"\bos\.(system|popen)\s*\("),
        "pickle.load": re.compile(r"\b(c?pickle|dill)\.loads?\s*\("),
        "torch.load without weights_only": re.compile(r"torch\.load\((?![^)]*weights_only=True)"),
    }
    for folder in SOURCE_DIRS:
        for path in (fh.REPO / folder).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            for name, pattern in patterns.items():
                found += [f"{path.relative_to(fh.REPO)}: {name}" for _ in pattern.finditer(text)]
    assert not found, found


@pytest.mark.slow
def test_paths_with_spaces_and_shell_characters_are_plain_arguments(tmp_path: Path) -> None:
    folder = tmp_path / "my profiles; touch PWNED1 &&"
    assets = folder / "assets $(touch PWNED2) `touch PWNED3`"
    profile, marker = fh.write_profile(folder, assets, name="demo; touch PWNED4.toml")
    run = fh.run_probe(profile, tmp_path / "reports", timeout_s=90)
    left = fh.orphans(marker)
    fh.reap(left)
    assert not left, [p.cmdline() for p in left]
    _assert_evaluated(run)
    log = (tmp_path / "reports" / "live" / "speculative-server.log").read_text(encoding="utf-8")
    assert f"model_path='{assets / 'target'}'" in log  # one argument, exactly as written
    touched = [p for p in (*tmp_path.rglob("PWNED*"), *fh.REPO.glob("PWNED*"))
               if p.name != "demo; touch PWNED4.toml"]
    assert not touched, touched
