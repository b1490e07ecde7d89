"""The layer contract of docs/design.md, checked on every run by reading the imports.

ingest → index → query → lookback (the shell), with workers beside query and the
embedders beside the index (they import no other layer; index, query, workers and the
shell may use them). The base
(``lookback.settings``, ``lookback.errors``) imports nothing from the project and
may be imported by every layer. Only workers (and the shell through workers)
know Redis and dramatiq. No module imports another module's private names.

The walk reads the source with ``ast`` (nothing is imported), mapping folders to
module names with pyproject's package-dir table, so it sees every import,
including those inside functions.
"""

from __future__ import annotations

import ast
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASE = frozenset({"lookback.settings", "lookback.errors"})

#: Each layer and the layers it may import (besides itself and the base).
ALLOWED = {
    "base": frozenset(),
    "ingest": frozenset(),
    "embedders": frozenset(),
    "index": frozenset({"ingest", "embedders"}),
    "query": frozenset({"index", "ingest", "embedders"}),
    "workers": frozenset({"index", "ingest", "embedders"}),
    "shell": frozenset({"ingest", "embedders", "index", "query", "workers"}),
}
#: Third-party packages only some layers may import.
RESTRICTED = {"redis": frozenset({"workers"}), "dramatiq": frozenset({"workers"})}


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module (``from a import b``: ``a.b`` if it is a module)
    names: tuple[str, ...]  # names taken with ``from ... import``
    line: int

    def __str__(self) -> str:
        return f"{self.source} imports {self.target}"


def package_dirs() -> dict[str, Path]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    mapping = pyproject["tool"]["setuptools"]["package-dir"]
    return {package: ROOT / folder for package, folder in mapping.items()}


def modules() -> dict[str, Path]:
    """Every project module's dotted name and file."""
    found: dict[str, Path] = {}
    for package, folder in package_dirs().items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            name = ".".join([package, *parts])
            # lookback/ holds only the shell; the stage folders map to lookback.<stage>
            found.setdefault(name, path)
    return found


def layer(module: str) -> str | None:
    if module in BASE:
        return "base"
    parts = module.split(".")
    if parts[0] != "lookback":
        return None
    if len(parts) > 1 and parts[1] in ("ingest", "embedders", "index", "query", "workers"):
        return parts[1]
    return "shell"


