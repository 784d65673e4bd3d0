"""The package's layers (issue 11): the core imports only jax, optax and numpy; the research
support never imports the book's machinery; ``import itlin`` reaches every public algorithm and
changes nothing process-wide."""

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import itlin

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "itlin"
STDLIB = set(sys.stdlib_module_names)


def _imports(path: Path):
    """(top-level package, level, module) of every import in a file, at any depth."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name.split(".")[0], 0, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            out.append(((node.module or "").split(".")[0], node.level, node.module or ""))
    return out


def _resolve(path: Path, level: int, module: str) -> str:
    """The absolute dotted name of a relative import in ``path``."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    base = parts[:-level] if level else []
    return ".".join(base + ([module] if module else []))


@pytest.mark.parametrize("path", sorted((PKG / "core").glob("*.py")), ids=lambda p: p.name)
def test_core_imports_only_jax_optax_numpy_and_itself(path):
    for top, level, module in _imports(path):
        if level:
            target = _resolve(path, level, module)
            assert target.startswith("itlin.core"), f"{path.name} imports {target} (outside the core)"
        else:
            assert top in STDLIB or top in ("jax", "optax", "numpy", "__future__"), f"{path.name} imports {module}"


@pytest.mark.parametrize("name", ["models.py", "metrics.py", "augment.py", "_io.py",
                                  *sorted(str(p.relative_to(PKG)) for p in (PKG / "data").glob("*.py"))])
def test_research_support_never_imports_the_book(name):
    path = PKG / name
    for top, level, module in _imports(path):
        target = _resolve(path, level, module) if level else module
        assert not target.startswith("itlin.book"), f"{name} imports {target}"
        assert top not in ("matplotlib", "ipywidgets", "papermill", "jupytext"), f"{name} imports {module}"


def test_the_front_door_reaches_every_public_algorithm():
    for name in ("iterative_linearisation", "fit", "run", "evaluate", "linearise", "linearise_at", "ntk",
                 "gauss_newton_step", "gauss_newton_fit", "gradient_flow", "flow_params", "Every", "AtSteps",
                 "loss_drift", "kernel_drift", "parse_period", "ArbelDamping", "Model", "data_mesh"):
        assert callable(getattr(itlin, name)), name
    assert set(itlin.__all__) <= set(dir(itlin))
    assert "iterative_linearisation" in itlin.__doc__


