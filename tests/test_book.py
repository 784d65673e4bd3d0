"""The book: every chapter executes under papermill (tiny scale), and the book builds with -W.

Chapters are executed one test each (so a failing chapter names itself) into a session folder;
the build test then assembles those executed notebooks into a copy of the book with execution
switched off and runs ``jupyter-book build -W -n --keep-going``: a warning or a chapter that did
not execute fails it. Results go to the session's temporary ``ITLIN_RESULTS`` (``conftest.py``),
shared with the test modules that run the same experiments, so nothing cached elsewhere is
reused and nothing is computed twice.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
import yaml

import itlin
from itlin.book import verdicts as V
from itlin.book.plotting import MIN_TEXT_PX
from itlin.book.run import chapter_parameters, execute_chapter, main as run_main, parameters_cell, _read

ROOT = Path(__file__).resolve().parents[1]
TINY = {"scale": "tiny"}
TIMES: dict = {}


def toc_files():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]

    def walk(entries):
        for e in entries or []:
            if "file" in e:
                files.append(e["file"])
            walk(e.get("sections"))

    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    walk(toc.get("chapters"))
    return files


PAGES = toc_files()
# pages without code: plain MyST, built but never executed (the API reference, from docstrings)
PLAIN_PAGES = ["book/api", "book/methods", "book/adding_an_experiment"]
CHAPTERS = [p for p in PAGES if p not in PLAIN_PAGES]


def _chapter_text(chapter) -> str:
    """A chapter's text and that of its module in ``itlin.book.chapters``, where its code lives."""
    module = ROOT / "itlin" / "book" / "chapters" / (Path(chapter).name + ".py")
    return (ROOT / (chapter + ".md")).read_text() + (module.read_text() if module.exists() else "")


def _opens_files(chapter) -> bool:
    """Chapters that read files kept with the book (recorded runs, benchmark results), in their
    own text or their module's."""
    text = _chapter_text(chapter)
    return any(s in text for s in ("open_record", "open_records", "recorded_dir", "benchmarks/results",
                                   "benchmark_results"))


@pytest.fixture(scope="session")
def book_dirs(session_folder, session_results):
    executed = session_folder("executed")  # one for every xdist worker
    mp = pytest.MonkeyPatch()
    mp.setenv("ITLIN_QUIET", "1")
    yield executed
    mp.undo()


def _experiments_of(chapter) -> list:
    """The experiments a chapter runs with its parameters cell (``runner.params_from("name", ...)``)."""
    text = (ROOT / (chapter + ".md")).read_text()
    return sorted(set(re.findall(r"params_from\(\s*[\"']([\w.-]+)[\"']", text)))


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_parameters_cell_defaults_equal_the_experiments(chapter):
    """A parameters cell holds what a reader changes, at the experiment's own defaults: a value
    that differs would silently run (and cache) other settings than the experiment declares."""
    from itlin.book import experiments

    src = ROOT / (chapter + ".md")
    namespace: dict = {}
    exec(parameters_cell(_read(src)).source, {}, namespace)
    checked = 0
    for name in _experiments_of(chapter):
        exp = experiments.get(name)
        defaults = exp.params.from_dict({}).as_dict()
        for key, value in namespace.items():
            if key in defaults:
                given = exp.params.from_dict({key: value}).as_dict()[key]
                assert given == defaults[key], (f"{chapter}: parameters cell sets {key} = {value!r}, but "
                                                f"{name}'s default is {defaults[key]!r}")
                checked += 1
    if _experiments_of(chapter):
        assert checked >= 1, f"{chapter}'s parameters cell sets none of its experiments' parameters"


def test_every_chapter_is_a_paired_myst_notebook_with_one_parameters_cell():
    for f in CHAPTERS:
        src = ROOT / (f + ".md")
        assert src.exists(), f"{f}.md is listed in _toc.yml but missing"
        text = src.read_text()
        assert text.startswith("---\njupytext:"), f"{f}.md lacks the jupytext header"
        parameters_cell(_read(src))  # exactly one, else ValueError
    for f in PLAIN_PAGES:  # a code cell shown in a block of four backticks (a chapter on the guide's page) is text
        text = re.sub(r"^````.*?^````$", "", (ROOT / (f + ".md")).read_text(), flags=re.S | re.M)
        assert f in PAGES and "code-cell" not in text and not text.startswith("---"), f
    listed = {ROOT / (f + ".md") for f in PAGES}
    stray = [p.name for p in (ROOT / "book").glob("*.md") if p not in listed]
    assert not stray, f"chapters missing from _toc.yml: {stray}"


