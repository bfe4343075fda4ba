"""Deployment profiles: TOML files validated into typed settings, with command-line overrides."""

from __future__ import annotations

import difflib
import os
import re
import shlex
import sys
import tomllib
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from specgate.core import files
from specgate.core.errors import ProfileError

PROFILE_ENV = "SPECGATE_PROFILE"
CACHE_ENV = "SPECGATE_CACHE"
# A profile is a few KB; a bound keeps a wrong file (a 34 MB log) from taking a minute to parse.
MAX_PROFILE_BYTES = files.PROFILE_BYTES
# Each [drafter.expect] key is a claim, and so a test, an Allure result and a junit case: a
# drafter's config.json has a few dozen fields (a multimodal target's, nested, about 150), and
# the bound keeps a generated profile from costing a run seconds per hundred keys.
MAX_EXPECT_KEYS = 256
DEFAULT_LAUNCHER = ("python", "-m", "sglang.launch_server")
SIMULATOR_MODULE = "specgate.testing.simulator"
# More streams than this is not a deployment's concurrency but a load test.
MAX_CONCURRENCY = 1024


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TargetSection(_Section):
    path: str | None = None


class DrafterSection(_Section):
    path: str | None = None
    reference: str | None = None
    expect: dict[str, Any] = Field(default_factory=dict)


