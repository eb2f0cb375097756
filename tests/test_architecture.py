"""The project's architecture, read from the source with ``ast`` (imports inside functions included).

labkit never imports source_code; the application imports from labkit only ``labkit.annotate``;
no import cycle anywhere in the project (labkit, labbook, source_code, scripts, benchmarks, tests); labkit's rooms (subpackages) in the
order of the data flow, none importing a room after it; no .py file over 500 lines in
labkit/, source_code/, notebooks/ or any top-level package; labkit names none of the application's flags.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 500


def _modules(package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under ``package``."""
    out = {}
    for f in sorted((ROOT / package).rglob("*.py")):
        parts = list(f.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Modules (of ``known``, else the raw dotted name) that ``path`` imports anywhere in its body."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_pkg = path.name == "__init__.py"
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_pkg else name.split(".")[:-1]
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                found.add(sub if sub in known else base)
    out = set()
    for mod in found:
        # "labkit.report.load.x" -> the longest known module prefix
        parts = mod.split(".")
        for i in range(len(parts), 0, -1):
            if ".".join(parts[:i]) in known:
                out.add(".".join(parts[:i]))
                break
        else:
            out.add(mod)
    out.discard(name)
    return out


def _graph(package: str) -> dict[str, set[str]]:
    mods = _modules(package)
    known = set(mods) | set(_modules("labkit")) | set(_modules("source_code"))
    return {m: _imports(m, f, known) for m, f in mods.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _top_level_packages() -> list[str]:
    return sorted(p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file() and not p.name.startswith("."))


def test_the_parser_sees_imports_inside_functions():
    """The checks below would pass vacuously if function-level imports were missed."""
    g = _graph("labkit")
    assert "labkit.env" in g["labkit.record.tool"]  # `from labkit.env import find_nsys` inside a function
    assert {"labkit.report.reader", "labkit.report.nvtx", "labkit.record.nsys"} <= g["labkit.report.load"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_labkit_never_imports_source_code():
    bad = {m: sorted(i for i in deps if i.split(".")[0] == "source_code") for m, deps in _graph("labkit").items()}
    assert not {m: d for m, d in bad.items() if d}


def test_application_imports_only_labkit_annotate():
    bad = {m: sorted(i for i in deps if i.split(".")[0] == "labkit" and i != "labkit.annotate")
           for m, deps in _graph("source_code").items()}
    assert not {m: d for m, d in bad.items() if d}


def test_no_import_cycle_in_labkit():
    assert _cycles(_graph("labkit")) == []


def test_no_import_cycle_in_source_code():
    assert _cycles(_graph("source_code")) == []


# Folders of scripts run with their own folder on sys.path: `import jupyter_lab` in scripts/ is scripts/jupyter_lab.py.
SCRIPT_FOLDERS = ("scripts", "benchmarks", "tests")


def _project_graph() -> dict[str, set[str]]:
    """Every module of the project as one graph: the packages (labkit, labbook, source_code, any other top-level
    package) and the scripts of scripts/, benchmarks/ and tests/, whose bare imports of a sibling file name it."""
    mods = {}
    for pkg in _top_level_packages():
        mods.update(_modules(pkg))
    for folder in SCRIPT_FOLDERS:
        for f in sorted((ROOT / folder).glob("*.py")):
            mods[f"{folder}.{f.stem}"] = f
    known = set(mods)
    graph = {}
    for m, f in mods.items():
        deps = _imports(m, f, known)
        folder = m.split(".")[0]
        if folder in SCRIPT_FOLDERS:  # a sibling imported by its bare name
            deps = {f"{folder}.{d}" if f"{folder}.{d}" in known else d for d in deps}
        graph[m] = {d for d in deps if d in known and d != m}
    return graph


def test_the_project_graph_holds_every_part():
    g = _project_graph()
    assert {"labbook", "source_code", "labkit"} <= {m.split(".")[0] for m in g}
    assert "scripts.jupyter_lab" in g["scripts.browser_lab"]  # a bare sibling import is seen
    assert "labbook.reference" in g["labbook.interval"]  # a function-level import is seen


def test_no_import_cycle_anywhere_in_the_project():
    assert _cycles(_project_graph()) == []


def _too_long(folders) -> dict[str, int]:
    out = {}
    for folder in folders:
        for f in sorted((ROOT / folder).rglob("*.py")):
            n = len(f.read_text().splitlines())
            if n > MAX_LINES:
                out[str(f.relative_to(ROOT))] = n
    return out


def test_no_file_over_500_lines_in_labkit_and_new_packages():
    folders = list(_top_level_packages()) + ["source_code", "notebooks"]
    assert "labkit" in folders
    assert _too_long(sorted(set(folders))) == {}


# labkit speaks of levers in general words; labbook maps them to the application's flags
FLAG_CONTRACT = {"--results", "--warmup"}  # labkit.bench's documented contract with any benchmarked program


def _application_flags() -> set[str]:
    """Every flag of the application, from its option table (``source_code.options.OPTIONS``),
    toggles' ``--no-`` forms included, less those labkit's own command lines define (``--output``,
    ``--overwrite``...) and the bench contract."""
    from source_code.options import OPTIONS

    flags = {o.flag for o in OPTIONS} | {"--no-" + o.flag[2:] for o in OPTIONS if o.kind == "toggle"}
    own = set()
    for f in (ROOT / "labkit").rglob("*.py"):
        own |= set(re.findall(r"""add_argument\(\s*["'](--[\w-]+)""", f.read_text()))
    return flags - own - FLAG_CONTRACT


def test_no_flag_of_the_application_in_labkit():
    flags = _application_flags()
    assert {"--queues", "--batch-size", "--cuda-graphs", "--compile", "--backend", "--interval", "--gpu-preprocess",
            "--streams", "--no-osd", "--decode-only", "--precision", "--channels-last"} <= flags
    found = {}
    for f in sorted((ROOT / "labkit").rglob("*.py")):
        text = f.read_text()
        for flag in flags:
            for m in re.finditer(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text):
                found.setdefault(str(f.relative_to(ROOT)), set()).add(f"{flag} (line {text[:m.start()].count(chr(10)) + 1})")
    assert {f: sorted(v) for f, v in found.items()} == {}


# labkit's rooms, bottom to top: a module may import its own room, a room below, or the top level's
# shared modules (errors, progress, annotate, env, style, api, safe_text, paths); doctor and cli sit above every room.
FLOORS = ["record", "report", "stats", ("judge", "show"), "ranks", "bench"]
SHARED = {"labkit.errors", "labkit.progress", "labkit.annotate", "labkit.env", "labkit.style", "labkit.api",
          "labkit.safe_text", "labkit.paths"}


def _floor(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) < 2 or parts[0] != "labkit":
        return None
    for i, rooms in enumerate(FLOORS):
        if parts[1] in ((rooms,) if isinstance(rooms, str) else rooms):
            return i
    return None


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (ROOT / "labkit" / parts[-1]).is_dir() else None


def test_rooms_import_only_their_own_room_rooms_below_and_shared_modules():
    upward, side = {}, {}
    for mod, deps in _graph("labkit").items():
        mine = _floor(mod)
        if mine is None:
            continue
        for dep in deps:
            if not dep.startswith("labkit"):
                continue
            theirs = _floor(dep)
            if theirs is None:
                if dep not in SHARED and dep != "labkit":
                    upward.setdefault(mod, []).append(dep)
            elif theirs > mine:
                upward.setdefault(mod, []).append(dep)
            elif theirs == mine and _room(dep) != _room(mod):
                side.setdefault(mod, []).append(dep)
    assert upward == {}
    assert side == {}  # judge and show, on one floor, do not import each other


def test_the_house_has_rooms_and_a_small_top_level():
    rooms = sorted(p.name for p in (ROOT / "labkit").iterdir() if (p / "__init__.py").is_file())
    top = sorted(p.stem for p in (ROOT / "labkit").glob("*.py"))
    flat = {r if isinstance(r, str) else x for r in FLOORS for x in ((r,) if isinstance(r, str) else r)}
    assert set(rooms) == flat
    assert len(rooms) >= 4 and len(top) <= 13, top  # "about a dozen"
    for room in rooms:
        doc = ast.get_docstring(ast.parse((ROOT / "labkit" / room / "__init__.py").read_text()))
        assert doc and "\n" not in doc.strip(), f"labkit/{room}/__init__.py: one line saying what lives there"


def test_every_name_labkit_exported_in_round_3_still_imports_from_labkit():
    import labkit

    old = ["advise", "next_lever", "load_reports", "Reports", "plot_rank_timeline", "profile_ranks", "load_report",
           "Report", "plot_timeline", "interactive_timeline", "to_perfetto", "Ledger", "speedup_table",
           "LabkitError", "OutputError", "restrict", "windowed", "compare", "plot_compare", "stage_table", "batches",
           "gpu_utilization", "gpu_idle_gaps", "gpu_idle_breakdown", "bottleneck", "steady_window", "stage_overlap",
           "copy_table", "pageable_copies", "choose_stages", "nvtx_summary", "kernel_summary", "osrt_summary",
           "profile"]
    for name in old:
        assert callable(getattr(labkit, name)), name
    assert labkit.bench.run.__name__ == "run" and labkit.bench.sweep.__name__ == "sweep"
    assert labkit.nsys.record.__name__ == "record" and labkit.nsys.export_sqlite.__name__ == "export_sqlite"
    assert labkit.report.load_report is labkit.load_report
    from labkit import annotate, ledger, tables, timeline  # flat module names of round 3

    assert annotate.range and ledger.Ledger is labkit.Ledger and tables.speedup_table is labkit.speedup_table
    assert timeline.plot_timeline is labkit.plot_timeline


def _prose(path: Path) -> str:
    """A module's docstrings (its own, its classes', functions' and the strings that document a
    name) and comments: what it says, not what it runs."""
    tree = ast.parse(path.read_text())
    said = [n.value.value for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
            and isinstance(n.value.value, str)]
    said += [ln.split("#", 1)[1] for ln in path.read_text().splitlines() if "#" in ln]
    return "\n".join(said)


def test_no_rule_of_the_judgement_is_explained_by_a_test_program():
    """labkit/judge and labkit/stats say why a rule holds by what a trace shows, never by naming the
    test program that made it (a program of tests/programs, a path under tests/)."""
    programs = {p.stem for p in (ROOT / "tests" / "programs").rglob("*.py") if not p.stem.startswith("_")}
    assert {"lone_stage", "same_name", "dataloader_workers"} <= programs
    found = {}
    for f in sorted([*(ROOT / "labkit" / "judge").glob("*.py"), *(ROOT / "labkit" / "stats").glob("*.py")]):
        text = _prose(f)
        # a rule may share its id with a program ("taking_turns"); a docstring naming the id in prose does not
        named = {m.group(0) for m in re.finditer(r"tests/[\w/.]+", text)}
        named |= {n for n in programs if re.search(rf"(?<![\w'\"]){re.escape(n)}(\.py|``)", text)}
        named |= {n for n in programs if re.search(rf"``{re.escape(n)}``", text)}
        if named:
            found[str(f.relative_to(ROOT))] = sorted(named)
    assert found == {}