@pytest.mark.slow
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_executes_under_papermill_at_tiny_scale(chapter, book_dirs, monkeypatch, tmp_path):
    """Every chapter executes at ``scale="tiny"`` from the repository root, as a user runs it.
    Chapters that read files kept with the book (recorded runs, benchmark results) run the way a
    user does without itlin's wrapper: jupytext to .ipynb, then papermill's command line; they
    must find those files. The others run through :func:`itlin.book.run.execute_chapter`."""
    src = ROOT / (chapter + ".md")
    params = {k: v for k, v in TINY.items() if k in chapter_parameters(src)}
    out = book_dirs / (chapter + ".ipynb")
    sizes = tmp_path / "figure-text.jsonl"
    monkeypatch.setenv("ITLIN_FIGURE_CHECK", str(sizes))  # itlin.book.setup() notes each figure's text
    t = time.perf_counter()
    if _opens_files(chapter):
        _execute_with_plain_papermill(chapter, out, params, tmp_path)
    else:
        execute_chapter(src, out, params, timeout=900, cwd=ROOT)
    TIMES[chapter] = time.perf_counter() - t
    # legibility: no figure text under MIN_TEXT_PX at the book's column width
    figures = [json.loads(line) for line in sizes.read_text().splitlines()] if sizes.exists() else []
    small = [f for f in figures if f["px"] is not None and f["px"] < MIN_TEXT_PX - 1e-9]
    assert not small, f"{chapter}: figure text below {MIN_TEXT_PX} px at the column width: {small}"
    nb = nbformat.read(out, as_version=4)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    log = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
           if o.get("output_type") == "stream" and "[itlin] " in o.get("text", "")]
    assert not log, f"{chapter}: the runner's lines on the page: {log[:2]}"  # no progress log (issue 58)
    if params:
        injected = [c for c in nb.cells if "injected-parameters" in c.get("metadata", {}).get("tags", [])]
        assert len(injected) == 1 and "scale = \"tiny\"" in injected[0].source


#: the built book of :func:`test_book_builds_without_warnings_and_contains_the_static_demo`, for the
#: browser test after it (same file, so the same process, in order)
BUILT: dict = {}


