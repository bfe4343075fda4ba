"""One claims run's state: its profile, which claims it chose and what each reported; what
the hooks (session.py), the verdict writer and the run folder all read."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

from specgate.claims.result import ClaimResult
from specgate.core.errors import ProfileError
from specgate.core.matrix import Matrix, load_matrix, on_gpu_set, parse_gpu_sets
from specgate.core.profile import Profile, choose_profile_path, load_profile
from specgate.io import runs
from specgate.io.history import RunRecord

from .options import claims_paths, gate_without_profile

# nodeid -> [claim id, phase], written by whoever collects: an xdist controller collects
# nothing, and a worker that crashes sends no report that names the claim it was running.
CLAIM_INDEX = ".claim-index.json"
# What a claim test records in its user properties, which its reports carry (to the xdist
# controller, and into junit.xml): its result, its claim id, the cause a fixture's error gives
# every claim it broke, and the matrix checkpoint it judges.
CLAIM_PROP = "specgate.claim"
CLAIM_ID_PROP = "specgate.claim_id"
CAUSE_PROP = "specgate.cause"
CHECKPOINT_PROP = "specgate.checkpoint"

RUN_KEY = pytest.StashKey["RunState"]()


def is_controller(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput")


def run_of(config: pytest.Config) -> RunState:
    """This run's state; a usage error where specgate is not active."""
    if RUN_KEY not in config.stash:
        raise pytest.UsageError(
            "specgate is not active in this run: give --specgate-profile PATH (or --profile), "
            "set SPECGATE_PROFILE, or put `specgate = true` in the pytest configuration")
    return config.stash[RUN_KEY]


def _check_paths(profile: Profile) -> None:
    """A mistyped checkpoint path is one error before any claim runs, like a profile typo.
    Paths for a remote launcher live on the GPU host and are not checked here."""
    from specgate.serving import launchers

    attached = profile.server.url is not None
    if not launchers.pick(profile.server.launcher).reads_local_files() and not attached:
        return
    missing = profile.missing_paths()
    if missing:
        raise ProfileError(f"{profile.source or '<profile>'}: " + "; ".join(missing))


def _reports_dir(config: pytest.Config) -> Path:
    given = config.getoption("specgate_reports")
    if given:
        return Path(given).resolve()
    # Beside the project's pytest configuration; without one, where pytest was started.
    base = config.rootpath if config.inipath is not None else config.invocation_params.dir
    return base / "reports"


def _is_claims_run(config: pytest.Config) -> bool:
    """True when the run collects claim suites, not only the harness's own tests."""
    return claims_paths(config, list(config.args))



