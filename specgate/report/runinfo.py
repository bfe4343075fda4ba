"""After a claims run: Allure's environment, executor and categories files, and the history."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specgate.core.profile import Profile


def finish(profile: Profile | None, reports_dir: Path, verdict_doc: dict[str, Any],
           results_dir: Path | None) -> list[str]:
    """After the verdict: Allure's environment, executor and categories files, and the history.

    The verdict is already on disk when this runs; a problem here is reported as a warning and
    never costs the run its verdict.
    """
    warnings: list[str] = []
    if results_dir is not None and results_dir.exists():
        try:
            from specgate.report import allure_meta
            allure_meta.write_all(results_dir, profile, verdict_doc)
        except Exception as exc:
            warnings.append(f"writing Allure environment files failed: {exc}")
    if profile is not None and verdict_doc.get("complete"):
        try:
            from specgate.report import history
            history.append_run(reports_dir, profile, verdict_doc)
        except Exception as exc:
            warnings.append(f"appending to the run history failed: {exc}")
    return warnings
