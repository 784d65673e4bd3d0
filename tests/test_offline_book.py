"""The book as its readers get it: maths served from the site, complete author-year citations,
and the executed notebook in the download menu.

The slow test builds a one-page throw-away Jupyter Book with the repository's _config.yml
(execution off), its references.bib and its local Sphinx extension, then reads the HTML:

* no page loads MathJax (or a polyfill) from a CDN, and the MathJax script a page loads exists in
  the built site together with its fonts, so equations typeset without a network; the page still
  carries the ``\\R`` and ``\\flin`` macros;
* the bibliography is labelled author-year ("Goldwaser and Ge, 2023"), like the citations, and has
  no "n.d.";
* the download menu offers the page's ``.ipynb`` and the file is there;
* with a headless Chromium (if installed), MathJax typesets every equation with no network.
"""

import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import nbformat
import pytest
import yaml
from pybtex.database import parse_file

ROOT = Path(__file__).resolve().parents[1]

PAGE = r"""---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# Maths offline

Inline $x \in \R^d$, and the linearisation on display:

$$
\flin_{\theta_0}(x; \theta) = f(x; \theta_0) + \nabla_\theta f(x; \theta_0)^\top (\theta - \theta_0)
$$ (eq-flin)

```{math}
:label: eq-gn
\theta_{t+1} = \theta_t - \eta \left(J^\top J + \lambda I\right)^{-1} J^\top (f - y), \qquad J \in \R^{n \times p}
```

Iterative linearisation {cite}`goldwaser_iterative`, stated by {cite:t}`goldwaser_iterative`,
interpolates towards the kernel regime {cite}`jacot2018ntk,lee2019wide`; see {eq}`eq-flin`.

```{code-cell} python
print("hello from the notebook")
```

## References

```{bibliography}
:all:
```
"""

# "[Goldwaser and Ge, 2023]", "[Jacot et al., 2018]", "[Greydanus, 2020]" (a, b, ... if equal)
AUTHOR_YEAR_LABEL = re.compile(r"^\w[\w\s.'-]*(?: and [\w\s.'-]+| et al\.)?, \d{4}[a-z]?$")


