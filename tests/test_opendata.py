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
    """The schema's first example (three lines) and the ones after it, run in order, need xarray alone."""
    text = (ROOT / "book" / "recorded" / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 3 and len([line for line in blocks[0].splitlines() if line.strip()]) <= 3
    check = "\n".join(blocks) + "\nimport sys\nassert not any(m == 'itlin' or m.startswith('itlin.') for m in sys.modules)\n"
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
    # the joined file's settings are the pooled ones: all the seeds of its parts
    for path in (folder / "record.nc", tmp_path / "once" / "record.nc"):
        assert json.loads(opendata.attributes(path)["resolved_params"]) == {"seed": 0, "seeds": 6}


def _original(parts, name):
    part = next(p for p in parts if p.name == name)
    return part.arrays, part.paths


# ---------------------------------------------------------------------------------- per-example results as tallies
@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(2, 30), st.integers(0, 2 ** 32 - 1))
def test_tallies_give_the_paired_noise_of_the_bits(seeds, n, seed):
    """Oracle: the paired noise computed from the per-seed, per-example results themselves."""
    from itlin.book import intervals as I

    rng = np.random.default_rng(seed)
    a = rng.random((seeds, n)) < rng.random(n)
    b = a ^ (rng.random((seeds, n)) < 0.3)
    want = I._paired_noise(a, b)
    for got in (I.tally_noise(I.tally(a, b)), I.tally_noise(I.tally(b, a))):
        assert np.isclose(got[0], want[0], rtol=1e-12, atol=0)
        # the floor is the square root of a difference of two variances: its square is what both
        # compute to rounding, relative to the variance it is taken from (se^2)
        assert abs(got[1] ** 2 - want[1] ** 2) <= 1e-12 * want[0] ** 2


def _seeded_parts(rng, n=40, parts=3, per=2, settings_=("full K=1", "full K=134", "mini K=1")):
    """Parts of runs one per setting and seed, as fit_seeds keeps them (meta names setting and seed)."""
    out = []
    for p in range(parts):
        runs = {}
        for s in range(per * p, per * p + per):
            base = rng.random(n) < 0.7
            for k, setting in enumerate(settings_):
                runs[f"{setting} seed={s}"] = (rng.normal(size=5), rng.random(3), base ^ (rng.random(n) < 0.1 * (k + 1)))
        part = _part(runs, {}, name=f"seeds-{per * p}", seed=per * p, seeds=per)
        part.info["experiment"] = "feature_updates"
        for tag, run in part.info["meta"]["runs"].items():
            run.update(setting=tag.rsplit(" seed=", 1)[0], seed=int(tag.rsplit("=", 1)[1]), n_test_final=n)
        part.info["record_sha256"] = record_digest(part.info)
        out.append(part)
    return out


def _gap_rows(rec, setting):
    from itlin.book.experiments.main._setup import correct_of

    return [{"seed": int(m["seed"]), "setting": m["setting"], "status": rec.runs[tag]["status"],
             "test": float(m["final_test"]), "correct": correct_of(m), "tallies": rec.tallies}
            for tag, m in rec.meta["runs"].items() if m["setting"] == setting]


def test_a_record_kept_as_tallies_judges_as_its_bits(tmp_path):
    """The same parts written with their per-example bits and with tallies give the same gaps,
    paired noise included, in either order; a pool of some parts only is not paired by a tally
    over all of them (it falls back to the unpaired bound, never to a wrong pairing)."""
    from itlin.book.experiments.main._rows import gap_verdict, pool_seeds

    parts = _seeded_parts(np.random.default_rng(3))
    for folder, tally in (("bits", False), ("tallied", True)):
        for part in parts:
            opendata.write([part._replace(name="")], tmp_path / folder / part.name / "record.nc")
        opendata.convert(tmp_path / folder, tally=tally)
    bits, tallied = (runner.open_records(tmp_path / f) for f in ("bits", "tallied"))
    assert bits[0].tallies is None and all(r.tallies is tallied[0].tallies is not None for r in tallied)
    assert not any("final_correct" in m for r in tallied for m in r.meta["runs"].values())
    judge = lambda rec, a, b: gap_verdict("x", "claim", "p", _gap_rows(rec, a), _gap_rows(rec, b), n_test=40,
                                          rule="close", margin=0.02, label_a=a, label_b=b)
    for a, b in (("full K=134", "full K=1"), ("full K=1", "full K=134"), ("mini K=1", "full K=134")):
        want, got = judge(pool_seeds(bits), a, b), judge(pool_seeds(tallied), a, b)
        assert got.verdict == want.verdict and np.isclose(got.mean, want.mean, rtol=1e-12)
        assert np.isclose(got.gap.test_half, want.gap.test_half, rtol=1e-12) and np.isclose(got.half, want.half)
        unpaired = judge(pool_seeds(tallied[:2]), a, b)  # four of the six seeds the tally counts
        assert unpaired.gap.test_half != judge(pool_seeds(bits[:2]), a, b).gap.test_half
        assert np.isclose(unpaired.gap.test_half, opendata_unpaired(pool_seeds(bits[:2]), a, b))
    # what was made stays checkable: each run's packed results as made, by their sha256
    import hashlib

    for part, rec in zip(parts, tallied):
        for tag, run in part.info["meta"]["runs"].items():
            assert rec.info["tallied"]["sha256"][tag] == hashlib.sha256(base64.b64decode(run["final_correct"])).hexdigest()


