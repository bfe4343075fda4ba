"""The shape of specgate/ read from its own imports: no import circle, and an offline probe that
loads no HTTP client."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import specgate

PACKAGE = Path(specgate.__file__).resolve().parent


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path, name: str, modules: set[str]) -> Iterator[str]:
    """Every specgate module the file imports, at any depth (inside functions, under
    TYPE_CHECKING): the module itself when `from X import Y` names a module, else X."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield full if full in modules else base


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    files = {_module_name(p, root): p for p in root.rglob("*.py")}
    modules = set(files)
    return {name: {m for m in _imported(path, name, modules) if m in modules and m != name}
            for name, path in files.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_imports_inside_functions(tmp_path: Path) -> None:
    # A circle hidden by a function-level import is still a circle.
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("def f():\n    from .a import g\n    return g\n")
    (pkg / "c.py").write_text("from pkg.a import b\n")
    graph = import_graph(pkg)
    assert graph["pkg.b"] == {"pkg.a"}
    assert graph["pkg.c"] == {"pkg.a"}
    assert circles(graph) == [["pkg.a", "pkg.b"]]


def test_specgate_has_no_import_circle() -> None:
    graph = import_graph()
    assert len(graph) >= 100  # every module was read
    assert circles(graph) == []


# A checkpoint path of the profile as written: `x.drafter.path`, `x.drafter.reference`,
# `x.target.path`.
_CHECKPOINT_KEYS = {("drafter", "path"), ("drafter", "reference"), ("target", "path")}
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _own_nodes(scope: ast.AST) -> list[ast.AST]:
    """The nodes of one function (or of the module), without the bodies of those inside it."""
    found = []
    for child in ast.iter_child_nodes(scope):
        found.append(child)
        if not isinstance(child, (*_FUNCTIONS, ast.ClassDef)):
            found.extend(_own_nodes(child))
    return found


def _mentions(expr: ast.AST, names: set[str]) -> bool:
    """Whether an expression reads a checkpoint path as written, directly or through a name."""
    return any(
        (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
         and (node.value.attr, node.attr) in _CHECKPOINT_KEYS)
        or (isinstance(node, ast.Name) and node.id in names)
        for node in ast.walk(expr))


def _bound_from(nodes: list[ast.AST], names: set[str]) -> set[str]:
    """The names a scope binds from a checkpoint path or from `names` (`x = p.drafter.path`,
    `for key, x in (("...", p.target.path), ...)`), followed from name to name."""
    bound = set(names)
    while True:
        before = len(bound)
        for node in nodes:
            pairs: list[tuple[ast.AST, ast.AST]] = []
            if isinstance(node, ast.Assign):
                pairs = [(target, node.value) for target in node.targets]
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and node.value:
                pairs = [(node.target, node.value)]
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                pairs = [(node.target, node.iter)]
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                pairs = [(node.optional_vars, node.context_expr)]
            for target, value in pairs:
                if _mentions(value, bound):
                    bound |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        if len(bound) == before:
            return bound


def _callee(node: ast.AST) -> str | None:
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)


def _resolves(call: ast.Call, names: set[str]) -> bool:
    return any(_mentions(arg, names) for arg in [*call.args, *(k.value for k in call.keywords)])


def _checkpoint_resolves(path: Path) -> list[str]:
    """Calls that resolve a checkpoint path of the profile themselves: `.resolve(x.drafter.path)`,
    `.resolve(value)` where the function bound `value` from one, or a call of a function of the
    file that passes its argument on to `.resolve(...)`."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    scopes = [tree, *(node for node in ast.walk(tree) if isinstance(node, _FUNCTIONS))]
    resolvers = {"resolve"}
    for scope in scopes:
        if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
            own = _own_nodes(scope)
            params = _bound_from(own, {a.arg for a in ast.walk(scope.args)
                                       if isinstance(a, ast.arg) and a.arg not in ("self", "cls")})
            if any(_callee(n) == "resolve" and _resolves(n, params) for n in own
                   if isinstance(n, ast.Call)):
                resolvers.add(scope.name)
    found = set()
    for scope in scopes:
        own = _own_nodes(scope)
        bound = _bound_from(own, set())
        found |= {node.lineno for node in own if isinstance(node, ast.Call)
                  and _callee(node) in resolvers and _resolves(node, bound)}
    return [f"{path.name}:{line}" for line in sorted(found)]


def test_checkpoint_paths_are_resolved_in_one_place() -> None:
    # Profile.drafter_path, reference_path and target_path: every other reader asks them.
    roots = [PACKAGE, PACKAGE.parent / "fixtures", PACKAGE.parent / "suites"]
    found = [site for root in roots if root.is_dir() for path in sorted(root.rglob("*.py"))
             for site in _checkpoint_resolves(path)]
    assert [site.partition(":")[0] for site in found] == ["profile.py"] * 3, found


def test_the_check_finds_a_checkpoint_path_resolved_through_a_name(tmp_path: Path) -> None:
    source = tmp_path / "reader.py"
    source.write_text(
        "def direct(profile):\n"
        "    return profile.resolve(profile.drafter.reference)\n"  # line 2
        "\n"
        "def looped(profile):\n"
        "    for key, value in (('d', profile.drafter.path), ('i', profile.finetune.init)):\n"
        "        path = profile.resolve(value)\n"  # line 6
        "\n"
        "def wrapped(profile):\n"
        "    def from_profile(value):\n"
        "        return str(profile.resolve(value))\n"
        "    data = from_profile(profile.data.path)\n"
        "    return from_profile(profile.target.path), data\n"  # line 12
        "\n"
        "def asked(profile, value):\n"
        "    return profile.drafter_path, profile.resolve(value), profile.target.path\n",
        encoding="utf-8")
    assert _checkpoint_resolves(source) == ["reader.py:2", "reader.py:6", "reader.py:12"]


# Loaded with -p by the probe below: at the interpreter's exit, after the verdict and every
# session hook, it writes down which modules the run imported.
RECORDER = '''
import atexit, json, os, sys

def _record():
    with open(os.environ["RECORD_TO"], "w") as fh:
        json.dump(sorted(sys.modules), fh)

atexit.register(_record)
'''
HTTP_MODULES = ("specgate.serving.client", "specgate.serving.server", "requests", "urllib3",
                "http.client")


def test_an_offline_probe_loads_no_http_client(tmp_path: Path) -> None:
    import specgate_suites

    suites = Path(specgate_suites.__file__).resolve().parent
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "recorder.py").write_text(RECORDER)
    record = tmp_path / "modules.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECGATE_", "PYTEST_"))}
    env.update(RECORD_TO=str(record), PYTHONPATH=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "recorder",
         "-c", str(tmp_path / "pytest.ini"), f"--rootdir={tmp_path}", "-m", "probe and not live",
         "--specgate-profile=demo", f"--specgate-reports={tmp_path / 'reports'}", str(suites)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "specgate verdict" in proc.stdout, out
    loaded = set(json.loads(record.read_text()))
    assert "specgate.claims.perf" in loaded  # the live claims' modules were collected
    assert [m for m in HTTP_MODULES if m in loaded] == []


def test_every_package_of_the_library_ships_in_the_wheel() -> None:
    """pyproject.toml lists the packages the wheel holds; a package missing there imports in an
    editable checkout and fails in every installed one (tests/e2e/test_wheel.py finds it slowly)."""
    import tomllib

    root = Path(__file__).parents[2]
    listed = set(tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
                 ["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(root).parts)
             for p in (root / "specgate").rglob("__init__.py")}
    assert found - listed == set(), f"not in [tool.setuptools] packages: {sorted(found - listed)}"
