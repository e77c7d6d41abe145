"""The house rules (issue 14), checked on the source: arrows point down, no import circles
(not even dodged by importing inside a function or for annotations only), typed handlers, one
routing table that is also the advertised one, one place that builds engines."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import oncelog

SRC = Path(oncelog.__file__).parent
PURE = ("protocol", "storage", "coordinator", "acl")
#: issue 27: the awaitable edge of the storage engines that complete appends elsewhere (the
#: PostgreSQL engine's COMMIT on its committer's thread, the diskless engine's object commit, issue
#: 29): the one module of the store-backed engines that meets the event loop. The contract, the
#: shared rules and the engines' cores stay asyncio-free.
ENGINE_ASYNC_EDGES = {"oncelog.storage.store_pending"}


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports: at top level, inside functions (an import inside a function
    is an import all the same) and under ``if TYPE_CHECKING:`` (a type-only import is an arrow
    all the same: a circle through one is a circle, issue 36)."""
    tree = ast.parse(path.read_text())
    package = _module_name(path).rsplit(".", 0 if path.name == "__init__.py" else 1)[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            # "from pkg import module" depends on the module; "from module import name" on the module
            subs = {f"{mod}.{a.name}" for a in node.names} & _ALL
            out.update(subs if len(subs) == len(node.names) else subs | {mod})
    return out


_ALL = {_module_name(p) for p in SRC.rglob("*.py")}
MODULES = {_module_name(p): p for p in SRC.rglob("*.py")}
GRAPH = {name: {m for m in _imports(path) if m in MODULES and m != name} for name, path in MODULES.items()}


@pytest.mark.parametrize("layer", PURE)
def test_the_pure_layers_import_neither_asyncio_nor_the_broker(layer: str) -> None:
    bad = {
        name: sorted(m for m in _imports(MODULES[name])
                     if ((m == "asyncio" or m.startswith("asyncio.")) and name not in ENGINE_ASYNC_EDGES)
                     or m.startswith("oncelog.broker") or m.startswith("oncelog.spark") or m == "oncelog.cli"
                     # issue 29: the object-store services (asyncio) are above the diskless engine
                     or m.startswith("oncelog.diskless"))
        for name in MODULES if name.startswith(f"oncelog.{layer}")
    }
    assert not {k: v for k, v in bad.items() if v}


def test_the_engine_contract_depends_on_no_engine() -> None:
    """storage/engine.py (issue 27) imports no engine: the contract, the read parts and the
    configuration are neutral; each engine imports them, never another engine."""
    assert not {m for m in GRAPH["oncelog.storage.engine"] if m.startswith("oncelog.storage.engines")}
    for engine in ("local", "postgres", "diskless"):
        prefix = f"oncelog.storage.engines.{engine}"
        crossing = {name: sorted(m for m in deps if m.startswith("oncelog.storage.engines.")
                                 and not m.startswith(prefix))
                    for name, deps in GRAPH.items() if name.startswith(prefix)}
        assert not {k: v for k, v in crossing.items() if v}


def test_nothing_above_storage_asks_which_engine_it_has() -> None:
    """Issue 27: no ``isinstance`` on an engine class and no ``hasattr`` on a log outside
    storage/ (the partition, the produce handler and compaction use the engine contract)."""
    engines = ("PartitionLog", "PgPartitionLog", "DisklessPartitionLog")
    bad = []
    for name, path in MODULES.items():
        if name.startswith("oncelog.storage"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("isinstance", "hasattr"):
                text = ast.unparse(node)
                if any(e in text for e in engines) or (node.func.id == "hasattr" and ".log" in text):
                    bad.append(f"{name}: {text}")
    assert not bad


def test_engines_are_built_in_one_place() -> None:
    """``storage.engines.open_engine(spec)`` is the one place an engine is built: no other module
    of the product calls an engine's constructor (or the local engine's ``PartitionLog.open``)."""
    engines = {"PartitionLog", "PgPartitionLog", "DisklessPartitionLog"}
    bad = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            called = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in engines:
                called = f.value.id  # PartitionLog.open(...)
            if called in engines and name != "oncelog.storage.engines":
                bad.append(f"{name}:{node.lineno}: {ast.unparse(node)[:80]}")
    assert not bad


def test_the_produce_handler_leaves_the_producer_state_to_the_partition() -> None:
    """Producer-state checks happen in one place, the partition (``Partition.append_produced``:
    the retry of a written batch, then the handler's transaction checks, then the append): the
    Produce handler neither reads the producer state nor knows how the partition says an append
    completed at once."""
    tree = ast.parse(MODULES["oncelog.broker.handlers.produce"].read_text())
    names = ({n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
             | {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
             | {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names})
    assert not names & {"producers", "duplicate_of", "Ready", "append_validated"}


#: issue 36: a service that is None in one mode, branched on (the mode decided again and again)
_MODE_BRANCH = re.compile(r"\b(store|inbox|remote) is (not )?None|bool\(self\.store\)|def start_cluster")
#: what differs between the modes, handed to constructors by the membership: never set afterwards
_HANDED_IN = {"remote", "inbox", "persister", "members", "store", "on_lead", "on_resign", "pipeline_produce",
              "_coordinator"}


def test_the_mode_is_decided_once_and_handed_in() -> None:
    """The mode is decided once, at start (issue 36, as Kafka's share-state ``Persister``): the
    membership builds what differs (the share persister, the offset inbox, the transaction
    coordinator's remote side, the share members, the leader tracker's parts) and hands it to
    constructors. Nothing in broker/ branches on one of them being None, and none is set on an
    object after it was built."""
    branches, set_later = [], []
    for name, path in MODULES.items():
        if not name.startswith("oncelog.broker"):
            continue
        text = path.read_text()
        branches += [f"{name}:{i}: {line.strip()}" for i, line in enumerate(text.splitlines(), 1)
                     if _MODE_BRANCH.search(line)]
        for node in ast.walk(ast.parse(text)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
            for t in targets:
                for a in ast.walk(t):
                    if (isinstance(a, ast.Attribute) and a.attr in _HANDED_IN
                            and not (isinstance(a.value, ast.Name) and a.value.id in ("self", "cls"))):
                        set_later.append(f"{name}:{node.lineno}: {ast.unparse(node)[:80]}")
    assert not branches
    assert not set_later


def test_the_product_never_imports_the_tools() -> None:
    """``oncelog`` does not import ``oncelog_tools`` (issue 27): the tools are built on the product,
    never the other way round; what the product's testing API needs (a PostgreSQL server for
    ``oncelog.testing.Cluster``) lives in the product. The one documented exception is the
    command line offering ``oncelog verify`` (oncelog_tools/__init__.py)."""
    allowed = {"oncelog.cli": {"oncelog_tools.verify.cli"}}
    bad = {
        name: sorted(found)
        for name, path in MODULES.items()
        if (found := {m for m in _imports(path) if m == "oncelog_tools" or m.startswith("oncelog_tools.")}
            - allowed.get(name, set()))
    }
    assert not bad


def test_the_configuration_imports_no_other_part_of_the_broker() -> None:
    """broker/configuration/config.py is below the rest of broker/ (issue 27: it reached metrics.py for its
    HOST:PORT parser, and metrics reaches the broker): addresses are parsed by oncelog.hostport."""
    assert not {m for m in GRAPH["oncelog.broker.configuration.config"] if m.startswith("oncelog.broker")}
    assert "oncelog.hostport" in GRAPH["oncelog.broker.configuration.config"]


def test_the_cluster_storage_imports_only_protocol_storage_and_itself() -> None:
    """cluster/ (issue 15) is a storage layer too: synchronous, no asyncio, no broker."""
    allowed = ("oncelog.cluster", "oncelog.protocol", "oncelog.storage", "oncelog.types", "oncelog.clock",
               "oncelog.acl")  # issue 18: the pure ACL model (cluster/acls.py stores its bindings)
    bad = {
        name: sorted(m for m in _imports(MODULES[name]) if m == "asyncio" or m.startswith("asyncio.")
                     or (m.startswith("oncelog") and not m.startswith(allowed)))
        for name in MODULES if name.startswith("oncelog.cluster")
    }
    assert bad and not {k: v for k, v in bad.items() if v}


def test_the_leader_assignment_is_a_pure_core() -> None:
    """cluster/assignment.py (issue 15) decides leaders from plain values: no database, no
    clock, no threads, no I/O; only the shared types."""
    imported = _imports(MODULES["oncelog.cluster.assignment"])
    assert imported <= {"__future__", "dataclasses", "typing", "oncelog.types"}, imported


def _circle(arrows: dict[str, set[str]]) -> list[str] | None:
    """A circle of ``arrows`` (node -> the nodes it points to), as the path around it; None."""
    state: dict[str, int] = {}  # 0 visiting, 1 done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 0
        stack.append(node)
        for nxt in sorted(arrows.get(node, ())):
            if state.get(nxt) == 0:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        stack.pop()
        state[node] = 1
        return None

    for name in sorted(arrows):
        if name not in state and (found := visit(name)) is not None:
            return found
    return None


def test_no_import_circle_even_through_imports_inside_functions() -> None:
    """A circle dodged by importing inside a function, or under ``TYPE_CHECKING``, is still a
    circle (issue 36: four went through type-only imports)."""
    circle = _circle(GRAPH)
    assert circle is None, "import circle: " + " -> ".join(circle or ())


#: the arrows back up between oncelog's top-level folders: the broker builds its console, which
#: reads only the broker's observability (``console -> broker.observability``), and its schema
#: registry, which uses the broker's TLS and SCRAM code and reads the broker through a Protocol
FOLDER_ARROWS_ALLOWED_BACK = {("oncelog.broker.broker", "oncelog.console"),
                              ("oncelog.broker.broker", "oncelog.schema_registry"),
                              ("oncelog.broker.broker", "oncelog.schema_registry.validation")}


def test_no_circle_between_the_top_level_folders() -> None:
    """Issue 36: no loop between oncelog's folders either (storage -> cluster -> acl -> storage
    went through the atomic-file helper, now at the package root), apart from the broker
    starting its console."""

    def folder(module: str) -> str:
        return ".".join(module.split(".")[:2])

    arrows: dict[str, set[str]] = {}
    for name, deps in GRAPH.items():
        for dep in deps:
            if folder(name) != folder(dep) and (name, dep) not in FOLDER_ARROWS_ALLOWED_BACK:
                arrows.setdefault(folder(name), set()).add(folder(dep))
    circle = _circle(arrows)
    assert circle is None, "folder circle: " + " -> ".join(circle or ())


def test_handlers_are_typed_against_the_broker_context() -> None:
    untyped = []
    for path in (SRC / "broker" / "handlers").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for arg in node.args.args:
                    if arg.arg == "broker" and ast.unparse(arg.annotation or ast.Constant(None)) != "BrokerContext":
                        untyped.append(f"{path.name}:{node.name}")
    assert not untyped


def test_the_routing_table_is_what_apiversions_advertises() -> None:
    from oncelog.broker.routes import ROUTES, advertised_versions
    from oncelog.protocol import apis

    assert set(ROUTES) == set(apis.SUPPORTED_VERSIONS)
    assert set(advertised_versions()) == set(apis.SUPPORTED_VERSIONS)
    assert advertised_versions() == apis.advertised(apis.SUPPORTED_VERSIONS)
    handler_modules = {p.stem for p in (SRC / "broker" / "handlers").glob("*.py") if not p.stem.startswith("_")}
    assert len(handler_modules) == len(ROUTES)


def test_each_lazy_route_is_its_modules_handler() -> None:
    """``routes.ROUTES`` names each handler module instead of importing it (issue 19: start-up);
    the module it names must serve that API key, and calling the route must call its handle."""
    import importlib

    from oncelog.broker.routes import HANDLER_MODULES, ROUTES, LazyHandler

    handler_modules = {p.stem for p in (SRC / "broker" / "handlers").glob("*.py") if not p.stem.startswith("_")}
    assert set(HANDLER_MODULES) == handler_modules
    for key, route in ROUTES.items():
        assert isinstance(route, LazyHandler)
        module = importlib.import_module(f"oncelog.broker.handlers.{route.module}")
        assert module.API_KEY == key, route.module
        assert route.load() is module.handle


BROKER = SRC / "broker"
#: broker/'s parts (issue 27) and the parts each may import; the root modules (broker.py, context.py,
#: routes.py, periodic.py, pipelining.py) are "root". Each part's __init__.py says the same in words.
BROKER_PARTS: dict[str, set[str]] = {
    "configuration": {"root"},
    "auth": {"configuration"},
    "partitions": {"configuration"},
    "coordinators": {"root", "partitions", "configuration"},
    "handlers": {"root", "configuration", "partitions", "coordinators", "auth", "membership", "observability"},
    "network": {"root", "configuration", "auth", "handlers"},
    "membership": {"root", "configuration", "auth", "partitions", "coordinators", "database"},
    #: the database bridge (outbox drain, inbox): it appends to partitions and is the group
    #: coordinator's inbox; membership builds it in cluster mode
    "database": {"configuration", "partitions", "coordinators"},
    "observability": {"root", "configuration", "partitions", "coordinators", "membership"},
}


def _broker_part(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] != ["oncelog", "broker"] or len(parts) < 3:
        return None
    return parts[2] if (BROKER / parts[2]).is_dir() else "root"


def test_broker_is_a_few_files_and_named_parts() -> None:
    """No more than 8 Python files directly in broker/ (issue 27); every other module is in a part
    whose __init__.py states what it owns and what it may import."""
    direct = sorted(p.name for p in BROKER.glob("*.py"))
    assert len(direct) <= 8, direct
    parts = {p.name for p in BROKER.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert parts == set(BROKER_PARTS)
    for part in parts:
        doc = ast.get_docstring(ast.parse((BROKER / part / "__init__.py").read_text())) or ""
        assert "May import" in doc, f"broker/{part}/__init__.py must say what it owns and may import"


def test_broker_parts_import_only_what_they_declare() -> None:
    """Arrows between broker/'s parts follow BROKER_PARTS (imports inside functions and under
    TYPE_CHECKING count too), so no circle can form between the parts."""
    bad = sorted(
        f"{name} -> {dep}"
        for name, deps in GRAPH.items()
        if (src := _broker_part(name)) not in (None, "root")
        for dep in deps
        if (dst := _broker_part(dep)) not in (None, src) and dst not in BROKER_PARTS[src]
    )
    assert not bad