def opendata_unpaired(rec, a, b):
    """The unpaired bound of the test set's noise for the gap of a and b over their seeds (oracle)."""
    from itlin.book import intervals as I

    ra, rb = _gap_rows(rec, a), _gap_rows(rec, b)
    return I.accuracy_noise(float(np.mean([(x["test"] + y["test"]) / 2 for x, y in zip(ra, rb)])), 40)


def test_tallies_survive_rewriting_and_damage_is_caught(tmp_path):
    import h5py

    parts = _seeded_parts(np.random.default_rng(4), parts=2)
    kept, tallies = opendata.tally_parts(parts)
    with pytest.raises(ValueError, match="tallies"):
        opendata.to_dataset(kept)
    path = opendata.write(kept, tmp_path / "r" / "record.nc", tallies)
    before = opendata.tallies_in(path)
    opendata.convert(tmp_path / "r")  # rewritten in place, without asking for tallies: they stay
    after = opendata.tallies_in(path)
    assert set(after.pairs) == set(before.pairs) == {("full K=1", "full K=134"), ("full K=1", "mini K=1"),
                                                     ("full K=134", "mini K=1")}
    for k in after.pairs:
        assert after.pairs[k][0] == before.pairs[k][0] == (0, 1, 2, 3)
        assert np.array_equal(after.pairs[k][1].a_only, before.pairs[k][1].a_only)
    with h5py.File(path, "r+") as h:
        h["tally_a_only"][0, 0] += 1
    with pytest.raises(ValueError, match="digest"):
        opendata.tallies_in(path)


def test_parts_joined_a_few_at_a_time_give_the_file_joined_at_once(tmp_path):
    """A record made over several sessions can be joined as its parts come: parts added beside
    the joined file are read with it, and joining them again gives what joining every part at
    once gives, the tallies included (their counts add over seeds)."""
    parts = _seeded_parts(np.random.default_rng(5), parts=4)
    for folder, batches in (("once", [parts]), ("steps", [parts[:2], parts[2:3], parts[3:]])):
        for batch in batches:
            for part in batch:
                opendata.write([part._replace(name="")], tmp_path / folder / part.name / "record.nc")
            if folder == "steps" and batch is not batches[0]:
                assert len(runner.open_records(tmp_path / folder)) == sum(len(b) for b in batches[:batches.index(batch) + 1])
            opendata.convert(tmp_path / folder, tally=True)
    once, steps = (opendata.read(tmp_path / f / "record.nc") for f in ("once", "steps"))
    assert [p.name for p in steps] == [p.name for p in once] == ["seeds-0", "seeds-2", "seeds-4", "seeds-6"]
    for a, b in zip(once, steps):
        _same(a, b)
        assert a.made == b.made
    ta, tb = (opendata.tallies_in(tmp_path / f / "record.nc") for f in ("once", "steps"))
    assert opendata._tally_digest(ta) == opendata._tally_digest(tb)
    assert sorted(p.name for p in (tmp_path / "steps").iterdir()) == ["record.nc"]
    with pytest.raises(ValueError, match="seed"):
        opendata.merge_tallies(ta, tb)


def test_an_experiment_that_reads_each_seeds_results_itself_is_not_tallied(tmp_path):
    parts = _seeded_parts(np.random.default_rng(6), parts=1)
    parts[0].info["experiment"] = "adaptive_schedules"
    opendata.write(parts, tmp_path / "r" / "record.nc")
    with pytest.raises(ValueError, match="adaptive_schedules reads each seed's per-example results") as err:
        opendata.convert(tmp_path / "r", tally=True)
    assert "\n" not in str(err.value)
    assert opendata.tallies_in(tmp_path / "r" / "record.nc") is None  # the file there is untouched


