"""The census issue 42 closes with: how much of what the runtime and the planner use is declared.

Run from the repository root: ``python experiments/contract_census.py``; ``tests/test_contract_census.py``
holds each number to its bound. Everything is read from the source (``ast``), nothing imported:

- names the runtime (``fedray/runtime``) and the planner (``fedray/plan.py``) read on a protocol,
  a recipe, a planned protocol or a driver-side program, against the members fedray/core's typed
  Protocols declare for them (read from the class bodies in ``fedray/core``, bases included);
- ``getattr``/``hasattr`` with a literal attribute name in the runtime and the planner (an
  optional capability read past the types);
- comparisons with a client operation's name (``client_step``, ``client_block``,
  ``client_rounds``) in the runtime;
- file-level import cycles among the modules of ``fedray``, ``hydra_plugins`` and ``experiments``
  (function-level imports count), as strongly connected components of the import graph;
- imports of ``hydra._internal``;
- the length of the driver loop (``fedray/runtime/driver.py``'s ``_rounds``);
- lines of planning per protocol package (modules named ``*planning*``), against the package's;
- the example protocol's lines (``examples/dp_fedavg/protocol.py``) and its configs.
"""

from __future__ import annotations

import ast
import functools
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OPERATIONS = {"client_step", "client_block", "client_rounds"}
# The variable (or attribute) names through which the runtime and the planner hold each kind of
# object, and the core Protocols that declare what may be read on it.
HOLDERS = {
    "protocol": ("RoundProtocol", "RoundBlocks", "StepBlocks"),    # narrowed with isinstance where a block kind is run
    "_protocol": ("RoundProtocol",),
    "steps": ("StepBlocks",),
    "blocks": ("RoundBlocks",),
    "program": ("CentralProgram",),
    "recipe": ("ProtocolRecipe",),
    "planned": ("PlannedProtocol",),
    "plan.protocol": ("PlannedProtocol",),
}


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def _imports(path: Path) -> list[ast.Import | ast.ImportFrom]:
    """The import statements of ``path`` at any depth of its code: one walk of its tree per
    version of the file (``import_graph`` and ``hydra_internal_imports`` both read them)."""
    info = path.stat()
    return _imports_of(path, info.st_mtime_ns, info.st_size)


@functools.lru_cache(maxsize=None)
def _imports_of(path: Path, mtime_ns: int, size: int) -> list[ast.Import | ast.ImportFrom]:
    return [node for node in ast.walk(_parse(path)) if isinstance(node, (ast.Import, ast.ImportFrom))]


