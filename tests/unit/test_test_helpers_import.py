"""The test suite's own imports resolve: every ``from <module> import names`` that names one of
the suite's helper or test modules (``tests/*.py``, ``tests/*/*.py``), at module level or inside a
function, names something that module defines at its top level.

A function-level import of a name a refactor removed is invisible until that one test runs, and a
cluster test runs only in the full suite; this check reads the files instead (``ast``), in
milliseconds, so such a break fails the unit run.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _modules() -> dict[str, Path]:
    """Module name -> file, for every importable module of the suite (conftest excluded)."""
    out: dict[str, Path] = {}
    for f in sorted(TESTS.glob("*.py")) + sorted(TESTS.glob("*/*.py")):
        if f.stem != "conftest" and f.stem != "__init__":
            assert f.stem not in out, f"two test modules named {f.stem}: {out[f.stem]} and {f}"
            out[f.stem] = f
    return out


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.If, ast.Try)):
            names.update(_top_level_names(ast.Module(body=list(ast.iter_child_nodes(node)), type_ignores=[])))
    return names


def test_every_import_of_a_test_module_names_what_it_defines() -> None:
    modules = _modules()
    trees = {name: ast.parse(f.read_text(), str(f)) for name, f in modules.items()}
    defined = {name: _top_level_names(t) for name, t in trees.items()}
    missing = []
    for f in sorted(TESTS.glob("*.py")) + sorted(TESTS.glob("*/*.py")):
        tree = trees.get(f.stem) or ast.parse(f.read_text(), str(f))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in modules:
                for alias in node.names:
                    if alias.name != "*" and alias.name not in defined[node.module]:
                        missing.append(f"{f.relative_to(TESTS)}:{node.lineno}: {node.module}.{alias.name}")
    assert missing == [], "imports of names their test module does not define:\n" + "\n".join(missing)


def test_the_check_sees_a_removed_name() -> None:
    """The check is not vacuous: the suite does import helpers from its own modules, and a name
    defined only inside a function is not a top-level name."""
    tree = ast.parse("import os\nX = 1\ndef f():\n    Y = 2\nclass C: pass\nif True:\n    Z = 3\n")
    assert _top_level_names(tree) == {"os", "X", "f", "C", "Z"}
    uses = [n for f in TESTS.glob("*/*.py") for n in ast.walk(ast.parse(f.read_text()))
            if isinstance(n, ast.ImportFrom) and n.module in _modules()]
    assert len(uses) > 20