@pytest.mark.slow
def test_book_builds_without_warnings_and_contains_the_static_demo(book_dirs, tmp_path_factory):
    missing = [c for c in CHAPTERS if not (book_dirs / (c + ".ipynb")).exists()]
    assert not missing, f"chapters that did not execute: {missing}"
    site = tmp_path_factory.mktemp("built") / "site"
    shutil.copytree(book_dirs, site)
    for name in ("_toc.yml", "references.bib"):
        shutil.copy(ROOT / name, site / name)
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    config["execute"]["execute_notebooks"] = "off"
    (site / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    for extra in (ROOT / "book").iterdir():  # images or data files the chapters refer to
        if extra.suffix not in (".md", ".ipynb") and extra.is_file():
            shutil.copy(extra, site / "book" / extra.name)
    for page in PLAIN_PAGES:
        shutil.copy(ROOT / (page + ".md"), site / (page + ".md"))
    exe = Path(sys.executable).with_name("jupyter-book")
    cmd = [str(exe) if exe.exists() else "jupyter-book", "build", str(site), "-W", "-n", "--keep-going"]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    TIMES["build"] = time.perf_counter() - t
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    html = site / "_build" / "html"
    for page in PAGES:
        assert (html / (page + ".html")).exists(), page
    api = (html / "book" / "api.html").read_text(encoding="utf-8")  # an entry for every public name
    assert all(f'id="itlin.{name}"' in api for name in itlin.__all__)
    # clean outputs: no local paths, no ipywidgets state, no scripts from the network
    local = [str(ROOT), os.environ["ITLIN_RESULTS"], str(book_dirs), str(Path.home())]
    for page in html.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert "widget-state+json" not in text, f"{page.name} embeds ipywidgets state"
        remote = re.findall(r"<script\b[^>]*\bsrc=[\"'](https?:[^\"']+)", text)
        assert not remote, f"{page.name} loads scripts from the network: {remote}"
        leaked = [p for p in local if p in text]
        assert not leaked, f"{page.name} shows local paths: {leaked}"
    for nb_file in (html / "_sources").rglob("*.ipynb"):
        assert "widgets" not in json.loads(nb_file.read_text())["metadata"], nb_file.name
    # each page at most 6 MB with the images it shows (a static demo embeds its frames)
    weights = {}
    for page in (html / "book").glob("*.html"):
        text = page.read_text(encoding="utf-8")
        images = {(page.parent / src).resolve() for src in re.findall(r"<img\b[^>]*\bsrc=\"([^\"]+)\"", text)
                  if not src.startswith(("data:", "http:", "https:"))}
        weights[page.stem] = len(text.encode()) + sum(p.stat().st_size for p in images if p.is_file())
    heavy = {k: v for k, v in weights.items() if v > 6_000_000}
    assert not heavy, f"pages over 6 MB with their images: {heavy}"
    TIMES["page bytes"] = weights
    demo = (html / "book" / "iterative_linearisation.html").read_text()
    assert 'class="itlin-static-demo"' in demo and "<input type=\"range\"" in demo
    BUILT["html"] = html
    if os.environ.get("ITLIN_REPORT_TIMES"):
        print(json.dumps(TIMES, indent=1))


@pytest.mark.slow
def test_in_a_browser_every_demo_moves_its_figure_and_no_page_logs_a_script_error():
    """Every page of the built book in headless Chromium: no uncaught script error in its console,
    and every slider of every demo, moved with the keyboard, changes the frame shown. Each chapter
    whose code shows a demo has one that moves, and the Findings table fits a laptop's width."""
    import browser
    from itlin.book.live import chapters_with_demos

    if "html" not in BUILT:
        pytest.fail("the book was not built (the build test above failed or did not run)")
    with browser.serve(BUILT["html"]) as base, browser.browser() as driver:
        pages = browser.browse(driver, base, PAGES)
        errors = {p.name: p.errors for p in pages if p.errors}
        assert not errors, f"uncaught script errors: {errors}"
        stuck = {p.name: [m for m in p.moves if not m[2]] for p in pages if not all(m[2] for m in p.moves)}
        assert not stuck, f"sliders that moved no frame: {stuck}"
        moving = {p.name.split("/")[-1] for p in pages if p.moved_a_figure}
        assert moving >= set(chapters_with_demos(ROOT)), set(chapters_with_demos(ROOT)) - moving
        assert len(moving) >= MIN_DEMO_PAGES, sorted(moving)
        # the Findings tables at a laptop's width: every column in view, none behind a scroll bar
        browser.open_page(driver, f"{base}/book/findings.html")
        overflow = driver.execute_script("""
            return [...document.querySelectorAll('main table')].filter(t => t.offsetParent)
                   .map(t => t.scrollWidth - t.parentElement.clientWidth).filter(x => x > 1);""")
        assert not overflow, f"Findings tables wider than the page's column by {overflow} px"


#: the fewest pages whose demo moves a figure (issue 57)
MIN_DEMO_PAGES = 10


@pytest.mark.slow
def test_in_a_browser_the_findings_margins_change_exactly_the_verdicts_python_computes():
    """The Findings page's margin slider, moved to each position in the browser, shows for every
    row the verdict that :func:`itlin.book.findings.at_margins` computes from the same records."""
    import browser
    from selenium.webdriver.common.by import By

    from itlin.book import findings as F

    if "html" not in BUILT:
        pytest.fail("the book was not built (the build test above failed or did not run)")
    rows = F.as_json(F.findings())
    with browser.serve(BUILT["html"]) as base, browser.browser() as driver:
        browser.open_page(driver, f"{base}/book/findings.html")
        (demo,) = driver.find_elements(By.CSS_SELECTOR, "div.itlin-static-demo")
        (slider,) = demo.find_elements(By.CSS_SELECTOR, "input[type=range]")
        assert int(slider.get_attribute("max")) + 1 == len(F.DEMO_FACTORS)
        changed = set()
        for i, factor in enumerate(F.DEMO_FACTORS):
            browser.set_slider(driver, slider, i)
            shown = [r["verdict"] for r in browser.frame_table(driver, demo)]
            expected = [r["at_margins"][f"{factor:g}"] for r in rows]
            assert shown == expected, (factor, [(r["id"], a, b) for r, a, b in zip(rows, shown, expected) if a != b])
            text = browser.frame_text(driver, demo)
            for word, n in ((V.HOLDS, expected.count(V.HOLDS)), (V.UNRESOLVED, expected.count(V.UNRESOLVED))):
                assert f"{n} {'hold' if word == V.HOLDS else 'cannot resolve'}" in text, (factor, text)
            changed |= {r["id"] for r, e in zip(rows, expected) if e != r["verdict"]}
        assert changed, "no margin changed any verdict: the slider shows nothing"


def test_papermill_parses_every_parameters_cell_without_warnings(caplog):
    """papermill's own parser (used for ``-p`` and the injected cell) must see exactly the names
    the chapter assigns, with no 'Unable to parse line' warnings (e.g. from quotes in comments)."""
    from papermill.translators import PythonTranslator

    for chapter in CHAPTERS:
        src = ROOT / (chapter + ".md")
        caplog.clear()
        with caplog.at_level("WARNING"):
            names = [p.name for p in PythonTranslator.inspect(parameters_cell(_read(src)))]
        assert not caplog.records, (chapter, [r.getMessage() for r in caplog.records])
        assert names == list(chapter_parameters(src)), chapter


def _execute_with_plain_papermill(chapter, out, params, tmp_path):
    """What a user does without itlin's wrapper: jupytext to .ipynb, then papermill's command
    line, from the repository root (no unknown or unparsable parameters either)."""
    nb_in = tmp_path / (Path(chapter).name + ".ipynb")
    out.parent.mkdir(parents=True, exist_ok=True)  # papermill does not make it
    subprocess.run([sys.executable, "-m", "jupytext", "--to", "notebook", "-o", str(nb_in), f"{chapter}.md"],
                   cwd=ROOT, check=True, capture_output=True)
    args = [a for k, v in params.items() for a in ("-p", k, str(v))]
    proc = subprocess.run([sys.executable, "-m", "papermill", str(nb_in), str(out), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Passed unknown parameter" not in proc.stderr and "Unable to parse" not in proc.stderr


def test_file_opening_chapters_run_under_plain_papermill():
    """The chapters whose tiny-scale execution goes through papermill's command line (above):
    every kind of file kept with the book is opened by at least one of them."""
    plain = [c for c in CHAPTERS if _opens_files(c)]
    text = "".join(_chapter_text(c) for c in plain)
    assert plain and all(s in text for s in ("open_record", "open_records", "recorded_dir", "benchmarks/results"))


def test_rerun_cli_turns_a_rejected_value_into_one_line_and_no_notebook(tmp_path):
    out = tmp_path / "out.ipynb"
    cmd = [sys.executable, "-m", "itlin.book.run", "book/k_sweeps.md", str(out), "-p", "scale", "tiny",
           "-p", "seeds", "0"]
    env = dict(os.environ, ITLIN_RESULTS=str(tmp_path / "results"))
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert lines == ["error: seeds must be >= 1, got 0."], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and not out.exists()


def test_rerun_cli_rejects_unknown_parameters_and_lists_known_ones(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    rc = run_main(["book/intro.md", str(tmp_path / "out.ipynb"), "-p", "sead", "1"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "intro.md has no parameter(s) 'sead'" in err and "its parameters are: seed" in err
    assert run_main(["book/intro.md", "--list"]) == 0
    assert "seed = 0" in capsys.readouterr().out
    assert run_main(["book/nope.md", str(tmp_path / "o.ipynb")]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.slow
def test_rerun_cli_executes_a_chapter_with_other_parameters(tmp_path, monkeypatch):
    monkeypatch.setenv("ITLIN_RESULTS", str(tmp_path / "results"))
    out = tmp_path / "intro.ipynb"
    cmd = [sys.executable, "-m", "itlin.book.run", "book/intro.md", str(out), "-p", "seed", "3"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    nb = nbformat.read(out, as_version=4)
    injected = [c for c in nb.cells if "injected-parameters" in c.get("metadata", {}).get("tags", [])]
    assert injected and "seed = 3" in injected[0].source
    text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    assert "feature updates" in text