def imports(module: str, path: Path, known: dict[str, Path]) -> list[Import]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [Import(module, alias.name, (), node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = tuple(alias.name for alias in node.names)
            submodules = [f"{base}.{name}" for name in names if f"{base}.{name}" in known]
            found.append(Import(module, base, names, node.lineno))
            found += [Import(module, sub, (), node.lineno) for sub in submodules]
    return found


def all_imports() -> list[Import]:
    known = modules()
    return [item for module, path in sorted(known.items())
            for item in imports(module, path, known)]


def test_the_walk_sees_every_stage():
    layers = {layer(module) for module in modules()}
    assert {"base", "ingest", "embedders", "index", "query", "workers", "shell"} <= layers
    assert len(all_imports()) > 300


def test_layers_import_only_downward():
    wrong = []
    for item in all_imports():
        source, target = layer(item.source), layer(item.target)
        if target is None or target in (source, "base"):
            continue
        if target not in ALLOWED[source]:
            wrong.append(f"{item} at line {item.line} ({source} may not import {target})")
    assert wrong == [], "\n".join(wrong)


def test_only_workers_know_redis_and_dramatiq():
    wrong = [f"{item}" for item in all_imports()
             if item.target.split(".")[0] in RESTRICTED
             and layer(item.source) not in RESTRICTED[item.target.split(".")[0]]]
    assert wrong == [], "\n".join(wrong)


def test_the_base_imports_nothing_of_the_project_but_itself():
    wrong = [f"{item}" for item in all_imports()
             if layer(item.source) == "base" and layer(item.target) not in (None, "base")]
    assert wrong == []


def test_no_module_uses_another_modules_private_names():
    """Neither ``from x import _name`` nor ``imported._name`` (a module or class imported
    from another project module)."""
    known = modules()
    wrong = []
    for item in all_imports():
        if item.target not in known or item.target == item.source:
            continue
        private = [name for name in item.names if _private(name)
                   and f"{item.target}.{name}" not in known]
        if private:
            wrong.append(f"{item} private {', '.join(private)}")
    for module, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = _names_from_other_modules(module, tree, known)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in imported and _private(node.attr):
                wrong.append(f"{module} uses {imported[node.value.id]}.{node.attr}")
    assert wrong == [], "\n".join(wrong)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _names_from_other_modules(module: str, tree: ast.Module,
                              known: dict[str, Path]) -> dict[str, str]:
    """Local name -> what it is, for names bound by importing another project module."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in known and node.module != module:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known and alias.name != module and alias.asname:
                    names[alias.asname] = alias.name
    return names


def subpackage_exports() -> dict[str, dict[str, str]]:
    """Each ``lookback.query`` subpackage's public names (its ``_EXPORTS``) -> module."""
    exports = {}
    for init in (ROOT / "query").glob("*/__init__.py"):
        tree = ast.parse(init.read_text(encoding="utf-8"))
        table = next(node.value for node in tree.body if isinstance(node, ast.Assign)
                     and any(getattr(t, "id", None) == "_EXPORTS" for t in node.targets))
        exports[f"lookback.query.{init.parent.name}"] = ast.literal_eval(table)
    return exports


def test_query_subpackages_show_a_type_checker_their_exports():
    """Each ``_EXPORTS`` name is also imported under ``TYPE_CHECKING`` from the module it
    names (as itself, so a type checker sees it re-exported), and nothing else is: the
    lazy face reads as the real types, not as ``Any``."""
    for init in (ROOT / "query").glob("*/__init__.py"):
        package = f"lookback.query.{init.parent.name}"
        tree = ast.parse(init.read_text(encoding="utf-8"))
        typed = {alias.name: node.module.removeprefix(f"{package}.")
                 for block in tree.body if isinstance(block, ast.If)
                 and getattr(block.test, "id", None) == "TYPE_CHECKING"
                 for node in block.body if isinstance(node, ast.ImportFrom) and node.module
                 for alias in node.names if alias.asname == alias.name}
        assert typed == subpackage_exports()[package], package


def test_query_subpackages_meet_only_at_their_public_api():
    """Code outside a query subpackage uses only the names its ``__init__`` exports."""
    exports = subpackage_exports()
    assert set(exports) == {"lookback.query.text", "lookback.query.search",
                            "lookback.query.privacy", "lookback.query.context",
                            "lookback.query.semantic", "lookback.query.contract"}
    wrong = []
    for item in all_imports():
        package = next((p for p in exports if item.target == p
                        or item.target.startswith(p + ".")), None)
        if package is None or item.source == package or item.source.startswith(package + "."):
            continue
        module = item.target.removeprefix(package).lstrip(".")
        for name in item.names:
            if name.startswith("_"):
                continue  # private names are the test above's business
            if exports[package].get(name) != (module or exports[package].get(name)):
                wrong.append(f"{item}.{name}: not in {package}'s public API (add it to "
                             f"_EXPORTS in its __init__.py if it is meant for other packages)")
    assert wrong == [], "\n".join(wrong)


def test_every_exported_name_exists():
    import importlib

    for package, names in subpackage_exports().items():
        module = importlib.import_module(package)
        for name, defined_in in names.items():
            assert getattr(module, name) is getattr(
                importlib.import_module(f"{package}.{defined_in}"), name)


def test_the_import_graph_has_no_cycle():
    """No module reaches itself through imports (those inside functions count too, and
    a subpackage's lazy ``_EXPORTS`` import their modules), so every module can be read,
    tested and loaded after what it uses."""
    known = modules()
    graph: dict[str, set[str]] = {module: set() for module in known}
    for item in all_imports():
        if item.target in known and item.target != item.source:
            graph[item.source].add(item.target)
    for package, names in subpackage_exports().items():
        graph[package] |= {f"{package}.{module}" for module in names.values()}
    assert _cycles(graph) == []


def test_query_subpackages_import_one_way():
    """The query subpackages form no circle either: ``contract`` imports none of them,
    ``semantic`` builds on ``search`` (the shell hands the semantic step to the
    retriever), so each one can be read after what it uses."""
    packages = set(subpackage_exports())

    def package_of(module: str) -> str | None:
        return next((p for p in packages if module == p or module.startswith(p + ".")), None)

    graph: dict[str, set[str]] = {package: set() for package in packages}
    for item in all_imports():
        source, target = package_of(item.source), package_of(item.target)
        if source and target and source != target:
            graph[source].add(target)
    assert _cycles(graph) == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm,
    iterative), each sorted."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in order:
            continue
        work = [(root, iter(sorted(graph[root])))]
        order[root] = low[root] = len(order)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in order:
                    order[target] = low[target] = len(order)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                elif target in on_stack:
                    low[node] = min(low[node], order[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == order[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert _cycles(graph) == [["a", "b", "c"]]