def declared_members() -> dict[str, set[str]]:
    """Protocol class name -> the members its body (and its core bases') declare."""
    bodies: dict[str, tuple[list[str], set[str]]] = {}
    for path in sorted((ROOT / "fedray" / "core").glob("*.py")):
        for node in _parse(path).body:
            if isinstance(node, ast.ClassDef):
                names = {n.target.id for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
                names |= {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
                bases = [b.id for b in node.bases if isinstance(b, ast.Name)]
                bodies[node.name] = (bases, {n for n in names if not n.startswith("__")})

    def members(name: str) -> set[str]:
        bases, names = bodies.get(name, ([], set()))
        return names.union(*(members(b) for b in bases if b in bodies))

    return {name: members(name) for name in bodies}


def _holder(node: ast.expr, path: Path) -> str | None:
    """The holder name of ``node`` (``protocol``, ``self.protocol``, ``self._protocol()``,
    ``plan.protocol``; in ``plan.py`` the ``Plan``'s own ``self.protocol`` is the planned protocol;
    ``steps`` and ``blocks`` are the strategies' narrowed protocols, elsewhere other things)."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute) and node.attr == "protocol" and isinstance(node.value, ast.Name) \
            and (node.value.id == "plan" or (node.value.id == "self" and path.name == "plan.py")):
        return "plan.protocol"
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
    if name in ("steps", "blocks") and path.name != "strategies.py":
        return None
    return name


def _runtime_and_planner() -> list[Path]:
    return sorted((ROOT / "fedray" / "runtime").glob("*.py")) + [ROOT / "fedray" / "plan.py"]


def used_names() -> dict[str, set[str]]:
    """Holder -> the attribute names the runtime and the planner read on it (the core helper
    ``client_operation``, which the runtime calls, reads ``operations``)."""
    used: dict[str, set[str]] = {holder: set() for holder in HOLDERS}
    for path in _runtime_and_planner():
        for node in ast.walk(_parse(path)):
            holder = _holder(node.value, path) if isinstance(node, ast.Attribute) else None
            if holder in HOLDERS:
                used[holder].add(node.attr)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "client_operation":
                used["protocol"].add("operations")
    return used


def contract() -> dict[str, object]:
    """Per kind of object (round protocol, program, recipe, planned protocol): the distinct names
    the runtime and the planner read on it and the names core's Protocols declare for it (the
    issue counted 23 read against 13 declared on round protocols); and every name read that no
    Protocol of its holder declares."""
    declared, used = declared_members(), used_names()
    undeclared = sorted(f"{holder}.{name}" for holder, names in used.items() for name in names
                        if name not in set().union(*(declared[p] for p in HOLDERS[holder])))
    kinds = {"round protocol": ("protocol", "_protocol", "steps", "blocks"), "program": ("program",),
             "recipe": ("recipe",), "planned protocol": ("planned", "plan.protocol")}
    counts = {kind: (len(set().union(*(used[h] for h in holders))),
                     len(set().union(*(declared[p] for h in holders for p in HOLDERS[h]))))
              for kind, holders in kinds.items()}
    return {"kinds": counts, "used": sum(u for u, _ in counts.values()),
            "declared": sum(d for _, d in counts.values()), "undeclared": undeclared}


def literal_capability_reads() -> list[str]:
    """``getattr(x, "name", ...)`` / ``hasattr(x, "name")`` in the runtime and the planner, but
    for dunder names (a module's ``__path__``): file:line and the name."""
    found = []
    for path in _runtime_and_planner():
        for node in ast.walk(_parse(path)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") \
                    and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) \
                    and isinstance(node.args[1].value, str) and not node.args[1].value.startswith("__"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.func.id} {node.args[1].value}")
    return found


def operation_branches() -> list[str]:
    """Comparisons in the runtime with an operation's name, as a string or its core constant."""
    names = OPERATIONS | {name.upper() for name in OPERATIONS}
    found = []
    for path in sorted((ROOT / "fedray" / "runtime").glob("*.py")):
        for node in ast.walk(_parse(path)):
            if isinstance(node, (ast.Compare, ast.MatchValue)):
                for leaf in ast.walk(node):
                    text = leaf.value if isinstance(leaf, ast.Constant) else \
                        leaf.id if isinstance(leaf, ast.Name) else leaf.attr if isinstance(leaf, ast.Attribute) else None
                    if text in names:
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
                        break
    return found


def _modules() -> dict[str, Path]:
    found = {}
    for top in ("fedray", "hydra_plugins", "experiments"):
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of the three trees it imports (at any depth of its code)."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _imports(path):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + ([base] if base else []))
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def import_cycles() -> list[list[str]]:
    """The import graph's strongly connected components of more than one module (Tarjan)."""
    graph, index, low, stack, on_stack, components = import_graph(), {}, {}, [], set(), []
    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(components)


def hydra_internal_imports() -> list[str]:
    found = []
    for name, path in _modules().items():
        for node in _imports(path):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{name}:{node.lineno}" for m in modules if m == "hydra._internal" or m.startswith("hydra._internal.")]
    return found


def driver_loop_lines() -> int:
    """Lines of ``_rounds`` in ``fedray/runtime/driver.py``, its signature and docstring included."""
    for node in _parse(ROOT / "fedray" / "runtime" / "driver.py").body:
        if isinstance(node, ast.FunctionDef) and node.name == "_rounds":
            return int(node.end_lineno) - node.lineno + 1
    raise LookupError("fedray/runtime/driver.py defines no _rounds")


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def planning_lines() -> dict[str, tuple[int, int]]:
    """Protocol package -> (lines of its ``*planning*`` modules, lines of the whole package)."""
    found = {}
    for package in sorted(p for p in (ROOT / "fedray" / "protocols").iterdir() if (p / "__init__.py").exists()):
        files = sorted(package.glob("*.py"))
        found[package.name] = (sum(_lines(f) for f in files if "planning" in f.stem), sum(_lines(f) for f in files))
    return found


def example_lines() -> tuple[int, int]:
    """(lines of the example protocol's module, its config files)."""
    example = ROOT / "examples" / "dp_fedavg"
    return _lines(example / "protocol.py"), len(list((example / "conf").rglob("*.yaml")))


def main() -> None:
    census = contract()
    for kind, (used, declared) in census["kinds"].items():
        print(f"names the runtime and planner read on a {kind}: {used}; declared by core's Protocols: {declared}")
    print(f"in all: {census['used']} read, {census['declared']} declared; read but undeclared: "
          f"{len(census['undeclared'])} {census['undeclared']}")
    reads = literal_capability_reads()
    print(f"getattr/hasattr with a literal name in fedray/runtime and fedray/plan.py: {len(reads)} {reads}")
    branches = operation_branches()
    print(f"operation-name comparisons in fedray/runtime: {len(branches)} {branches}")
    cycles = import_cycles()
    print(f"file-level import cycles (fedray, hydra_plugins, experiments): {len(cycles)} {cycles}")
    hydra = hydra_internal_imports()
    print(f"hydra._internal imports: {len(hydra)} {hydra}")
    print(f"driver loop (_rounds) lines: {driver_loop_lines()}")
    for package, (planning, total) in planning_lines().items():
        print(f"planning lines in protocols/{package}: {planning} of {total} ({planning / total:.0%})")
    lines, configs = example_lines()
    print(f"example protocol: {lines} lines, {configs} config file(s)")


if __name__ == "__main__":
    main()
