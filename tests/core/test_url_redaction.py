"""No password in a URL reaches anything written: --server-url=http://user:PASSWORD@host and
credential-looking query parameters are masked wherever the API key already is."""

from __future__ import annotations

import uuid
from pathlib import Path

import fault_support as fh
import pytest

from specgate.core.redact import MASK, Redactor, redact_urls


@pytest.mark.parametrize(("text", "masked"), [
    ("http://admin:s3cret-pw@host:30000/v1", "http://admin:***@host:30000/v1"),
    ("--server-url=https://u:p%40ss@10.0.0.1", "--server-url=https://u:***@10.0.0.1"),
    ("GET http://h/x?token=abc&b=1&sig=zz#f", "GET http://h/x?token=***&b=1&sig=***#f"),
    ('{"url": "http://u:pw@h"}', '{"url": "http://u:***@h"}'),
    ("http://host:8000/generate?x=1", "http://host:8000/generate?x=1"),
    ("ssh user@host:22", "ssh user@host:22"),
])
def test_redact_urls(text: str, masked: str) -> None:
    assert redact_urls(text) == masked
    assert Redactor().redact(text) == masked  # log tails and commands get it too
    assert redact_urls(masked) == masked


@pytest.fixture(scope="module")
def assets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.getbasetemp().parent / "specgate-fault-assets"


@pytest.mark.slow
def test_a_url_password_never_reaches_anything_written(tmp_path: Path, assets: Path) -> None:
    password = "PW-" + uuid.uuid4().hex
    profile, _ = fh.write_profile(tmp_path, assets)
    reports = tmp_path / "reports"
    # Port 9 (discard) is closed: both servers are unreachable, so the URL lands in broken live
    # claims, the progress log, live/results.json, junit.xml, Allure and the terminal.
    run = fh.run_probe(profile, reports, f"--server-url=http://admin:{password}@127.0.0.1:9",
                       f"--baseline-url=http://127.0.0.1:9/?token={password}", timeout_s=90)
    files = [p for p in reports.rglob("*") if p.is_file()]
    assert len(files) > 15
    leaks = [str(p.relative_to(reports)) for p in files if password.encode() in p.read_bytes()]
    assert not leaks, leaks
    assert password not in run.output
    shown = [p.name for p in files if f"admin:{MASK}@127.0.0.1:9".encode() in p.read_bytes()]
    assert {"verdict.json", "results.json", "progress.log", "junit.xml"} <= set(shown), shown
    assert f"admin:{MASK}@" in run.output
