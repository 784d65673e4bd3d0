"""Recorded runs as netCDF-4 files (itlin.book.opendata): every array and record field comes back
exactly (oracle: the arrays given, compared bit for bit), the one documented exception (long
per-step losses kept as block means) is exactly those means, damage is caught, and the schema's
loading example in book/recorded/README.md runs with xarray alone."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from itlin import _io
from itlin.book import opendata, runner
from itlin.book.store import record_digest

ROOT = Path(__file__).resolve().parents[1]


def _part(runs: dict, extra: dict, *, name: str = "", seed: int = 0, seeds: int = 1) -> opendata.Part:
    """A part as the runner stores it: ``runs`` maps a tag to ``(loss, evals, correct bits)``."""
    tree = {"_fits": {}, **extra}
    meta_runs, summaries = {}, {}
    for tag, (loss, acc, bits) in runs.items():
        tree["_fits"][tag] = {"loss": loss, "loss_pending": np.zeros(0), "eval/test/accuracy": acc,
                              "relin_steps": np.arange(1, len(loss) + 1, dtype=np.int64)}
        summaries[tag] = {"status": "completed", "diverged_at": None, "loss_every": 1, "steps": len(loss)}
        meta_runs[tag] = {"final_correct": base64.b64encode(np.packbits(bits).tobytes()).decode("ascii"),
                          "final_test": float(np.mean(bits))}
    flat, paths = _io.flatten_tree(tree)
    info = {"experiment": "toy", "version": "1", "params": {"seed": seed}, "status": "completed", "runs": summaries,
            "meta": {"resolved": {"seed": seed, "seeds": seeds}, "runs": meta_runs}, "git_commit": "abc",
            "device": "cpu", "wall_seconds": 1.5}
    info["record_sha256"] = record_digest(info)
    return opendata.Part(flat, paths, info, name)


def _same(a: opendata.Part, b: opendata.Part):
    assert a.paths == b.paths and a.name == b.name
    assert set(a.arrays) == set(b.arrays)
    for k in a.arrays:
        x, y = np.asarray(a.arrays[k]), np.asarray(b.arrays[k])
        assert x.dtype == y.dtype and x.shape == y.shape, k
        assert x.tobytes() == y.tobytes(), k  # bit for bit, NaNs included
    assert json.dumps(a.info, sort_keys=True) == json.dumps(b.info, sort_keys=True)


_floats = st.floats(allow_nan=True, allow_infinity=True, width=64)


@st.composite
def _parts(draw):
    """One to three parts of runs tagged ``K=<k> seed=<s>``: curves of several lengths (a run that
    stopped early), settings missing in some parts, two parts that share a tag, per-example bits."""
    n_parts = draw(st.integers(1, 3))
    share = draw(st.booleans())
    out = []
    for p in range(n_parts):
        runs = {}
        seeds = [0] if share else [10 * p + i for i in range(draw(st.integers(1, 3)))]
        for seed in seeds:
            for K in draw(st.lists(st.sampled_from(["1", "8", "inf", "1e-3"]), min_size=1, max_size=3, unique=True)):
                n = draw(st.integers(0, 12))
                loss = np.asarray(draw(st.lists(_floats, min_size=n, max_size=n)), np.float64)
                acc = np.asarray(draw(st.lists(st.floats(0, 1), min_size=3, max_size=3)), np.float64)
                bits = np.asarray(draw(st.lists(st.booleans(), min_size=1, max_size=20)), bool)
                runs[f"full K={K} seed={seed}"] = (loss, acc, bits)
        extra = {"grid": np.asarray(draw(st.lists(st.integers(-5, 5), min_size=2, max_size=2)), np.int64),
                 "flag": np.bool_(draw(st.booleans())), "probe_correct": np.packbits([True, p % 2 == 0])}
        out.append(_part(runs, extra, name=f"seeds-{p}" if n_parts > 1 else "", seed=10 * p))
    return out


@settings(max_examples=30, deadline=None)
@given(_parts())
def test_every_array_and_field_reads_back_exactly(tmp_path_factory, parts):
    path = opendata.write(parts, tmp_path_factory.mktemp("nc") / "record.nc")
    back = opendata.read(path)
    assert len(back) == len(parts)
    for a, b in zip(parts, back):
        _same(a, b)


def test_long_losses_are_kept_as_block_means(tmp_path):
    rng = np.random.default_rng(0)
    n = 2 * opendata.CURVE_POINTS + 7  # blocks of 3: 135 means, the last 1 value left out
    loss = rng.normal(size=n)
    part = _part({"full K=1 seed=0": (loss, np.ones(3), np.ones(4, bool))}, {})
    (back,) = opendata.read(opendata.write([part], tmp_path / "record.nc"))
    m = 3
    want = loss[: n // m * m].reshape(-1, m).mean(axis=1)
    np.testing.assert_array_equal(back.arrays["_fits/full K=1 seed=0/loss"], want)
    assert back.info["runs"]["full K=1 seed=0"]["loss_every"] == m
    assert back.info["thinned_loss"] == {"full K=1 seed=0": [m, n]}
    assert back.info["record_sha256"] == record_digest(back.info)  # renewed: the record still checks
    for key in part.arrays:  # everything else as it was
        if not key.endswith("/loss"):
            assert back.arrays[key].tobytes() == part.arrays[key].tobytes(), key


def test_runs_stack_over_their_settings_with_named_dimensions(tmp_path):
    import xarray as xr

    runs = {f"full K={K} seed={s}": (np.full(4, s + float(K)), np.full(3, 0.5), np.ones(8, bool))
            for K in ("1", "8") for s in (3, 4, 5)}
    path = opendata.write([_part(runs, {})], tmp_path / "record.nc")
    with xr.open_dataset(path) as ds:
        loss = ds["fits_full_loss"]
        assert loss.dims[:2] == ("K", "seed") and loss.attrs["key"] == "_fits/full K={K} seed={seed}/loss"
        assert list(ds["seed"].values) == ["3", "4", "5"] and list(ds["K_value"].values) == [1.0, 8.0]
        np.testing.assert_array_equal(loss.sel(K="8", seed="4").values, np.full(4, 12.0))
        assert ds.attrs["experiment"] == "toy" and json.loads(ds.attrs["resolved_params"]) == {"seed": 0, "seeds": 1}
        bits = ds["bits_full_final_correct"].sel(K="1", seed="3").values
        assert np.unpackbits(bits).tolist() == [1] * 8


def test_a_changed_value_is_caught(tmp_path):
    import h5py

    path = opendata.write([_part({"full K=1 seed=0": (np.arange(5.0), np.ones(3), np.ones(3, bool))}, {})],
                          tmp_path / "record.nc")
    with h5py.File(path, "r+") as h:
        h["fits_full_loss"][..., 2] = 99.0
    with pytest.raises(ValueError, match="do not match their digest"):
        opendata.read(path)


def test_not_a_record_file_is_one_line_error(tmp_path):
    import xarray as xr

    xr.Dataset({"x": ("i", np.arange(3))}).to_netcdf(tmp_path / "other.nc", engine="h5netcdf")
    with pytest.raises(ValueError, match="not an itlin record file") as err:
        opendata.read(tmp_path / "other.nc")
    assert "\n" not in str(err.value)


def test_convert_in_place_keeps_notes_and_opens_like_the_runs(tmp_path):
    rec = runner.run("fig9_damping", {"scale": "tiny"}, results_dir=tmp_path / "results", progress=False,
                     verbose=False)
    folder = tmp_path / "recorded" / "tiny"
    folder.mkdir(parents=True)
    for name in ("record.json", "results.npz", "params.json"):
        (folder / name).write_bytes((rec.path / name).read_bytes())
    (folder / "NOTES.md").write_text("made for a test\n")
    opendata.convert(folder)
    assert sorted(p.name for p in folder.iterdir()) == ["NOTES.md", "record.nc"]
    back = runner.open_record(folder)
    for k, a in rec.arrays.items():
        assert np.asarray(back.arrays[k]).tobytes() == np.asarray(a).tobytes(), k
    assert back.info == rec.info and back.runs == rec.runs


def test_every_record_kept_with_the_book_is_a_record_file():
    folders = [p for p in runner.recorded_dir().iterdir() if p.is_dir()]
    assert folders
    for folder in folders:  # one file, or one per part while a record made in parts is in progress
        assert (folder / opendata.FILE).is_file() or all((p / opendata.FILE).is_file() for p in folder.iterdir()
                                                          if p.is_dir()), folder.name
        assert not list(folder.rglob("results.npz")) and not list(folder.rglob("record.json")), folder.name


def test_loading_example_runs_without_itlin():
    text = (ROOT / "book" / "recorded" / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    assert len([line for line in code.splitlines() if line.strip()]) <= 3
    check = code + "\nimport sys\nassert not any(m == 'itlin' or m.startswith('itlin.') for m in sys.modules)\n"
    out = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip()


def test_parts_kept_one_file_each_join_into_the_file_made_at_once(tmp_path):
    """A record made in parts is kept one record.nc per part while it is made, then joined: the
    joined file holds what a file written from the original parts at once holds, digests of the
    runs as made included, and the parts' files are gone."""
    rng = np.random.default_rng(1)
    parts = [_part({f"full K={K} seed={s}": (rng.normal(size=450), rng.random(3), rng.random(30) > 0.5)
                    for K in ("1", "134") for s in (2 * p, 2 * p + 1)}, {}, name=f"seeds-{2 * p}", seed=2 * p, seeds=2)
             for p in range(3)]
    at_once = opendata.read(opendata.write(parts, tmp_path / "once" / "record.nc"))
    folder = tmp_path / "joined"
    for part in parts:
        opendata.write([part._replace(name="")], folder / part.name / "record.nc")
    (folder / "NOTES.md").write_text("notes\n")
    joined = opendata.read(opendata.convert(folder))
    assert sorted(p.name for p in folder.iterdir()) == ["NOTES.md", "record.nc"]
    assert [p.name for p in joined] == ["seeds-0", "seeds-2", "seeds-4"]
    for a, b in zip(at_once, joined):
        _same(a, b)
        assert a.made == b.made and a.made["content_digest"] == _io.content_digest(*_original(parts, a.name))


def _original(parts, name):
    part = next(p for p in parts if p.name == name)
    return part.arrays, part.paths
