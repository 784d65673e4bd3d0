"""The 'Adding an experiment' page (book/adding_an_experiment.md), followed as written in a copy of
the repository, adds a working experiment by touching four files: the module, the test, the
chapter and ``_toc.yml``. Each block is written as the file it names and runs on its own (its own
imports; the chapter in its own kernel), in a fresh process, under an experiment name that is no
experiment of the repository (the guide's own name could be one, once someone has followed it)."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "book" / "adding_an_experiment.md"
GUIDE_NAME = "toy_quintic_k"  # the experiment's name on the page
NAME = "guide_check_quintic_k"  # the name it runs under here


def blocks(name: str = GUIDE_NAME) -> dict:
    """``{kind: (path, source)}`` of the page's blocks, the experiment named ``name``: those whose
    first line is ``# guide: <kind> (<path>)``, and the chapter (the block that is a MyST notebook,
    its path the one the toc block lists)."""
    text = PAGE.read_text().replace(GUIDE_NAME, name)
    out = {}
    for body in re.findall(r"^```(?:python|yaml)\n(.*?)^```$", text, flags=re.S | re.M):
        m = re.match(r"# guide: (\w+) \(([^)]+)\)\n", body)
        if m:
            out[m.group(1)] = (m.group(2), body)
    chapters = [b for b in re.findall(r"^````md\n(.*?)^````$", text, flags=re.S | re.M) if b.startswith("---\n")]
    toc = re.search(r"- file: (\S+)", out["toc"][1]).group(1) if "toc" in out else "?"
    out.update({"chapter": (f"{toc}.md", chapters[0])} if len(chapters) == 1 else {})
    return out


def test_the_page_has_every_block_the_copy_needs_and_each_names_its_file():
    b = blocks()
    assert set(b) == {"module", "test", "chapter", "toc"}
    assert [p for p, _ in b.values()] == [f"itlin/book/experiments/main/{GUIDE_NAME}.py", f"tests/test_{GUIDE_NAME}.py",
                                          "_toc.yml", f"book/{GUIDE_NAME}.md"]
    assert "itlin.book.setup()" in b["chapter"][1] and ":tags: [parameters]" in b["chapter"][1]
    assert f'NAME = "{GUIDE_NAME}"' in b["module"][1]  # the experiment is named after its module


def _follow(copy: Path) -> list:
    """Write the page's blocks into ``copy`` as a newcomer does; the files touched."""
    b = blocks(NAME)
    for kind in ("module", "test", "chapter"):
        path, source = b[kind]
        (copy / path).write_text(source)
    caption = re.search(r"caption: (.+)", b["toc"][1]).group(1).strip()
    toc = yaml.safe_load((copy / "_toc.yml").read_text())
    (part,) = [p for p in toc["parts"] if p["caption"] == caption]
    part["chapters"].append({"file": re.search(r"- file: (\S+)", b["toc"][1]).group(1)})
    (copy / "_toc.yml").write_text(yaml.safe_dump(toc, sort_keys=False, allow_unicode=True))
    return sorted(path for path, _ in b.values())


@pytest.mark.slow
def test_the_guide_followed_in_a_copy_adds_a_working_experiment(tmp_path):
    import xarray as xr

    assert not list((ROOT / "itlin" / "book" / "experiments").rglob(f"{NAME}.py"))  # a name nothing has
    copy = tmp_path / "repo"
    tracked = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for rel in tracked:
        if not rel.startswith("book/recorded/") and (ROOT / rel).is_file():
            (copy / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, copy / rel)
    touched = _follow(copy)
    assert len(touched) == 4, touched
    results = tmp_path / "results"
    env = {**os.environ, "PYTHONPATH": str(copy), "ITLIN_RESULTS": str(results), "MPLBACKEND": "Agg",
           "ITLIN_QUIET": "1"}

    def sh(*args):
        out = subprocess.run([sys.executable, *args], cwd=copy, env=env, capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, (args, out.stdout[-3000:], out.stderr[-3000:])
        return out

    # the page's test file, and the book's checks of a chapter (front matter, one parameters cell at
    # the experiment's defaults, listed in _toc.yml)
    sh("-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", f"tests/test_{NAME}.py",
       "tests/test_book.py::test_every_chapter_is_a_paired_myst_notebook_with_one_parameters_cell",
       f"tests/test_book.py::test_parameters_cell_defaults_equal_the_experiments[book/{NAME}]")
    # the chapter executes, as a reader runs it
    sh("-m", "itlin.book.run", f"book/{NAME}.md", str(tmp_path / "out.ipynb"), "-p", "scale", "tiny")
    notebook = (tmp_path / "out.ipynb").read_text()
    assert '"output_type": "error"' not in notebook and "Judged on this page's run" in notebook
    # section 5: the run converts into a record file whose own axes are named by the declaration
    (run,) = [p.parent for p in (results / NAME).glob("*/record.json")]
    sh("-m", "itlin.book.opendata", str(run), f"book/recorded/{NAME}-tiny")
    with xr.open_dataset(copy / "book" / "recorded" / f"{NAME}-tiny" / "record.nc", engine="h5netcdf") as ds:
        assert ds["K1"].dims == ds["inf"].dims == ("seed_index",)
        assert not [d for d in ds.dims if re.search(r"_dim\d+$", str(d))], list(ds.dims)
