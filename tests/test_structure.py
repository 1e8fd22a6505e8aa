"""The code's shape: imports flow one way (no cycle, lazy imports included) and down the layer folders, functions
stay short, modules have at most 500 lines and learner factories take their options as records."""
import ast
import importlib
import inspect
import pathlib
import pkgutil
import types
import typing

ROOT = pathlib.Path(__file__).resolve().parents[1] / "onlinejax"


def _modules() -> dict:
    mods = {}
    for p in ROOT.rglob("*.py"):
        parts = list(p.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = p
    return mods


def _imports(name: str, path: pathlib.Path, mods: dict) -> set:
    """Every ``onlinejax`` module ``name`` imports, anywhere in the file (function-level imports too)."""
    is_pkg = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in mods}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for a in node.names:
                sub = f"{target}.{a.name}"
                out.add(sub if sub in mods else target)
    return {m for m in out if m in mods and m != name}


def test_the_import_graph_has_no_cycle():
    mods = _modules()
    graph = {m: _imports(m, p, mods) for m, p in mods.items()}
    done, stack = set(), []

    def visit(m):
        if m in stack:
            raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(m):] + [m]))
        if m in done:
            return
        stack.append(m)
        for dep in sorted(graph[m]):
            visit(dep)
        stack.pop()
        done.add(m)

    for m in sorted(graph):
        visit(m)


LAYERS = ("core", "data", "learners", "wrappers", "evaluation", "runner")  # ARCHITECTURE.md, bottom up; the rest is top
LATE_VERSION_READS = {("onlinejax.core.checkpoint", "onlinejax")}  # reads onlinejax.__version__ inside a function


def _layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else len(LAYERS)


def test_imports_follow_the_layer_folders():
    """A module imports only from its own layer's folder and the folders below it (``core/`` < ``data/`` <
    ``learners/`` < ``wrappers/`` < ``evaluation/`` < ``runner/`` < the top: the package, ``zoo``, ``plots``,
    ``adapters/``, ``__main__``), function-level imports included."""
    mods = _modules()
    assert {m.split(".")[1] for m in mods if m.count(".") >= 1} >= set(LAYERS)
    upward = [f"{m} -> {d}" for m, p in sorted(mods.items()) for d in sorted(_imports(m, p, mods))
              if _layer(d) > _layer(m) and (m, d) not in LATE_VERSION_READS]
    assert not upward, upward


def _code_lines(fn: ast.FunctionDef, lines: list) -> int:
    doc = fn.body[0] if fn.body and isinstance(fn.body[0], ast.Expr) and isinstance(
        getattr(fn.body[0], "value", None), ast.Constant) and isinstance(fn.body[0].value.value, str) else None
    skip = range(doc.lineno, doc.end_lineno + 1) if doc else range(0)
    return sum(1 for i in range(fn.lineno, fn.end_lineno + 1)
               if i not in skip and lines[i - 1].strip() and not lines[i - 1].strip().startswith("#"))


def test_no_function_has_more_than_50_code_lines():
    long = []
    for p in ROOT.rglob("*.py"):
        lines = p.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _code_lines(node, lines) > 50:
                long.append(f"{p.relative_to(ROOT.parent)}:{node.lineno} {node.name} ({_code_lines(node, lines)})")
    assert not long, long


MAX_MODULE_LINES = 500


def test_no_module_has_more_than_500_lines():
    long = [f"{p.relative_to(ROOT.parent)} ({n} lines)" for p in sorted(ROOT.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES]
    assert not long, f"modules over {MAX_MODULE_LINES} lines: " + ", ".join(long)


MAX_PLAIN_ARGUMENTS = 6


def _is_record(annotation, wrapped: tuple) -> bool:
    """Whether ``annotation`` (``Optional`` or a union with ``None`` allowed) names only ``NamedTuple`` records,
    the learners a factory wraps (``wrapped``) excepted: those are its subject, not its options."""
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    kinds = [a for a in (typing.get_args(annotation) if union else (annotation,)) if a is not type(None)]
    return bool(kinds) and all(isinstance(k, type) and issubclass(k, tuple) and hasattr(k, "_fields")
                               and not issubclass(k, wrapped) for k in kinds)


def _public_factories() -> dict:
    """``{"module.name": signature}`` of every public function of ``onlinejax`` (in its module's ``__all__``,
    or not starting with ``_`` where there is none) that returns a ``Learner`` or a ``GridLearner``."""
    import onlinejax
    from onlinejax.core.learner import Learner
    from onlinejax.core.registry import GridLearner

    found = {}
    for info in pkgutil.walk_packages(onlinejax.__path__, "onlinejax."):
        module = importlib.import_module(info.name)
        names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
        for name in names:
            fn = getattr(module, name, None)
            if not inspect.isfunction(fn):
                continue
            fn = inspect.unwrap(fn)  # describe_factory's wrapper keeps the signature, not the annotations' globals
            sig = inspect.signature(fn, eval_str=True)
            if sig.return_annotation in (Learner, GridLearner):
                found[f"{fn.__module__}.{fn.__qualname__}"] = sig
    return found


def test_no_factory_takes_more_than_6_arguments_besides_option_records():
    """A factory's options beyond a few go in records (``...Options``, ``GPHyper``, ``NIGPrior``, ...): an
    argument annotated with a ``NamedTuple`` type other than a learner does not count, ``*args``/``**kwargs``
    neither; every other argument (``dtype`` included) does."""
    from onlinejax.core.learner import Learner
    from onlinejax.core.registry import GridLearner

    factories = _public_factories()
    assert "onlinejax.learners.linear.bayes.bayes_linreg" in factories and "onlinejax.core.learner.make_learner" in factories
    wide = {}
    for name, sig in sorted(factories.items()):
        plain = [p.name for p in sig.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
                 and not _is_record(p.annotation, (Learner, GridLearner))]
        if len(plain) > MAX_PLAIN_ARGUMENTS:
            wide[name] = plain
    assert not wide, f"factories with more than {MAX_PLAIN_ARGUMENTS} arguments besides option records: {wide}"
