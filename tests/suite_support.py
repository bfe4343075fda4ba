"""The claims suites and projects the plugin's own tests run: a suite is written claim by claim
(`claim`, and the common ones below), and `project` lays out a folder a user's would look like
(a profile, suites/test_claims.py, a pytest.ini without -r options)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

HEADER = "import pytest\nfrom specgate.claims import result as claims\n"
PYTEST_INI = "[pytest]\ntestpaths = suites\naddopts = -p no:cacheprovider\n"


def claim(name: str, body: str = "pass", *, phase: str = "phase0", marks: Sequence[str] = (),
          fixtures: Sequence[str] = ()) -> str:
    """One claim test: `demo.NAME` in `phase`, taking `fixtures` and `check`, running `body`."""
    lines = [f'@pytest.mark.claim("demo.{name}")', f"@pytest.mark.{phase}",
             *(f"@pytest.mark.{m}" for m in marks),
             f"def test_{name}({', '.join([*fixtures, 'check'])}):",
             textwrap.indent(textwrap.dedent(body).strip(), "    ")]
    return "\n" + "\n".join(lines) + "\n"


def passing(name: str = "pass", *, marks: Sequence[str] = ()) -> str:
    return claim(name, f'check(claims.passed("demo.{name}", "phase0", "fine", observed=3, '
                       'expected=">= 2"))', marks=marks)


FAILING = claim("fail", '''
    check(claims.failed("demo.fail", "phase0", "252 of 32000 positions match",
                        observed=252, expected=">= 31680", unit="positions"))''')
SKIPPED = claim("skip",
                'check(claims.skipped("demo.skip", "phase0", "no reference drafter given"))')


def broken(message: str, *, phase: str = "phase0") -> str:
    return claim("broken", f'check(claims.broken("demo.broken", "{phase}", "{message}"))',
                 phase=phase)


def suite(*parts: str, imports: str = "") -> str:
    """A suite module: the common imports (and `imports`), then the parts in order."""
    return (imports + "\n" if imports else "") + HEADER + "".join(parts)


def project(root: Path, suite_text: str, *, name: str, drafter: bool = True) -> Path:
    """`root` as a user's project: p.toml (profile NAME; with `drafter`, an empty drafter folder
    d/ whose contents a test may fill), suites/test_claims.py and a pytest.ini."""
    profile = f'name = "{name}"\n' + ('[drafter]\npath = "d"\n' if drafter else "")
    (root / "p.toml").write_text(profile)
    if drafter:
        (root / "d").mkdir()
    (root / "suites").mkdir()
    (root / "suites" / "test_claims.py").write_text(suite_text)
    # No -r option anywhere: what a project that installed specgate has.
    (root / "pytest.ini").write_text(PYTEST_INI)
    return root
