"""Open data without itlin: the record files say what decides each headline claim
(itlin.book.decides, opendata.set_attributes), and book/recorded/recompute.py, run where only
the packages book/recorded/README.md names are installed, finds every headline gap and
half-width that itlin does."""

import importlib.util
import json
import math
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

from itlin.book import decides, opendata

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "book" / "recorded" / "recompute.py"
README = ROOT / "book" / "recorded" / "README.md"


def _script():
    spec = importlib.util.spec_from_file_location("recompute", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _named_packages() -> list:
    """The packages the README tells a reader to install (its ``pip install`` line)."""
    line = re.search(r"^pip install ([\w .-]+)$", README.read_text(), re.M)
    assert line, "book/recorded/README.md lost its pip install line"
    return line.group(1).split()


def _closure(names) -> dict:
    """Those distributions and everything they require (markers evaluated here, no extras)."""
    from packaging.requirements import Requirement

    seen, todo = {}, list(names)
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in seen:
            continue
        dist = seen[name] = metadata.distribution(name)
        for text in dist.requires or ():
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def _clean_python(where: Path) -> Path:
    """A Python whose only packages are the README's and what they require: a venv without pip,
    whose site-packages holds links to those distributions' files alone (not itlin, not jax)."""
    venv = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    for dist in _closure(_named_packages()).values():
        for top in {Path(str(f)).parts[0] for f in dist.files or ()} - {"..", "__pycache__"}:
            src = Path(dist.locate_file(top))
            if src.exists() and not (site / top).exists():
                (site / top).symlink_to(src)
    return python


@pytest.mark.slow
def test_the_script_recomputes_every_headline_gap_without_itlin(tmp_path):
    from itlin.book import findings as F

    python = _clean_python(tmp_path)
    no_itlin = subprocess.run([str(python), "-I", "-c", "import itlin"], capture_output=True, text=True, cwd=tmp_path)
    assert no_itlin.returncode != 0 and "No module named 'itlin'" in no_itlin.stderr
    run = lambda *args: subprocess.run([str(python), "-I", str(SCRIPT), *args], capture_output=True,  # noqa: E731
                                       text=True, cwd=tmp_path, timeout=1200)
    out = run("--all")
    assert out.returncode == 0, out.stderr
    every = json.loads(out.stdout)
    found = F.findings(cached=True)
    rows = {r["id"]: r for r in F.as_json(found)}
    got = {row: r for r in every for row in r["decides"]}
    # every headline row that is a test of a gap is recomputed, and no other
    assert set(got) == {k for k, r in rows.items() if r["gap"] is not None}
    def same(x, y) -> float:  # how far apart; a number not finite is null in JSON and matches only that
        if y is None or not math.isfinite(y):
            assert x is None, (x, y)
            return 0.0
        assert x is not None and abs(x - y) <= 1e-6, (x, y)
        return abs(x - y)

    worst = 0.0
    for key, r in got.items():
        assert r["level"] == rows[key]["level"], key
        worst = max(worst, same(r["gap"], rows[key]["gap"]), same(r["half_width"], rows[key]["half_width"]))
    # and the records judged beside them, claim by claim
    beside = {(name, claim): v for f in found for name, claim, v in f.others if v is not None and not isinstance(v, str)}
    checked = 0
    for r in every:
        if r["beside"] and (r["file"], r["claim"]) in beside:
            v = beside[(r["file"], r["claim"])]
            assert r["level"] == v.level, (r["file"], r["claim"])
            worst = max(worst, same(r["gap"], v.mean), same(r["half_width"], v.half))
            checked += 1
    assert checked >= 20
    # and every part of a row judged on several settings (its verdict is their conjunction)
    parts = {(p["record"], p["claim"], key): p for key, r in rows.items() for p in r.get("parts", ())}
    recomputed = {(r["file"], r["claim"], key): r for r in every for key in r["part_of"]}
    assert set(recomputed) == {k for k, p in parts.items() if p["gap"] is not None}
    for k, r in recomputed.items():
        assert r["level"] == parts[k]["level"], k
        worst = max(worst, same(r["gap"], parts[k]["gap"]), same(r["half_width"], parts[k]["half_width"]))
    print(f"largest difference from itlin's gaps and half-widths: {worst:.2g}")
    # the README's table is the files' own
    table = run("--table")
    assert table.returncode == 0 and table.stdout.strip() in README.read_text(), \
        "book/recorded/README.md's table differs from the files': paste python book/recorded/recompute.py --table"
    # the plain command prints the rows the Findings print
    plain = json.loads(run().stdout)
    assert sorted(r["id"] for r in plain) == sorted(got) and all(set(r) == {"id", "gap", "half_width"} for r in plain)


def test_every_claim_a_record_describes_is_one_the_findings_read_there():
    """Each description names the Findings rows that read it on that record, the variables it
    reads and expressions that parse (the slow test above checks that they give itlin's numbers)."""
    from itlin.book.findings import HEADLINES

    script = _script()
    rows = {h.key: h for h in HEADLINES}
    described = 0
    for name in decides.recorded_names():
        for cid, c in script.claims_of(ROOT / "book" / "recorded" / name / "record.nc"):
            described += 1
            assert c["variables"] and c["formula"] and c["statistic"] in script.STATISTICS
            assert 0.95 <= c["level"] < 1 and c["rule"] in ("exceeds", "not_worse", "close")
            for key in c["decides"]:
                assert (rows[key].record, rows[key].claim) == (name, cid)
            for key in c["beside"]:
                assert (name, cid) in rows[key].other_claims
            for key in c.get("part_of", []):
                assert (name, cid) in rows[key].parts
            for text in [c.get(k) for k in ("a", "b", "keep", "values", "reducer", "reading")] + list(
                    c.get("define", {}).values()):
                if text:
                    compile(text, "<claim>", "eval")
    assert described >= len(HEADLINES)


def test_a_pooled_file_carries_the_pooled_settings():
    for name in decides.recorded_names():
        path = ROOT / "book" / "recorded" / name / "record.nc"
        attrs = opendata.attributes(path)
        if attrs["parts"] > 1:
            import xarray as xr

            with xr.open_dataset(path, engine="h5netcdf") as ds:
                total = int(ds["part_seeds"].sum())
            assert json.loads(attrs["resolved_params"])["seeds"] == total, name


def test_expressions_call_nothing_but_the_vocabulary():
    script = _script()
    for text in ("var.__class__", "__import__('os')", "open('x')", "(lambda: 1)()", "[x for x in var]"):
        with pytest.raises(ValueError):
            script.evaluate(text, dict(script.FUNCTIONS, var=lambda n: n))
    assert script.evaluate("sum(where(isnan(x), 0, x))", dict(script.FUNCTIONS, x=np.array([1.0, np.nan]))) == 1.0


def test_set_attributes_changes_the_attributes_alone(tmp_path):
    src = ROOT / "book" / "recorded" / "fig3_augmentation-mnist1d-10seeds" / "record.nc"
    path = tmp_path / "record.nc"
    path.write_bytes(src.read_bytes())
    before = opendata.read(path)
    opendata.set_attributes(path, {"claim.x": "1", "claim.y": "2", "note": "n"}, drop_prefix="claim.")
    opendata.set_attributes(path, {"claim.y": "3"}, drop_prefix="claim.")
    attrs = opendata.attributes(path)
    assert attrs["claim.y"] == "3" and "claim.x" not in attrs and attrs["note"] == "n"
    assert attrs["experiment"] == opendata.attributes(src)["experiment"]
    for a, b in zip(before, opendata.read(path), strict=True):  # read checks the digests too
        assert a.info == b.info and all(np.array_equal(a.arrays[k], b.arrays[k], equal_nan=a.arrays[k].dtype.kind == "f")
                                        for k in a.arrays)
