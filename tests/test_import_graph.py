"""No import cycles between the package's modules (imports inside functions count).

Package ``__init__`` modules are left out: they only re-export names (or import lazily on
attribute access), so an edge through them is not a dependency of one module on another.
"""
import ast
from pathlib import Path
from typing import Dict, Set

PACKAGE = Path(__file__).resolve().parent.parent / "spacy_elmo"
ENTRY_SHIMS = {"spacy_elmo.__main__", "spacy_elmo.spacy_command"}  # the ways in, which may import the CLI


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(packages: bool = False, inits: bool = False) -> Dict[str, Set[str]]:
    """Module -> the modules it imports; with ``packages``, imports of a package's ``__init__`` count
    too, and with ``inits`` the ``__init__`` modules' own imports."""
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: Dict[str, Set[str]] = {}
    for name, path in files.items():
        if path.name == "__init__.py" and not inits:
            continue
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        edges = graph.setdefault(name, set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                candidates = [[alias.name] for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                stem = ".".join(base + ([node.module] if node.module else []))
                candidates = [[f"{stem}.{alias.name}", stem] for alias in node.names]
            else:
                continue
            for options in candidates:  # "from .x import y": the module x.y if there is one, else x
                target = next((o for o in options if o in files), None)
                if target and target != name and (packages or files[target].name != "__init__.py"):
                    edges.add(target)
    return graph


def reachable(graph: Dict[str, Set[str]], start: str) -> Set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_the_graph_sees_function_level_imports():
    graph = import_graph()
    assert "spacy_elmo.bilm.scalar_mix" in graph["spacy_elmo.layers.scalar_mix"]
    assert "spacy_elmo.embedding.hdf5" in graph["spacy_elmo.embedding.run"]  # imported inside a function


def test_no_import_cycles():
    graph = import_graph()
    reach = {name: reachable(graph, name) for name in graph}
    cycles = {frozenset(m for m in graph if m in reach[name] and name in reach[m]) for name in graph if name in reach[name]}
    assert not cycles, f"import cycles: {[sorted(c) for c in cycles]}"


def test_nothing_below_the_cli_imports_it():
    graph = import_graph(packages=True)
    assert "spacy_elmo.cli._util" in graph["spacy_elmo.cli.senses"]  # the CLI is in the graph at all
    below = {
        name: sorted(t for t in targets if t == "spacy_elmo.cli" or t.startswith("spacy_elmo.cli."))
        for name, targets in graph.items()
        if not name.startswith("spacy_elmo.cli.") and name not in ENTRY_SHIMS
    }
    assert not {name: found for name, found in below.items() if found}, "modules below the CLI import it"


SENSE_TOOLS = ("senses", "search", "induction", "evaluation", "explore")
BELOW = {  # a layer of the package, and the layers above it that it must not reach (directly or not)
    "spacy_elmo.kernels.": ("bilm", "hub", "training", "layers", "pipeline", *SENSE_TOOLS, "change", "embedding", "cli"),
    "spacy_elmo.bilm.": ("hub", "training", "layers", "pipeline", *SENSE_TOOLS, "change", "embedding", "cli"),
    "spacy_elmo.hub.": ("training", "layers", "pipeline", *SENSE_TOOLS, "change", "embedding", "cli"),
    "spacy_elmo.training.": ("layers", "pipeline", *SENSE_TOOLS, "change", "embedding", "cli"),
    "spacy_elmo.pipeline.": (*SENSE_TOOLS, "change", "embedding", "cli"),
    "spacy_elmo.layers.": ("pipeline", *SENSE_TOOLS, "change", "embedding", "cli"),
    # the inventory side is the base of the sense tools; search, induction and explore stand beside
    # each other on it, evaluation above induction; semantic change is built on them, never the other way
    "spacy_elmo.senses.": ("search", "induction", "evaluation", "explore", "change", "embedding", "cli"),
    "spacy_elmo.search.": ("induction", "evaluation", "explore", "change", "embedding", "cli"),
    "spacy_elmo.induction.": ("search", "evaluation", "explore", "change", "embedding", "cli"),
    "spacy_elmo.evaluation.": ("search", "explore", "change", "embedding", "cli"),
    "spacy_elmo.explore.": ("search", "evaluation", "change", "embedding", "cli"),
    "spacy_elmo.change.": ("search", "embedding", "cli"),
    "spacy_elmo.lang.": ("kernels", "bilm", "hub", "training", "layers", "pipeline", *SENSE_TOOLS, "change", "embedding", "cli"),  # spaCy only
}


def test_layers_point_down():
    graph = import_graph(packages=True)
    wrong = {}
    for name in graph:
        for prefix, above in BELOW.items():
            if name.startswith(prefix):
                bad = sorted(t for t in reachable(graph, name) if t.split(".")[1] in above)
                if bad:
                    wrong[name] = bad
    assert not wrong, f"modules that import a layer above their own: {wrong}"


def test_layers_never_import_the_pipeline():
    graph = import_graph(packages=True)
    assert "spacy_elmo.layers.bilm_model" in graph["spacy_elmo.layers.tok2vec"]  # the layers are in the graph at all
    wrong = {name: sorted(t for t in targets if t == "spacy_elmo.pipeline" or t.startswith("spacy_elmo.pipeline."))
             for name, targets in graph.items() if name.startswith("spacy_elmo.layers.")}
    assert not {name: found for name, found in wrong.items() if found}, "layers modules that import the pipeline"


def unit(module: str) -> str:
    """The package a module belongs to (``spacy_elmo.layers.listener`` -> ``layers``); a top-level
    module (``spacy_elmo.files``) is a unit of its own."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def package_graph() -> Dict[str, Set[str]]:
    """Package -> the packages its modules import (``__init__`` modules included, lazy imports too)."""
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: Dict[str, Set[str]] = {}
    for module, targets in import_graph(packages=True, inits=True).items():
        if files[module].name == "__init__.py" and module == "spacy_elmo":
            continue  # the package root only re-exports
        graph.setdefault(unit(module), set()).update(unit(t) for t in targets if t != "spacy_elmo" and unit(t) != unit(module))
    return graph


def test_no_package_level_pairs():
    graph = package_graph()
    assert "bilm" in graph["layers"] and "layers" in graph["pipeline"]  # the graph sees packages at all
    reach = {name: reachable(graph, name) for name in graph}
    cycles = {frozenset(m for m in graph if m in reach[name] and name in reach[m]) for name in graph if name in reach[name]}
    assert not cycles, f"packages that import each other (directly or not): {[sorted(c) for c in cycles]}"