def test_core_runs_with_nothing_heavy_imported_and_no_process_wide_change():
    # A fresh interpreter: import itlin, train, take a Gauss-Newton step and predict the flow;
    # none of the book's or the research support's dependencies may have been imported, and the
    # BLAS thread settings are untouched.
    script = textwrap.dedent("""
        import os, sys
        before = {k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
        import itlin, jax.numpy as jnp, optax
        f = lambda p, x: jnp.tanh(x @ p)
        x, y = jnp.eye(3), jnp.asarray([0.5, -0.2, 0.1])
        tr = itlin.iterative_linearisation(f, optax.sgd(0.5), 2, loss="squared")
        res = itlin.fit(tr, tr.init(jnp.zeros(3)), x, y, 6, eval_sets={"train": (x, y)})
        p, _ = itlin.gauss_newton_step(f, jnp.zeros(3), x, y, damping=0.1)
        itlin.gradient_flow(itlin.ntk(f, jnp.zeros(3), x), f(jnp.zeros(3), x), y).predict(1.0)
        heavy = {"flax", "matplotlib", "ipywidgets", "tqdm", "pooch", "sklearn", "threadpoolctl", "papermill",
                 "jupytext", "mnist1d", "IPython"}
        print("HEAVY", sorted(m for m in heavy if m in sys.modules))
        after = {k: os.environ.get(k) for k in before}
        print("ENV", before == after, res.status)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                         env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert "HEAVY []" in out.stdout, out.stdout
    assert "ENV True completed" in out.stdout, out.stdout


def test_every_public_callable_has_a_runnable_example():
    # Every name in itlin.__all__ (functions, jitted functions such as ntk, classes) has a ``>>>``
    # example in its own docstring that pytest's --doctest-modules collects and runs: the
    # doctest finder of its defining module must find it under that name.
    import doctest

    finder, found, missing = doctest.DocTestFinder(), {}, []
    for name in itlin.__all__:
        obj = getattr(itlin, name)
        assert callable(obj), name
        module = sys.modules[obj.__module__]
        if module.__name__ not in found:
            found[module.__name__] = {t.name for t in finder.find(module) if t.examples}
        if f"{module.__name__}.{obj.__qualname__}" not in found[module.__name__]:
            missing.append(name)
    assert not missing, missing
    assert "ntk" in itlin.__all__ and "Trainer" in itlin.__all__  # the kinds the old check skipped


@pytest.mark.parametrize("path", sorted(p for p in (PKG / "core").glob("*.py") if not p.name.startswith("_")),
                         ids=lambda p: p.name)
def test_no_core_callable_is_public_but_neither_exported_nor_documented(path):
    # issue 11: as_model, float_dtype and the per-example losses were public in their modules
    # but neither re-exported nor given an example; helpers are private (underscore) instead
    import doctest
    import importlib
    import inspect

    module = importlib.import_module(f"itlin.core.{path.stem}")
    documented = {t.name.rsplit(".", 1)[-1] for t in doctest.DocTestFinder().find(module) if t.examples}
    loose = [n for n, obj in vars(module).items()
             if not n.startswith("_") and getattr(obj, "__module__", None) == module.__name__
             and (inspect.isfunction(obj) or inspect.isclass(obj) or hasattr(obj, "__wrapped__"))  # jitted too
             and n not in itlin.__all__ and n not in documented]
    assert not loose, loose
    for name in ("as_model", "float_dtype", "squared_per_example", "cross_entropy_per_example"):
        assert not hasattr(module, name), f"{path.name} still has a public {name}"


@pytest.mark.parametrize("path", sorted(PKG.rglob("*.py")), ids=lambda p: str(p.relative_to(PKG)))
def test_no_private_name_is_imported_only_to_be_passed_on(path):
    """A private name (``_x``) one module imports from another is used there: no module re-exports
    another's private names for callers to reach through it (issue 60; ``runner`` did, for about 25)."""
    tree = ast.parse(path.read_text())
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | \
           {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    passed_on = [a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level
                 for a in node.names if (a.asname or a.name).startswith("_") and (a.asname or a.name) not in used]
    assert not passed_on, f"{path.relative_to(ROOT)} imports private names it never uses: {passed_on}"


def test_no_module_reaches_through_another_for_a_private_name():
    """``runner._locked`` style: a private name is reached on the module that defines it, never on one
    that only imports it (tests and benchmarks included)."""
    files = sorted(PKG.rglob("*.py")) + sorted((ROOT / "tests").glob("*.py")) + sorted((ROOT / "benchmarks").glob("*.py"))
    defined = {}  # module name -> names it defines at its top level
    for p in PKG.rglob("*.py"):
        tree = ast.parse(p.read_text())
        names = set()
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
        defined[p.stem if p.stem != "__init__" else p.parent.name] = names
    bad = []
    for p in files:
        tree = ast.parse(p.read_text())
        # the names a file gives the modules of itlin.book it imports: "runner", "E" (experiments), ...
        aliases = {a.asname or a.name: a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                   and (node.module or "").endswith("book") or (isinstance(node, ast.ImportFrom) and node.level
                                                                and not node.module) for a in node.names}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.attr.startswith("_") \
                    and not node.attr.startswith("__") and aliases.get(node.value.id) in defined:
                if node.attr not in defined[aliases[node.value.id]]:
                    bad.append(f"{p.relative_to(ROOT)}:{node.lineno} {node.value.id}.{node.attr}")
    assert not bad, "private names reached through a module that does not define them: " + ", ".join(bad)


def _walk_at_run_time(tree):
    """Every node of ``tree`` but those under ``if TYPE_CHECKING:`` (imports for annotations only)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))


def _module_graph() -> dict:
    """``{module: modules of itlin it imports}`` (at any depth: a function's own imports count), a
    package's ``__init__`` under the package's name; edges to the registries' packages
    (``itlin``, ``itlin.book``, ``itlin.book.experiments``) left out, since those load their
    modules by name when asked, never at import."""
    mods = {}
    for p in PKG.rglob("*.py"):
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    roots = {"itlin", "itlin.book", "itlin.book.experiments"}
    graph = {}
    for name, p in mods.items():
        package = name if p.name == "__init__.py" else name.rsplit(".", 1)[0]
        edges = set()
        for node in _walk_at_run_time(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]) if node.level else ""
                target = ".".join(x for x in (base, node.module or "") if x)
                edges |= {c for c in [target] + [f"{target}.{a.name}" for a in node.names] if c in mods}
            elif isinstance(node, ast.Import):
                edges |= {a.name for a in node.names if a.name in mods}
        graph[name] = edges - roots - {name}
    return graph


def test_no_import_circle():
    """No module of itlin imports, through any chain, a module that imports it (issue 60: render and
    recheck did, and opendata and records)."""
    graph = _module_graph()

    def reaches(start):
        seen, todo = set(), [start]
        while todo:
            for w in graph[todo.pop()]:
                if w not in seen:
                    seen.add(w)
                    todo.append(w)
        return seen

    circles = sorted(m for m in graph if m in reaches(m))
    assert not circles, f"modules on an import circle: {circles}"


@pytest.mark.parametrize("module", ["itlin.book.store", "itlin.book.records", "itlin.book.opendata", "itlin.book.axes",
                                    "itlin.book.plans", "itlin.book.registry"])
def test_the_store_imports_no_experiment_nor_what_sits_above_it(module):
    """Storing runs sits under the experiments and the judging and presenting above them; it reads
    what an experiment declares through the registry's views, which import nothing of the book."""
    above = ("itlin.book.experiments", "itlin.book.study", "itlin.book.runner", "itlin.book.render",
             "itlin.book.findings", "itlin.book.judging", "itlin.book.chapters", "itlin.book.figures")
    graph = _module_graph()
    assert not [m for m in graph[module] if m.startswith(above)], graph[module]
    assert graph["itlin.book.registry"] == set()
    # nor the experiments' package itself (the graph leaves it out), at any depth: ``from . import experiments``
    path = PKG / "book" / f"{module.rsplit('.', 1)[1]}.py"
    reached = [f"{_resolve(path, n.level, n.module or '') if n.level else n.module}.{a.name}"
               for n in _walk_at_run_time(ast.parse(path.read_text())) if isinstance(n, ast.ImportFrom) for a in n.names]
    assert not [m for m in reached if m.startswith(above)], reached
