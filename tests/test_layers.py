"""The layers of utils/: every package says in its docstring which packages it may import, and imports
no other (in particular none above it), so that a package can be read, tested and changed with only
what lies below it in mind."""

import ast
import re
from pathlib import Path

import pytest

UTILS = Path(__file__).resolve().parent.parent / "utils"
# bottom to top
ORDER = ["core", "models", "data", "evaluation", "training", "reporting", "config", "run", "export", "audit", "drivers"]


def our_imports(path):
    """The utils packages a module imports (`from utils.<pkg>...` / `import utils.<pkg>...`), with lines."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
        names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
        found += [(n.split(".")[1], node.lineno) for n in names if n.startswith("utils.")]
    return found


def allowed(package):
    """The packages named on the `May import:` line of the package's docstring."""
    doc = ast.get_docstring(ast.parse((UTILS / package / "__init__.py").read_text())) or ""
    line = re.search(r"^May import: (.*)$", doc, flags=re.M)
    assert line, f"utils/{package}/__init__.py: its docstring has no 'May import:' line"
    if line.group(1).startswith("every package below"):
        return set(ORDER[:ORDER.index(package)])
    return {name for name in re.findall(r"utils\.([a-z_]+)", line.group(1))}


def test_the_packages_are_the_layers_and_nothing_else_lives_in_utils():
    packages = sorted(p.name for p in UTILS.iterdir() if (p / "__init__.py").exists())
    assert packages == sorted(ORDER)
    assert sorted(p.name for p in UTILS.glob("*.py")) == ["__init__.py", "inference.py"]


@pytest.mark.parametrize("package", ORDER)
def test_a_package_imports_only_what_its_docstring_allows_and_nothing_above_it(package):
    may = allowed(package)
    assert may <= set(ORDER[:ORDER.index(package)]), f"utils/{package} says it may import a package above it"
    wrong = [f"{path.relative_to(UTILS.parent)}:{line} imports utils.{other}"
             for path in sorted((UTILS / package).rglob("*.py"))
             for other, line in our_imports(path) if other != package and other not in may]
    assert not wrong, "\n".join(wrong)


ROOT = UTILS.parent
def python_files():
    return [ROOT / "train_classification.py", ROOT / "predict.py"] + sorted(UTILS.rglob("*.py"))


DATA_ORDER = ["errors", "decoding", "transforms", "datasets", "loading", "streaming", "sources"]  # bottom to top