class ServerSection(_Section):
    launcher: list[str] = Field(default_factory=lambda: list(DEFAULT_LAUNCHER))
    host: str = "127.0.0.1"
    port: int = Field(default=30000, ge=0, le=65535)
    tp: int = Field(default=1, ge=1)
    startup_timeout_s: float = Field(default=1800.0, gt=0)
    stop_timeout_s: float = Field(default=30.0, gt=0)
    args: list[str] = Field(default_factory=list)
    baseline_args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    api_key_env: str | None = None
    url: str | None = None
    baseline_url: str | None = None
    stop_command: list[str] | None = None
    gpus: list[int] | None = None
    # The baseline's own GPUs (default: the same as the speculative server's), and whether both
    # servers are launched at once so their loads overlap.
    baseline_gpus: list[int] | None = None
    parallel_launch: bool = False

    @model_validator(mode="after")
    def _gpus_agree(self) -> ServerSection:
        for key, listed in (("gpus", self.gpus), ("baseline_gpus", self.baseline_gpus)):
            if listed is None:
                continue
            if len(set(listed)) != len(listed) or any(i < 0 for i in listed):
                raise ValueError(f"{key} = {listed} must list distinct GPU indices (>= 0)")
        visible = self.env.get("CUDA_VISIBLE_DEVICES")
        if self.gpus is not None and visible is not None \
                and visible.replace(" ", "") != ",".join(map(str, self.gpus)):
            raise ValueError(f"gpus = {self.gpus} disagrees with env CUDA_VISIBLE_DEVICES = "
                             f"{visible!r}; set one of them (gpus is passed to the server as "
                             "CUDA_VISIBLE_DEVICES)")
        for config in ("speculative", "baseline"):
            self.server_gpus(config)  # raises ValueError naming the key that lists too few
        return self

    def server_env(self, config: str = "speculative") -> dict[str, str]:
        """The environment a server gets on top of the launcher's: [server] env, plus
        CUDA_VISIBLE_DEVICES from [server] gpus (the baseline's from baseline_gpus)."""
        env = dict(self.env)
        listed = self.baseline_gpus if config == "baseline" and self.baseline_gpus is not None \
            else self.gpus
        if listed is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, listed))
        return env

    def server_args(self, config: str = "speculative") -> list[str]:
        """[server] args, with baseline_args for the baseline."""
        return [*self.args, *self.baseline_args] if config == "baseline" else list(self.args)

    def server_gpus(self, config: str = "speculative") -> list[int] | str:
        """The GPUs (nvidia-smi indices) a server runs on, one per TP rank: SGLang gives rank r
        CUDA device base + r × step (`--base-gpu-id`, `--gpu-id-step` in its args; 0 and 1 by
        default) among the visible ones, which are [server] gpus (baseline_gpus for the
        baseline), else the CUDA_VISIBLE_DEVICES of [server] env, else every GPU. A
        CUDA_VISIBLE_DEVICES that is not a list of indices (GPU UUIDs, MIG ids) comes back as
        written. Raises ValueError when the visible GPUs are too few for tp."""
        key = "gpus"
        listed = self.gpus
        if config == "baseline" and self.baseline_gpus is not None:
            key, listed = "baseline_gpus", self.baseline_gpus
        visible: list[int] | None = None
        if listed is not None:
            visible = list(listed)
        else:
            written = self.env.get("CUDA_VISIBLE_DEVICES")
            if written is not None:
                parts = [p.strip() for p in written.split(",") if p.strip()]
                if not all(p.isdigit() for p in parts):
                    return written
                key, visible = "env CUDA_VISIBLE_DEVICES", [int(p) for p in parts]
        base, step = _gpu_offsets(self.server_args(config))
        ordinals = [base + rank * step for rank in range(self.tp)]
        if visible is None:
            return ordinals
        if ordinals[-1] >= len(visible):
            offsets = f" from --base-gpu-id {base} --gpu-id-step {step}" \
                if (base, step) != (0, 1) else ""
            raise ValueError(
                f"{key} lists {len(visible)} GPU{'s' if len(visible) != 1 else ''} "
                f"({','.join(map(str, visible))}) but tp = {self.tp} needs CUDA devices "
                f"{ordinals}{offsets} among them"
                + (" for the baseline" if config == "baseline" else ""))
        return [visible[i] for i in ordinals]

    @field_validator("launcher", mode="before")
    @classmethod
    def _split_launcher(cls, value: Any) -> Any:
        if isinstance(value, str):
            return shlex.split(value)
        return value

    @field_validator("launcher")
    @classmethod
    def _launcher_not_empty(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("must name at least the program to run")
        return value


def _gpu_offsets(args: list[str]) -> tuple[int, int]:
    """SGLang's --base-gpu-id and --gpu-id-step in a server's args (0 and 1 when absent)."""
    found = {"--base-gpu-id": 0, "--gpu-id-step": 1}
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag in found:
            value = value if eq else (args[i + 1] if i + 1 < len(args) else "")
            try:
                found[flag] = int(value)
            except ValueError:
                raise ValueError(f"{flag} {value!r} in [server] args is not a number") from None
    if found["--base-gpu-id"] < 0 or found["--gpu-id-step"] < 1:
        raise ValueError("--base-gpu-id must be >= 0 and --gpu-id-step >= 1 in [server] args")
    return found["--base-gpu-id"], found["--gpu-id-step"]


class SpeculativeSection(_Section):
    algorithm: str = "EAGLE3"
    num_steps: int | None = Field(default=None, ge=1)
    eagle_topk: int | None = Field(default=None, ge=1)
    num_draft_tokens: int | None = Field(default=None, ge=2)

    @model_validator(mode="after")
    def _all_or_none(self) -> SpeculativeSection:
        given = [v is not None for v in (self.num_steps, self.eagle_topk, self.num_draft_tokens)]
        if any(given) and not all(given):
            raise ValueError(
                "num_steps, eagle_topk and num_draft_tokens must be set all three or none "
                "(SGLang asserts this at start-up)"
            )
        if self.eagle_topk == 1 and self.num_steps is not None:
            if self.num_draft_tokens != self.num_steps + 1:
                raise ValueError(
                    f"with eagle_topk = 1, num_draft_tokens must be num_steps + 1 = "
                    f"{self.num_steps + 1} (found {self.num_draft_tokens}); SGLang would "
                    "silently rewrite it"
                )
        return self


class BenchSection(_Section):
    prompts: str = "builtin"
    max_new_tokens: int = Field(default=256, ge=2)
    temperature: float = Field(default=0.0, ge=0.0)
    warmup: int = Field(default=2, ge=0)
    repeats: int = Field(default=3, ge=1)
    max_repeats: int = Field(default=6, ge=1)
    confidence: float = Field(default=0.95, gt=0.5, lt=1.0)
    chat_template: str | None = None
    request_timeout_s: float = Field(default=600.0, gt=0)
    categories: list[str] | None = None
    prompts_per_category: int | None = Field(default=None, ge=1)
    baseline_max_age_h: float | None = Field(default=None, gt=0)
    design: Literal["ab", "aba", "interleaved"] = "ab"
    launch_spread: float | Literal["learned"] = "learned"
    launch_spread_min_launches: int = Field(default=5, ge=2)

    @field_validator("launch_spread")
    @classmethod
    def _spread_is_a_fraction(cls, value: float | str) -> float | str:
        if isinstance(value, (int, float)) and not 0.0 < value < 1.0:
            raise ValueError(f"must be \"learned\" or a fraction above 0 and below 1 (the "
                             f"standard deviation of ln tok/s between launches, e.g. 0.05), "
                             f"found {value}")
        return value
    # Requests in flight at once, one level per entry: each level runs the same prompts with
    # exactly that many streams open (measure/load.py).
    concurrency: list[int] = Field(default_factory=lambda: [1], min_length=1)

    @field_validator("concurrency")
    @classmethod
    def _levels(cls, value: list[int]) -> list[int]:
        if any(level < 1 or level > MAX_CONCURRENCY for level in value):
            raise ValueError(f"every level must be a whole number from 1 to {MAX_CONCURRENCY}, "
                             f"found {value}")
        if len(set(value)) != len(value):
            raise ValueError(f"each level may appear once, found {value}")
        return sorted(value)


class TuneSection(_Section):
    """`specgate tune`: which (steps, topk 1, steps + 1 draft tokens) chains to consider."""

    steps: list[int] = Field(default_factory=lambda: [1, 2, 3, 4, 5, 6], min_length=1)
    max_launches: int = Field(default=4, ge=1)
    margin: float = Field(default=0.03, ge=0.0, lt=1.0)
    repeats: int = Field(default=1, ge=1)

    @field_validator("steps")
    @classmethod
    def _steps_positive(cls, value: list[int]) -> list[int]:
        if any(s < 1 for s in value):
            raise ValueError(f"every number of steps must be >= 1, found {value}")
        return sorted(set(value))


class ThresholdsSection(_Section):
    baseline_tps_min: float | None = Field(default=None, gt=0)
    accept_len_min: float | Literal["breakeven"] | None = None
    d2t_match_min: float = Field(default=0.99, ge=0.0, le=1.0)
    t2d_match_min: float | None = Field(default=None, ge=0.0, le=1.0)
    speedup_min: float = Field(default=1.0, gt=0)
    tps_targets: list[float] = Field(default_factory=lambda: [150.0, 200.0])
    regression_tolerance: float | None = Field(default=None, ge=0.0)
    # The [bench] concurrency level the gate decides at (default: the smallest level).
    gate_concurrency: int | None = Field(default=None, ge=1)


class FinetuneSection(_Section):
    init: str | None = None
    vocab_map: str | None = None
    log: str | None = None
    reference_log: str | None = None
    hidden_states: str | None = None


# eval.live_agreement judges a group only from this many scored chain positions up.
EVAL_MIN_TOKENS = 200


class EvalSection(_Section):
    """`eval.live_agreement`: the offline prediction of the served accept length against the
    one the probe measures."""

    hidden_states: str | None = None
    tolerance: float = Field(default=0.10, ge=0.0, lt=1.0)
    min_tokens: int = Field(default=EVAL_MIN_TOKENS, ge=1)
    # Where the offline evaluations run: "cpu", "cuda" / "cuda:N", or "auto" (cuda when torch
    # sees a GPU). Applies to eval.teacher_forced and eval.live_agreement.
    device: str = Field(default="cpu", pattern=r"^(cpu|auto|cuda(:[0-9]+)?)$")


class DataSection(_Section):
    path: str | None = None


class DemoSection(_Section):
    """Generated assets for a demonstration profile (checkpoints, target config, simulator).

    A relative `assets` folder lies under $SPECGATE_CACHE, else `.specgate/` in the working
    directory (never beside an installed profile); the profile's other relative paths then name
    files inside it.
    """

    assets: str = "demo"
    kind: Literal["demo", "seeds"] = "demo"


class Profile(_Section):
    name: str
    description: str | None = None
    simulated: bool | None = None
    target: TargetSection = Field(default_factory=TargetSection)
    drafter: DrafterSection = Field(default_factory=DrafterSection)
    server: ServerSection = Field(default_factory=ServerSection)
    speculative: SpeculativeSection = Field(default_factory=SpeculativeSection)
    bench: BenchSection = Field(default_factory=BenchSection)
    thresholds: ThresholdsSection = Field(default_factory=ThresholdsSection)
    tune: TuneSection = Field(default_factory=TuneSection)
    finetune: FinetuneSection = Field(default_factory=FinetuneSection)
    eval: EvalSection = Field(default_factory=EvalSection)
    data: DataSection = Field(default_factory=DataSection)
    demo: DemoSection | None = None
    # Where the profile came from; paths in it are relative to that file's folder.
    source: str | None = None

    @property
    def base_dir(self) -> Path:
        """What relative paths are relative to: the generated assets of a demonstration
        profile, else the profile file's folder."""
        if self.demo is not None:
            return self.demo_assets()
        return Path(self.source).parent if self.source else Path.cwd()

    def demo_assets(self) -> Path:
        """Where a demonstration profile's generated files go (see DemoSection)."""
        assets = Path(os.path.expandvars(os.path.expanduser(
            self.demo.assets if self.demo is not None else "demo")))
        return assets if assets.is_absolute() else (cache_dir() / assets).resolve()

    def resolve(self, value: str | None) -> Path | None:
        """A path from the profile, relative to the profile's folder, with ~ and $VARS expanded."""
        if value is None or value == "":
            return None
        expanded = os.path.expandvars(os.path.expanduser(value))
        path = Path(expanded)
        return path if path.is_absolute() else (self.base_dir / path).resolve()

    # The checkpoints as this machine reads them: every reader asks here, so a path from the
    # profile, from the command line (with_overrides) or of a demonstration's assets resolves
    # one way. A launcher that runs the server elsewhere passes them as written instead
    # (serving/launchers/).
    @property
    def target_path(self) -> Path | None:
        return self.resolve(self.target.path)

    @property
    def drafter_path(self) -> Path | None:
        return self.resolve(self.drafter.path)

    @property
    def reference_path(self) -> Path | None:
        return self.resolve(self.drafter.reference)

    def missing_paths(self) -> list[str]:
        """One sentence per checkpoint or model path that is set but names nothing here."""
        found = []
        for key, option, path in (
                ("[drafter] path", "--drafter", self.drafter_path),
                ("[drafter] reference", "--reference-drafter", self.reference_path),
                ("[target] path", "--target-model", self.target_path)):
            if path is not None and not path.exists():
                found.append(f"{key} (or {option}): {path}: no such file or folder")
        return found

    @property
    def gate_concurrency(self) -> int:
        """The concurrency level the gate decides at: [thresholds] gate_concurrency, else the
        smallest [bench] concurrency level."""
        chosen = self.thresholds.gate_concurrency
        return chosen if chosen is not None else min(self.bench.concurrency)

    @property
    def is_simulated(self) -> bool:
        if self.simulated is not None:
            return self.simulated
        return any(SIMULATOR_MODULE in part for part in self.server.launcher)

    def launcher_argv(self) -> list[str]:
        """The launcher prefix with a leading `python` bound to this interpreter when local."""
        argv = list(self.server.launcher)
        if argv and argv[0] in ("python", "python3") and Path(sys.executable).exists():
            argv[0] = sys.executable
        return argv

    def with_overrides(self, **overrides: Any) -> Profile:
        """A copy with command-line options applied (None leaves the profile's value).

        Paths given on the command line are relative to the working directory, not the profile.
        """
        def cli_path(value: str | None) -> str | None:
            return str(Path(value).expanduser().resolve()) if value else None

        drafter = self.drafter.model_copy(update=_given(
            path=cli_path(overrides.get("drafter")),
            reference=cli_path(overrides.get("reference_drafter"))))
        target = self.target.model_copy(update=_given(
            path=cli_path(overrides.get("target_model"))))
        launcher = overrides.get("sglang_launcher")
        server = self.server.model_copy(update=_given(
            launcher=shlex.split(launcher) if isinstance(launcher, str) else launcher,
            url=overrides.get("server_url"),
            baseline_url=overrides.get("baseline_url"),
        ))
        return self.model_copy(update={"drafter": drafter, "target": target, "server": server})


def _given(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def cache_dir() -> Path:
    """Generated demonstration assets: $SPECGATE_CACHE, else .specgate/ in the working directory."""
    given = os.environ.get(CACHE_ENV)
    return Path(given).expanduser() if given else Path.cwd() / ".specgate"


def shipped_profiles_dir() -> Path:
    """The profiles installed with the package (demo, seeds-replay, the seeds' deployment)."""
    return Path(__file__).resolve().parents[1] / "profiles"


def default_profile_path() -> Path:
    """The embedded demo profile, installed with the package."""
    return shipped_profiles_dir() / "demo.toml"


def choose_profile_path(option: str | None) -> Path:
    """--profile, else $SPECGATE_PROFILE, else the embedded demo profile.

    A bare name that is no file here (`demo`, `seeds-replay`) names a shipped profile.
    """
    chosen = option or os.environ.get(PROFILE_ENV) or None
    if not chosen:
        return default_profile_path()
    path = Path(chosen).expanduser()
    shipped = shipped_profiles_dir() / f"{chosen}.toml"
    if not path.exists() and "/" not in chosen and shipped.exists():
        return shipped
    return path


def shipped_profile_names() -> list[str]:
    return sorted(p.stem for p in shipped_profiles_dir().glob("*.toml"))


def load_profile(path: Path | str) -> Profile:
    """Read and validate one profile, raising ProfileError with the file, key and expectation."""
    path = Path(path)
    if not path.exists():
        raise ProfileError(f"{path}: profile file not found (give --profile PATH or set "
                           f"{PROFILE_ENV}; shipped profiles, by name: "
                           f"{', '.join(shipped_profile_names())})")
    try:
        raw = tomllib.loads(files.read_text(path, limit=MAX_PROFILE_BYTES))
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:
        raise ProfileError(f"{path}: not valid TOML: arrays or inline tables nested too deeply "
                           "for a profile") from None
    except files.UnreadableFile as exc:
        raise ProfileError(f"{path}: {exc}; a profile is a TOML file of a few KB") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileError(f"{path}: cannot be read: {exc}") from None
    return parse_profile(raw, source=path)


def parse_profile(raw: dict[str, Any], source: Path | None = None) -> Profile:
    label = str(source) if source else "<profile>"
    drafter = raw.get("drafter")
    expect = drafter.get("expect") if isinstance(drafter, dict) else None
    if isinstance(expect, dict) and len(expect) > MAX_EXPECT_KEYS:
        raise ProfileError(f"{label}: [drafter.expect] lists {len(expect)} keys, over the "
                           f"{MAX_EXPECT_KEYS} specgate checks (each is a claim; a drafter's "
                           "config.json has a few dozen fields): keep the fields that decide "
                           "whether SGLang serves the drafter")
    data = dict(raw)
    if source is not None:
        data["source"] = str(Path(source).resolve())
    try:
        profile = Profile.model_validate(data)
    except ValidationError as exc:
        raise ProfileError(_describe(label, exc)) from None
    gate = profile.thresholds.gate_concurrency
    if gate is not None and gate not in profile.bench.concurrency:
        raise ProfileError(f"{label}: key 'thresholds.gate_concurrency' is {gate}; expected one "
                           f"of the [bench] concurrency levels {profile.bench.concurrency} (the "
                           "gate decides at a level that is measured): add it to "
                           "[bench] concurrency or pick one of those")
    if profile.bench.design == "interleaved" and profile.bench.concurrency != [1]:
        raise ProfileError(f"{label}: key 'bench.concurrency' is {profile.bench.concurrency}; "
                           "design = \"interleaved\" sends one request at a time, in turn to "
                           "each resident server, so it measures one stream only: leave "
                           "[bench] concurrency out, or use design = \"ab\" or \"aba\"")
    return profile


def _describe(label: str, exc: ValidationError) -> str:
    lines: list[str | tuple[str, ...]] = []
    # A value that fits no branch of a union (float | "breakeven") gets one error per branch;
    # they are merged into one line per key, placed where the first of them was.
    unions: dict[tuple[str, ...], list[Any]] = {}
    for err in exc.errors():
        loc, branched = _user_loc(err["loc"], keep_last=err["type"] == "extra_forbidden")
        key = _key_name(loc)
        if branched:
            if tuple(loc) not in unions:
                unions[tuple(loc)] = []
                lines.append(tuple(loc))
            unions[tuple(loc)].append(err)
        elif err["type"] == "extra_forbidden":
            section = _key_name(loc[:-1])
            known = _known_keys(loc[:-1])
            where = f"in [{section}]" if section else "at the top level"
            close = difflib.get_close_matches(loc[-1], known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            lines.append(f"{label}: unknown key {key!r} {where}{hint}; expected one of: "
                         f"{', '.join(known)}")
        elif err["type"] == "missing":
            lines.append(f"{label}: key {key!r} is required but missing")
        else:
            found = err.get("input")
            lines.append(f"{label}: key {key!r}: {err['msg']} (found {found!r})")
    return "\n".join(line if isinstance(line, str)
                     else _union_line(label, _key_name(list(line)), unions[line])
                     for line in lines)


def _union_line(label: str, key: str, errors: list[Any]) -> str:
    found = errors[0].get("input")
    wanted = list(dict.fromkeys(_expectation(e) for e in errors))
    hint = ""
    if isinstance(found, str):
        literals = [w for e in errors if e["type"] == "literal_error"
                    for w in re.findall(r"'([^']*)'", str((e.get("ctx") or {}).get("expected")))]
        close = difflib.get_close_matches(found, literals, n=1)
        hint = f' (did you mean "{close[0]}"?)' if close else ""
    return f"{label}: key {key!r} is {found!r}; expected {' or '.join(wanted)}{hint}"


_EXPECTATIONS = {
    "float_type": "a number", "float_parsing": "a number", "finite_number": "a finite number",
    "int_type": "a whole number", "int_parsing": "a whole number",
    "int_from_float": "a whole number", "bool_type": "true or false",
    "bool_parsing": "true or false", "string_type": "a string", "list_type": "a list",
    "dict_type": "a table", "model_type": "a table", "model_attributes_type": "a table",
}


def _expectation(err: Any) -> str:
    """What one union branch wanted, in the profile's (TOML) words."""
    if err["type"] == "literal_error":
        return str((err.get("ctx") or {}).get("expected", "")).replace("'", '"')
    if err["type"] in _EXPECTATIONS:
        return _EXPECTATIONS[err["type"]]
    return str(err["msg"]).removeprefix("Input should be ")


def _user_loc(loc: tuple[int | str, ...], *, keep_last: bool = False) -> tuple[list[str], bool]:
    """The key path as the profile spells it, without pydantic's union-branch tags (`float`,
    `literal['breakeven']`, a model's class name) and list indices; and whether a tag was cut."""
    model: type[BaseModel] | None = Profile
    members: list[Any] = []
    tag_next = False
    branched = False
    out: list[str] = []
    for i, part in enumerate(loc):
        if isinstance(part, int):
            continue
        if tag_next:
            tag_next = False
            branched = True
            model = next((m for m in _models(members) if m.__name__ == part), None)
            continue
        out.append(part)
        field = model.model_fields.get(part) if model is not None else None
        if field is None:
            # A free-form table's key (server.env.NAME), an unknown key, or a branch tag of a
            # section's own union; the last is never a user key unless the error says so.
            if model is not None and not (keep_last and i == len(loc) - 1):
                out.pop()
                branched = True
            model = None
            continue
        members = _union_members(field.annotation)
        tag_next = len(members) > 1
        found = _models(members)
        model = found[0] if len(members) == 1 and found else None
    return out, branched


def _union_members(annotation: Any) -> list[Any]:
    if get_origin(annotation) in (Union, types.UnionType):
        return [a for a in get_args(annotation) if a is not type(None)]
    return [annotation]


def _models(members: list[Any]) -> list[type[BaseModel]]:
    return [m for m in members if isinstance(m, type) and issubclass(m, BaseModel)]


def _key_name(loc: list[str]) -> str:
    return ".".join(loc)


def _known_keys(loc: list[str]) -> list[str]:
    model: Any = Profile
    for part in loc:
        field = model.model_fields.get(part)
        if field is None:
            return []
        ann = field.annotation
        candidates = [ann, *getattr(ann, "__args__", ())]
        model = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)),
                     None)
        if model is None:
            return []
    return [k for k in model.model_fields if k != "source"]