# ---------------------------------------------------------------------------------- axis names
def test_every_axis_of_every_record_kept_with_the_book_has_a_name():
    """No array of a record file keeps a generic axis name (``<variable>_dim<i>``), and every
    entry of the axes table names some array (none is out of date)."""
    import xarray as xr
    from fnmatch import fnmatchcase

    from itlin.book import axes

    used = set()
    for path in sorted(runner.recorded_dir().glob("*/record.nc")):
        with xr.open_dataset(path, engine="h5netcdf") as ds:
            experiment = ds.attrs["experiment"]
            for v in ds.data_vars:
                assert not any(re.search(r"_dim\d+$", d) for d in ds[v].dims), (path.parent.name, v, ds[v].dims)
                key = ds[v].attrs.get("key")
                hit = next((p for p, _ in axes.AXES.get(experiment, ()) if key and fnmatchcase(key, p)), None)
                if hit is not None and ds[v].ndim:
                    used.add((experiment, hit))
    assert {(e, p) for e, table in axes.AXES.items() for p, _ in table} - used == set()


@pytest.fixture
def declare():
    """``declare(**fields)``: the toy experiment of :func:`_part` registered with those declarations."""
    from itlin.book import experiments as E

    yield lambda **fields: E.register(E.Experiment("toy", E.Params, lambda p, ctx: {}, **fields), replace=True)
    E.unregister("toy")


def test_an_experiments_axis_names_are_used_and_checked(tmp_path, declare):
    import xarray as xr

    from itlin.book import axes

    part = _part({}, {"grid": np.arange(6.0).reshape(2, 3), "lr": np.asarray([0.1, 0.2])})
    declare(axes=(("grid", ("learning_rate", "seed")), ("lr", ("learning_rate",))))
    assert axes.AXES["toy"] == (("grid", ("learning_rate", "seed")), ("lr", ("learning_rate",)))
    path = opendata.write([part], tmp_path / "a" / "record.nc")
    with xr.open_dataset(path, engine="h5netcdf") as ds:
        assert ds["grid"].dims == ("learning_rate", "seed") and ds["lr"].dims == ("learning_rate",)
    _same(opendata.read(path)[0], part)
    declare(axes=(("grid", ("lr", "seed")),))  # "lr" is a variable of the record
    with pytest.raises(ValueError, match="name it otherwise"):
        opendata.write([part], tmp_path / "b" / "record.nc")
    declare(axes=(("grid", ("seed",)),))  # out of date with the array
    with pytest.raises(ValueError, match="update its axes declaration"):
        opendata.write([part], tmp_path / "c" / "record.nc")
    declare()  # an experiment that names no axes: generic names
    with xr.open_dataset(opendata.write([part], tmp_path / "d" / "record.nc"), engine="h5netcdf") as ds:
        assert ds["grid"].dims == ("grid_dim0", "grid_dim1") and "toy" not in axes.AXES


@pytest.mark.parametrize("fields, why", [
    (dict(axes=(("grid", "seed"),)), "axes must be a tuple of (pattern, (axis name, ...)) entries"),
    (dict(axes="grid"), "axes must be a tuple"), (dict(axes=(("grid", ("",)),)), "axes must be"),
    (dict(axes=(("grid", ("seed",)), ("lr",))), "got ('lr',)"), (dict(tallies=1), "tallies must be True or False"),
    (dict(pool="seeds"), "pool must be callable"),
    (dict(plans={"other-rec": ("abc", "c", True)}), "plans must map record folders named 'toy_decl-...' to plans.Plan"),
    (dict(plans=[("toy_decl-rec", None)]), "plans must map record folders")])
def test_a_declaration_of_another_form_is_refused_in_one_line(fields, why):
    from itlin.book import experiments as E

    with pytest.raises(TypeError, match=re.escape(why)) as err:
        E.Experiment("toy_decl", E.Params, lambda p, ctx: {}, **fields)
    assert "\n" not in str(err.value) and "'toy_decl'" in str(err.value)


def test_tallies_serve_the_experiments_that_declare_them(tmp_path, declare):
    parts = [_part({"full K=1 seed=0": (np.ones(3), np.ones(3), np.ones(4, bool))}, {})]
    parts[0].info["meta"]["runs"]["full K=1 seed=0"].update(setting="K=1", seed=0, n_test_final=4)
    with pytest.raises(ValueError, match="toy reads each seed's per-example results itself"):
        opendata.tally_parts(parts)
    declare(tallies=True)
    assert "toy" in opendata.TALLY_READERS and opendata.tally_parts(parts)[1] is None  # one setting: nothing to pair