def module_imports(path):
    """The modules of ours a file imports anywhere in it (a function's own imports too), as dotted names."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("utils"):
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("utils")}
    return found


def test_utils_data_is_layered_as_the_data_flows_and_nothing_in_utils_imports_in_a_circle():
    """utils/data/'s sub-packages import only those below them (decoders at the bottom, sources on top), and no
    module of utils/ reaches itself through its imports (one inside a function counts: it hid a cycle once)."""
    modules = {".".join(p.relative_to(ROOT).with_suffix("").parts): p for p in UTILS.rglob("*.py")}
    modules = {name.removesuffix(".__init__"): path for name, path in modules.items()}
    edges = {name: {m for m in module_imports(path) if m in modules and m != name} for name, path in modules.items()}
    upward = []
    for name, targets in edges.items():
        parts = name.split(".")
        if parts[:2] != ["utils", "data"] or len(parts) < 3:
            continue
        for target in targets:
            other = target.split(".")
            if other[:2] == ["utils", "data"] and len(other) >= 3 and parts[2] != other[2]:
                if parts[2] not in DATA_ORDER or other[2] not in DATA_ORDER:
                    upward.append(f"{name} or {target} is in none of {DATA_ORDER}")
                elif DATA_ORDER.index(other[2]) > DATA_ORDER.index(parts[2]):
                    upward.append(f"{name} imports {target}")
    assert not upward, "\n".join(upward)
    state = dict.fromkeys(edges, 0)  # 0 unseen, 1 on the path, 2 done

    def visit(name, path):
        state[name] = 1
        for target in sorted(edges[name]):
            if state[target] == 1:
                raise AssertionError("an import cycle: " + " -> ".join(path[path.index(target):] + [target]))
            if state[target] == 0:
                visit(target, path + [target])
        state[name] = 2

    for name in sorted(edges):
        if state[name] == 0:
            visit(name, [name])


def test_every_module_of_utils_is_on_the_map_in_docs_architecture():
    """docs/architecture.md has a section a package (`### utils/<package>/`) with a row or a sentence for each of its
    modules, named by its path in the package (`decoding/images.py`): a module added, moved or renamed without the map
    fails here."""
    doc = (UTILS.parent / "docs" / "architecture.md").read_text()
    sections = dict(re.findall(r"^### utils/([a-z_]+)/[^\n]*\n(.*?)(?=^### |^## |\Z)", doc, flags=re.M | re.S))
    assert sorted(sections) == sorted(ORDER), sorted(sections)
    missing = []
    for package in ORDER:
        named = set(re.findall(r"`([^`\s]+)`", sections[package]))
        for path in sorted((UTILS / package).rglob("*.py")):
            inner = path.relative_to(UTILS / package).as_posix()
            if path.name == "__init__.py":
                continue
            if not any(name == inner or name.endswith("/" + inner) for name in named):
                missing.append(f"utils/{package}/{inner}")
    assert not missing, f"not on docs/architecture.md's map: {missing}"


@pytest.mark.slow
def test_each_test_conftest_starts_first_still_names_a_test(request):
    """conftest.LONG_FIRST orders the suite by node ids: a test renamed or re-parametrized would silently drop out of
    it. Each must be one pytest collects: in this session's collection when the whole suite runs, otherwise (a file or
    -k chosen) in a collection of its own."""
    import subprocess
    import sys

    from conftest import LONG_FIRST, ROOT

    unseen = sorted(set(LONG_FIRST) - {item.nodeid for item in request.session.items})
    if unseen:
        proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-n",
                               "0", *unseen], cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert sorted(line for line in proc.stdout.splitlines() if "::" in line) == unseen


@pytest.mark.slow
def test_each_break_of_breaks_tsv_selects_a_test(request):
    """A line of tests/breaks.tsv whose -k names a test since renamed runs nothing, and break-and-test reports its
    break as a survivor that no test was given the chance to catch. Each line must select a test: of this session's
    collection when it holds the whole suite, otherwise of a collection of its own."""
    import subprocess
    import sys

    from conftest import ROOT
    from helpers.break_selectors import stale

    whole = not request.config.getoption("keyword") and not request.config.getoption("markexpr") and \
        {str(arg).rstrip("/") for arg in request.config.args} <= {"tests", str(ROOT / "tests")}
    if whole:
        assert stale(request.session.items) == []
    else:
        proc = subprocess.run([sys.executable, "tests/helpers/break_selectors.py"], cwd=ROOT, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_a_break_whose_selector_runs_no_test_is_told(request):
    """helpers/break_selectors.py judges a line as pytest would run it: its paths, -k and -m (here on this test
    alone)."""
    from helpers.break_selectors import stale

    here = "tests/test_layers.py"
    lines = ["-n 0 -p no:randomly -k runs_no_test", f"{here} -k renamed_since", "tests/test_train.py -k runs_no_test",
             f"{here} -m slow -k runs_no_test", "-m 'not slow' -k 'selector and not layers' -x", "tests/ -k is_told"]
    text = "\n".join(f"utils/x.py\told\tnew\t{args}" for args in lines)
    assert stale([request.node], text) == [(2, lines[1]), (3, lines[2]), (4, lines[3]), (5, lines[4])]


def test_timm_is_imported_only_through_import_timm():
    """timm's own import pulls in wandb (utils/models/timm_library.py:import_timm): one `import timm` of ours
    elsewhere, run first, would bring that cost back to every run on a timm model."""
    scripts = [ROOT / name for name in ("tune.py", "crossval.py", "export.py")]
    found = [f"{path.relative_to(ROOT)}:{node.lineno}" for path in python_files() + scripts
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "timm" for a in node.names)
             or isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "timm"]
    assert not found, found


def test_below_the_parser_a_run_reads_its_typed_configuration_only():
    """The parse's namespace goes no further than utils/config/: no `args` read, passed or taken by the script or any
    other package of utils/ (a wrapper's own `*args` excepted), and no argparse.Namespace built outside utils/config/
    in the product's code (a faked namespace hid what a run was built from)."""
    readers, faked = [], []
    for path in [ROOT / "train_classification.py", ROOT / "predict.py", ROOT / "tune.py", ROOT / "crossval.py",
                 ROOT / "export.py", *sorted(UTILS.rglob("*.py"))]:
        name = str(path.relative_to(ROOT))
        if name.startswith("utils/config/"):
            continue
        tree = ast.parse(path.read_text())
        wrappers = {id(inner) for f in ast.walk(tree)  # a function's own `*args`, passed on as they came
                    if isinstance(f, (ast.FunctionDef, ast.Lambda)) and f.args.vararg and f.args.vararg.arg == "args"
                    for inner in ast.walk(f)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "Namespace":
                faked.append(f"{name}:{node.lineno}")
            # their own parsers' namespaces: the drivers'
            if name in ("predict.py", "tune.py", "crossval.py", "export.py"):
                continue
            named = (isinstance(node, ast.Name) and node.id == "args"
                     or isinstance(node, ast.Attribute) and node.attr == "args"
                     or isinstance(node, ast.arg) and node.arg == "args")
            if named and id(node) not in wrappers:
                readers.append(f"{name}:{node.lineno}")
    assert not readers, "the options' namespace below the parser: " + ", ".join(sorted(set(readers)))
    assert not faked, "argparse.Namespace outside utils/config/: " + ", ".join(faked)