def _script_srcs(html: str) -> list[str]:
    return re.findall(r"<script\b[^>]*\bsrc=[\"']([^\"']+)[\"']", html)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    src = tmp_path_factory.mktemp("offline_book")
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    config["execute"]["execute_notebooks"] = "off"
    (src / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    for bib in config.get("bibtex_bibfiles", []):
        shutil.copy(ROOT / bib, src / bib)
    # local Sphinx extensions the config names (a module file or a package, under its path)
    for name, rel in ((config.get("sphinx") or {}).get("local_extensions") or {}).items():
        for cand in (ROOT / rel / f"{name}.py", ROOT / rel / name):
            dest = src / rel / cand.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            if cand.is_file():
                shutil.copy(cand, dest)
            elif cand.is_dir():
                shutil.copytree(cand, dest, ignore=shutil.ignore_patterns("__pycache__"))
    (src / "_toc.yml").write_text("format: jb-book\nroot: maths\n")
    (src / "maths.md").write_text(PAGE)
    exe = Path(sys.executable).with_name("jupyter-book")
    cmd = [str(exe) if exe.exists() else "jupyter-book", "build", str(src), "-W", "-n", "--keep-going"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return src / "_build" / "html"


@pytest.mark.slow
def test_mathjax_is_served_by_the_site_not_a_cdn(site):
    pages = sorted(site.rglob("*.html"))
    assert pages
    for page in pages:
        for src in _script_srcs(page.read_text(encoding="utf8")):
            if re.search(r"mathjax|polyfill", src, re.I):
                assert not re.match(r"^(?:[a-z][a-z0-9+.-]*:)?//", src, re.I), f"{page.name} loads {src}"
    page = site / "maths.html"
    html = page.read_text(encoding="utf8")
    mathjax = [s for s in _script_srcs(html) if "mathjax" in s.lower()]
    assert len(mathjax) == 1, mathjax
    script = (page.parent / unquote(urlsplit(mathjax[0]).path)).resolve()
    assert script.is_file() and script.stat().st_size > 100_000, script
    # CHTML output fetches its fonts relative to the script: they must be in the site too
    assert list(script.parent.rglob("*.woff")), f"no MathJax fonts under {script.parent}"
    # the book's macros reach MathJax, and the maths is left for MathJax to typeset
    config = re.search(r"window\.MathJax\s*=\s*(\{.*?\})\s*</script>", html, re.S)
    assert config and '"flin"' in config.group(1) and '"R"' in config.group(1)
    assert r"\flin" in html and r"\R" in html


def _chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.slow
@pytest.mark.skipif(_chromium() is None, reason="needs a headless Chromium (Debian package 'chromium')")
def test_equations_typeset_in_a_headless_browser_with_no_network(site, tmp_path):
    """The page as a reader's browser shows it: MathJax runs from the site (file://, and the
    browser is given no network) and typesets every equation, the book's macros included."""
    cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           f"--user-data-dir={tmp_path / 'profile'}", "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
           "--virtual-time-budget=20000", "--dump-dom", (site / "maths.html").as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    dom = proc.stdout
    assert proc.returncode == 0 and "<body" in dom, proc.stderr[-2000:]
    typeset = re.findall(r"<mjx-container\b[^>]*>", dom)
    assert len(typeset) >= 3, f"MathJax typeset {len(typeset)} equations; raw TeX left on the page"
    assert sum('display="true"' in tag for tag in typeset) >= 2  # both displayed equations
    # no TeX error, and no undefined macro (MathJax shows one in red): \R and \flin are known
    assert "<mjx-merror" not in dom and 'mathcolor="red"' not in dom, "an equation did not typeset cleanly"


@pytest.mark.slow
def test_bibliography_is_author_year_and_complete(site):
    html = (site / "maths.html").read_text(encoding="utf8")
    labels = re.findall(r'<span class="label"><span class="fn-bracket">\[</span>(.*?)<span class="fn-bracket">\]</span>', html)
    assert labels, "no bibliography labels found"
    text = [re.sub(r"<[^>]+>", "", label).strip() for label in labels]
    assert all(AUTHOR_YEAR_LABEL.match(t) for t in text), text
    assert "Goldwaser and Ge, 2023" in text and "Jacot et al., 2018" in text
    assert "n.d." not in re.sub(r"<[^>]+>", "", html)
    # the citations in the text read the same way
    assert "Goldwaser and Ge" in html and "2211.12345" in html


@pytest.mark.slow
def test_download_menu_offers_the_notebook(site):
    html = (site / "maths.html").read_text(encoding="utf8")
    links = re.findall(r'href="([^"]*_sources/maths\.ipynb)"', html)
    assert links, "no .ipynb in the download menu"
    notebook = (site / links[0]).resolve()
    assert notebook.is_file()
    nb = nbformat.read(notebook, as_version=4)
    assert any("hello from the notebook" in c.source for c in nb.cells if c.cell_type == "code")
    assert re.search(r'href="[^"]*_sources/maths\.md"', html), "the .md source is offered too"


def test_every_reference_has_a_year_and_a_venue_and_is_cited():
    bib = parse_file(ROOT / "references.bib")
    cited = " ".join(p.read_text(encoding="utf8") for p in (ROOT / "book").glob("*.md"))
    for key, entry in bib.entries.items():
        year = entry.fields.get("year", "")
        assert re.fullmatch(r"\d{4}", year), f"{key}: year {year!r}"
        venue = " ".join(entry.fields.get(f, "") for f in ("journal", "booktitle", "eprint", "howpublished"))
        assert venue.strip(), f"{key}: no venue or arXiv id"
        if "arxiv" in venue.lower():
            assert re.search(r"\d{4}\.\d{4,5}", venue), f"{key}: arXiv without an id"
        assert key in cited, f"{key} is cited by no chapter"