class RunState:
    """What the controller (or the only process) knows about this run. The hooks that learn it
    are session.ClaimsRun's, which is this state registered as a plugin once specgate is
    active."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.reports_dir = _reports_dir(config)
        # Listing tests is not a run: no verdict, no results, no exit-status rewrite.
        self.claims_run = _is_claims_run(config) and not config.option.collectonly
        self.profile: Profile | None = None
        self.profile_error: str | None = None
        self.results: dict[str, ClaimResult] = {}
        self.claim_ids: dict[str, str] = {}
        self.interrupted = False
        self.finished = False
        self.warnings: list[str] = []
        self.report_warnings: list[str] = []  # from writers that must not crash pytest
        # nodeid -> (claim id, phase) of every claim selected to run: a verdict without one of
        # them is not complete.
        self.expected: dict[str, tuple[str, str]] = {}
        self.stopped_early = False  # -x / --maxfail: the claims left out were meant to be
        self.lock: FileLock | None = None
        # This run's own folder under reports/runs/ (the controller's; a worker knows its path).
        self.run: runs.RunFolder | None = None
        self.run_dir = self.reports_dir
        self.refused: str | None = None  # why this run did not get the reports folder
        self.started = time.time()
        self.last_interim = 0.0  # time.monotonic() of the last interim verdict
        self.interim_cost = 0.0  # seconds the last interim verdict took to write
        # Why no claim ran, when none did (set once collection is known).
        self.nothing_ran: str | None = None
        self.deselected = 0
        # Tests this process collected, and those dropped as claims at concurrency levels the
        # profile does not have (counted among pytest's deselected, said apart in the summary).
        self.collected: int | None = None
        self.levelless = 0
        self.identity: dict[str, Any] | None = None  # what the run judged (verdict_writer)
        # The [bench] concurrency levels the selected claims judge besides the gate's (from the
        # level each `<id>@c<level>` claim test is parametrized with), in a process that
        # collected.
        self.levels_asked: set[int] = set()
        # A checkpoint matrix (--specgate-matrix): the checkpoints, the GPU sets their live
        # sessions take, and which checkpoint each claim test judged.
        self.matrix: Matrix | None = None
        self.gpu_sets: list[tuple[int, ...]] | None = None
        self.checkpoints: dict[str, str] = {}  # nodeid -> checkpoint name
        self.profiles: dict[str, Profile] = {}
        self.identities: dict[str, dict[str, Any]] = {}
        # The run regress.* compare with when --specgate-reference-run names one (else each
        # compares with the profile's last passing run).
        self.reference_run: RunRecord | None = None
        config.stash[RUN_KEY] = self

    def get_profile(self) -> Profile:
        if self.profile is None and self.profile_error is None:
            self.profile_error = gate_without_profile(self.config)
        if self.profile is None and self.profile_error is None:
            opt = self.config.getoption
            try:
                profile = load_profile(choose_profile_path(opt("specgate_profile")))
                profile = profile.with_overrides(
                    drafter=opt("specgate_drafter"),
                    reference_drafter=opt("specgate_reference"),
                    target_model=opt("specgate_target"),
                    sglang_launcher=opt("specgate_launcher"),
                    server_url=opt("specgate_server_url"),
                    baseline_url=opt("specgate_baseline_url"),
                )
                self.reports_dir.mkdir(parents=True, exist_ok=True)
                if profile.demo is not None:
                    from specgate.testing import demo

                    demo.prepare(profile)
                _check_paths(profile)
                if opt("specgate_reference_run"):
                    from specgate.report.history import reference_record

                    self.reference_run = reference_record(opt("specgate_reference_run"),
                                                          self.reports_dir)
                matrix_file, sets = opt("specgate_matrix"), opt("specgate_gpu_sets")
                if sets and not matrix_file:
                    raise ProfileError("--specgate-gpu-sets spreads a checkpoint matrix over "
                                       "GPU sets: give --specgate-matrix FILE too")
                if matrix_file:
                    self.matrix = load_matrix(matrix_file)
                    self.gpu_sets = parse_gpu_sets(sets) if sets else None
                    for gpus in self.gpu_sets or []:
                        on_gpu_set(profile, gpus)  # each set must hold the TP ranks
                    for checkpoint in self.matrix.checkpoints:
                        _check_paths(self._for(profile, checkpoint.name))
                self.profile = profile
            except ProfileError as exc:
                self.profile_error = str(exc)
            except Exception as exc:
                self.profile_error = f"preparing the profile's assets failed: {exc}"
        if self.profile is None:
            if is_controller(self.config) and self.claims_run and not self.finished:
                # pytest skips sessionfinish when sessionstart exits: conclude the run now.
                self.conclude_early()
            # A usage error is printed once (pytest.exit printed it twice) and exits 4.
            raise pytest.UsageError(f"specgate: {self.profile_error}")
        return self.profile

    def _for(self, base: Profile, name: str) -> Profile:
        assert self.matrix is not None
        if name not in self.profiles:
            checkpoint = self.matrix.get(name)
            self.profiles[name] = base.with_overrides(
                drafter=checkpoint.drafter, reference_drafter=checkpoint.reference)
        return self.profiles[name]

    def profile_for(self, checkpoint: str | None) -> Profile:
        """The profile a claim test judges: the run's, or a matrix checkpoint's (the run's
        with that checkpoint's drafter and reference)."""
        profile = self.get_profile()
        if checkpoint is None or self.matrix is None:
            return profile
        return self._for(profile, checkpoint)

    def indexed(self, nodeid: str) -> tuple[str, str] | None:
        """The claim id and phase the collecting process recorded for nodeid."""
        try:
            index = json.loads((self.run_dir / CLAIM_INDEX).read_text(encoding="utf-8"))
            claim_id, phase, *_checkpoint = index[self._unsuffixed(nodeid)]
            return str(claim_id), str(phase)
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _unsuffixed(self, nodeid: str) -> str:
        """A node id without the `@group` xdist's loadgroup gives a matrix's claim tests."""
        if self.matrix is not None and "@" in nodeid:
            head, _, group = nodeid.rpartition("@")
            if group in self.matrix.names:
                return head
        return nodeid

    def conclude_early(self) -> None:
        """End the run before its session starts (a profile that cannot be used): the hooks'
        own conclusion (session.ClaimsRun)."""
        raise NotImplementedError
