"""Issue 59: records that cannot be lost or damaged silently, round three of bad inputs. One test per
class of the issue's probes: each ends in the right answer (checked), or in a one-line error that
names the file or argument and the fix, raised before any work and before any file changes. The
hypothesis properties of joining parts are at the end."""

from __future__ import annotations

import base64

import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import itlin


def _one_line(excinfo):
    msg = str(excinfo.value)
    assert msg and "\n" not in msg, msg
    return msg


lin = lambda p, x: x @ p  # noqa: E731
X, Y = jnp.eye(2), jnp.ones(2)


# ------------------------------------------------------------------------------ arguments taken without a word
def test_ntk_fn_with_the_primal_form_is_refused_and_kept_by_the_kernel_form():
    kernel = lambda p, x: x @ x.T  # noqa: E731 - the NTK of x @ p, in closed form
    for call in (itlin.gauss_newton_step, itlin.gauss_newton_direction):
        with pytest.raises(ValueError, match="ntk_fn is used by the kernel form only") as e:
            call(lin, jnp.zeros(2), X, Y, form=itlin.PrimalForm(), ntk_fn=kernel)
        _one_line(e)
    with pytest.raises(ValueError, match="drop ntk_fn or pass form=KernelForm"):
        itlin.gauss_newton_fit(lin, jnp.zeros(2), X, Y, 3, method="primal", ntk_fn=kernel)
    with pytest.raises(TypeError, match="ntk_fn must be a function"):
        itlin.gauss_newton_step(lin, jnp.zeros(2), X, Y, ntk_fn="closed form")
    # the kernel form uses it: the undamped step is J^T K^+ g, so a kernel twice as large halves it
    p1, _ = itlin.gauss_newton_step(lin, jnp.zeros(2), X, Y, ntk_fn=kernel)
    p2, _ = itlin.gauss_newton_step(lin, jnp.zeros(2), X, Y, ntk_fn=lambda p, x: 2.0 * x @ x.T)
    np.testing.assert_allclose(np.asarray(p2), 0.5 * np.asarray(p1), rtol=1e-6)


def test_an_old_diverged_status_reads_the_same_in_the_record_and_its_history():
    from pathlib import Path

    from itlin.book.experiments.main._rows import run_summary
    from itlin.book.store import Record, run_status

    runs = {"old K=1 seed=0": {"status": "diverged at step 5", "loss_every": 1, "steps": 5, "feature_updates": 5},
            "new K=1 seed=1": {"status": "diverged", "diverged_at": 7, "loss_every": 1, "steps": 7,
                               "feature_updates": 7},
            "done K=1 seed=2": {"status": "completed", "diverged_at": None, "loss_every": 1, "steps": 9,
                                "feature_updates": 9}}
    rec = Record("x", {}, "x", Path("."), {}, [], {"runs": runs})
    assert rec.diverged
    for tag, at in (("old K=1 seed=0", 5), ("new K=1 seed=1", 7), ("done K=1 seed=2", None)):
        h = rec.history(tag)
        assert run_status(runs[tag]) == (h.status, h.diverged_at) == ("completed" if at is None else "diverged", at)
        row = run_summary(rec, tag)
        assert row["diverged_at"] == at and row["status"] == h.describe()
    only_old = Record("x", {}, "x", Path("."), {}, [], {"runs": {"a": runs["old K=1 seed=0"]}})
    assert only_old.diverged and only_old.history("a").diverged


# ------------------------------------------------------------------------------ sizes that exhaust memory
def test_a_gauss_newton_trace_too_large_for_memory_is_refused_before_allocation(monkeypatch):
    monkeypatch.delenv("ITLIN_MEMORY_LIMIT", raising=False)
    with pytest.raises(ValueError, match=r"gauss_newton_fit \(1,000,000,000,000 steps' trace of losses, 4\.0 TB") as e:
        itlin.gauss_newton_fit(lin, jnp.zeros(2), X, Y, 10 ** 12)
    assert "steps per call" in _one_line(e)
    monkeypatch.setenv("ITLIN_MEMORY_LIMIT", "1k")  # the user's limit: 1000 steps of float32 need 4 kB
    with pytest.raises(ValueError, match=r"more than the 1\.0 kB of ITLIN_MEMORY_LIMIT; run at most 246 steps per call"):
        itlin.gauss_newton_fit(lin, jnp.zeros(2), X, Y, 1000)
    _, trace = itlin.gauss_newton_fit(lin, jnp.zeros(2), X, Y, 200, tol=1e-12)  # 800 bytes fit
    assert int(trace.steps) == 1
    monkeypatch.setenv("ITLIN_MEMORY_LIMIT", "inf")  # no check; the int32 step counter still bounds a call
    with pytest.raises(ValueError, match="more than the int32 step counter counts"):
        itlin.gauss_newton_fit(lin, jnp.zeros(2), X, Y, 2 ** 31)
    monkeypatch.setenv("ITLIN_MEMORY_LIMIT", "lots")
    with pytest.raises(ValueError, match="ITLIN_MEMORY_LIMIT='lots' is not a number of bytes"):
        itlin.gauss_newton_fit(lin, jnp.zeros(2), X, Y, 10)


def test_a_fit_whose_history_cannot_fit_is_refused_before_the_first_step(monkeypatch):
    monkeypatch.delenv("ITLIN_MEMORY_LIMIT", raising=False)
    tr = itlin.iterative_linearisation(lin, optax.sgd(0.5), 1, loss="squared")
    state = tr.init(jnp.zeros(2))
    monkeypatch.setattr("itlin.core._memory._physical", lambda: 16e9)  # a 16 GB machine
    with pytest.raises(ValueError, match=r"fit's History \(2,147,483,647 training losses at loss_every=1") as e:
        itlin.fit(tr, state, X, Y, 2 ** 31 - 1, loss_every=1)
    assert "raise loss_every and eval_every" in _one_line(e)
    monkeypatch.setenv("ITLIN_MEMORY_LIMIT", "8k")
    with pytest.raises(ValueError, match="more than the 8.0 kB of ITLIN_MEMORY_LIMIT"):
        itlin.fit(tr, state, X, Y, 100, loss_every=1, eval_every=1, eval_sets={"train": (X, Y)})
    res = itlin.fit(tr, state, X, Y, 100, loss_every=10, eval_every=50)  # 10 losses, 4 evaluations: 0.5 kB
    assert res.status == "completed" and len(res.history.loss) == 10


def test_a_sweep_whose_outputs_cannot_fit_is_refused_with_the_chunk_that_fits(monkeypatch):
    monkeypatch.delenv("ITLIN_MEMORY_LIMIT", raising=False)
    monkeypatch.setattr("itlin.core._memory._physical", lambda: 128e9)  # a 128 GB machine
    fn = lambda p: jnp.zeros(10 ** 5) * p["a"]  # noqa: E731 - 400 kB of outputs a point
    with pytest.raises(ValueError, match=r"sweep's outputs \(1,000,000 points, 400\.0 kB each, gathered on the host\) "
                                         r"needs at least 400\.0 GB, more than the 128\.0 GB") as e:
        itlin.sweep(fn, {"a": np.arange(10 ** 6, dtype=np.float32)})
    assert "slices of the grid of at most 320,000 points" in _one_line(e)
    # one program's points on a device: 4 MB where a device has 2 MB; chunk as the error says, and it runs
    real = itlin.core._memory.limit
    monkeypatch.setattr("itlin.core._memory.limit",
                        lambda device=None: (2e6, "the memory of GPU 0") if device is not None else real(None))
    small = lambda p: jnp.ones(250) * p["a"]  # noqa: E731 - 1 kB of outputs a point, 4 bytes of inputs
    grid = {"a": np.arange(4000, dtype=np.float32)}
    with pytest.raises(ValueError, match=r"sweep \(4,000 points per device, 1\.0 kB of inputs and outputs each\) needs "
                                         r"at least 4\.0 MB, more than the 2\.0 MB of the memory of GPU 0; pass "
                                         r"chunk=1992 ") as e:
        itlin.sweep(small, grid)
    _one_line(e)
    out = itlin.sweep(small, grid, chunk=1992)
    np.testing.assert_array_equal(out, np.arange(4000, dtype=np.float32)[:, None] * np.ones(250, np.float32))


# ------------------------------------------------------------------------------ records: parts, joins, damage
def _run(seed: int, seeds: int, *, experiment: str = "toy", lr: float = 0.1, name: str = ""):
    """A finished run of ``seeds`` seeds from ``seed`` as the runner stores it (one training run a
    seed: ``full K=1 seed=<s>``), the digest of its record renewed."""
    from itlin import _io
    from itlin.book import opendata
    from itlin.book.store import record_digest

    tree = {"_fits": {f"full K=1 seed={s}": {"loss": np.linspace(1.0, 0.1, 5) * (s + 1) * lr,
                                             "relin_steps": np.arange(1, 6, dtype=np.int64)}
                      for s in range(seed, seed + seeds)}}
    flat, paths = _io.flatten_tree(tree)
    runs = {f"full K=1 seed={s}": {"status": "completed", "diverged_at": None, "loss_every": 1, "steps": 5}
            for s in range(seed, seed + seeds)}
    info = {"experiment": experiment, "version": "1", "params": {"seed": seed, "seeds": seeds, "lr": lr},
            "status": "completed", "runs": runs, "meta": {"resolved": {"seed": seed, "seeds": seeds, "lr": lr}},
            "git_commit": "abc", "device": "cpu", "wall_seconds": 1.0}
    info["record_sha256"] = record_digest(info)
    return opendata.Part(flat, paths, info, name)


def _files(folder):
    """Every file under ``folder`` and its bytes: what a refused command must leave as it was."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _seeds_of(folder):
    from itlin.book import runner

    return sorted(s for r in runner.open_records(folder) for s in runner.seed_range(r.meta["resolved"]))


def _cli_opendata(capsys, *argv):
    from itlin.book import opendata

    rc = opendata.main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    return rc, err


def test_converting_a_run_onto_a_record_refuses_to_replace_it_unless_forced(tmp_path, capsys):
    """The issue's data loss: REC/record.nc holds seeds 0-3 in two parts; converting a run of seeds 4-5
    to REC replaced them. Now it is refused, and the way to join is named; --force replaces."""
    from itlin.book import opendata

    rec, run = tmp_path / "REC", tmp_path / "RUN"
    opendata.write([_run(0, 2, name="seeds-0"), _run(2, 2, name="seeds-2")], rec / "record.nc")
    opendata.write([_run(4, 2)], run / "record.nc")
    before = _files(tmp_path)
    rc, err = _cli_opendata(capsys, run, rec)
    assert rc == 2 and "\n" not in err and "already holds a record" in err and "--force replaces it" in err, err
    assert _files(tmp_path) == before and _seeds_of(rec) == [0, 1, 2, 3]
    # the way the error names: the run in a part folder of its own, joined in place
    assert _cli_opendata(capsys, run, rec / "seeds-4")[0] == 0
    assert _cli_opendata(capsys, rec)[0] == 0
    assert _seeds_of(rec) == [0, 1, 2, 3, 4, 5] and sorted(p.name for p in rec.iterdir()) == ["record.nc"]
    # --force replaces, once the new file reads back right; nothing is left beside it
    assert _cli_opendata(capsys, run, rec, "--force")[0] == 0
    assert _seeds_of(rec) == [4, 5] and sorted(p.name for p in rec.iterdir()) == ["record.nc"]
    with pytest.raises(FileExistsError, match="replaced only when asked"):
        opendata.write([_run(0, 1)], rec / "record.nc")


@pytest.mark.parametrize("case", ["shared seed", "other settings", "other experiment", "same name"])
def test_a_join_of_parts_that_would_not_pool_is_refused_before_any_file_changes(tmp_path, capsys, case):
    from itlin.book import opendata

    folder = tmp_path / "rec"
    opendata.write([_run(0, 4, name="seeds-0")], folder / "record.nc")
    late = {"shared seed": _run(3, 2), "other settings": _run(4, 2, lr=1.0),
            "other experiment": _run(4, 2, experiment="fig9_damping"), "same name": _run(4, 2)}[case]
    opendata.write([late], folder / ("seeds-0" if case == "same name" else "seeds-4") / "record.nc")
    before = _files(tmp_path)
    rc, err = _cli_opendata(capsys, folder)
    want = {"shared seed": "both have seed 3; join parts of different seeds",
            "other settings": "was made with lr=1.0, seeds-0 with lr=0.1; join parts that differ only in their seeds",
            "other experiment": "is fig9_damping version 1, seeds-0 is toy version 1; join parts of one experiment",
            "same name": "two different parts are named 'seeds-0'"}[case]
    assert rc == 2 and "\n" not in err and want in err and "Nothing was written" in err, err
    assert _files(tmp_path) == before


def test_a_join_run_again_after_an_interruption_adds_no_part_twice(tmp_path, capsys, monkeypatch):
    """Interrupted between writing record.nc and removing the parts' files, a join run again gave
    part-A, part-B, part-A, part-B. Now a part already in the file is not added again; and an
    interruption while the file is written leaves the file there as it was."""
    from itlin.book import opendata

    folder = tmp_path / "rec"
    parts = [_run(0, 2, name="seeds-0"), _run(2, 2, name="seeds-2")]
    for p in parts:
        opendata.write([p._replace(name="")], folder / p.name / "record.nc")
    kept = {p.name: (folder / p.name / "record.nc").read_bytes() for p in parts}
    assert _cli_opendata(capsys, folder)[0] == 0
    once = opendata.read(folder / "record.nc")
    for name, data in kept.items():  # the parts' files as an interruption before their removal left them
        (folder / name).mkdir()
        (folder / name / "record.nc").write_bytes(data)
    assert _cli_opendata(capsys, folder)[0] == 0
    again = opendata.read(folder / "record.nc")
    assert [p.name for p in again] == [p.name for p in once] == ["seeds-0", "seeds-2"]
    assert [p.made for p in again] == [p.made for p in once] and _seeds_of(folder) == [0, 1, 2, 3]
    assert sorted(p.name for p in folder.iterdir()) == ["record.nc"]
    # Ctrl-C while the joined file is written: one line, exit 130, the file there as it was, no .new
    opendata.write([_run(4, 2)], folder / "seeds-4" / "record.nc")
    before = _files(tmp_path)

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(opendata, "read", lambda path, real=opendata.read: interrupted() if str(path).endswith(".new")
                        else real(path))
    rc, err = _cli_opendata(capsys, folder)
    assert rc == 130 and "\n" not in err and "interrupted" in err and "run the same command again" in err, err
    assert _files(tmp_path) == before


def test_opendata_failures_are_one_line_with_exit_2(tmp_path, capsys):
    from itlin.book import opendata

    rc, err = _cli_opendata(capsys, tmp_path / "no-such-folder", tmp_path / "out")
    assert rc == 2 and "\n" not in err and "is not a folder" in err, err
    opendata.write([_run(0, 2, experiment="adaptive_schedules")], tmp_path / "r" / "record.nc")
    rc, err = _cli_opendata(capsys, tmp_path / "r", "--tally")
    assert rc == 2 and "\n" not in err and "adaptive_schedules reads each seed's per-example results" in err, err
    path = tmp_path / "r" / "record.nc"
    path.write_bytes(path.read_bytes()[:4000])  # truncated
    rc, err = _cli_opendata(capsys, tmp_path / "r", tmp_path / "out")
    assert rc == 2 and "\n" not in err and "damaged or incomplete" in err and "git checkout -- " in err, err
    assert not (tmp_path / "out").exists()
    # a run of the runner whose arrays do not match the checksum in its record.json
    from itlin.book import runner

    _register()
    made = runner.run("issue59_seeds", {"seeds": 2}, results_dir=tmp_path / "results", verbose=False)
    data = bytearray((made.path / "results.npz").read_bytes())
    data[len(data) // 2] ^= 1
    (made.path / "results.npz").write_bytes(bytes(data))
    rc, err = _cli_opendata(capsys, made.path, tmp_path / "out")
    assert rc == 2 and "\n" not in err and "does not match the checksum in its record.json" in err, err
    assert not (tmp_path / "out").exists()


def _flip_a_byte(path, variable: str):
    """One bit of ``variable``'s stored data changed in the file, as a disk or a copy might."""
    import h5py

    with h5py.File(path, "r") as h:
        at = h[variable].id.get_chunk_info(0).byte_offset
    data = bytearray(path.read_bytes())
    data[at] ^= 1
    path.write_bytes(bytes(data))


def test_a_flipped_byte_is_seen_by_a_plain_xarray_reader_and_by_itlin(tmp_path):
    import xarray as xr

    from itlin.book import opendata, runner

    run = _run(0, 3)
    path = opendata.write([run], tmp_path / "rec" / "record.nc")
    with xr.open_dataset(path, engine="h5netcdf") as ds:  # before: the runs' losses, stacked over K and seed
        np.testing.assert_array_equal(ds["fits_full_loss"].values[0],
                                      np.stack([run.arrays[f"_fits/full K=1 seed={s}/loss"] for s in range(3)]))
    _flip_a_byte(path, "fits_full_loss")
    with pytest.raises(OSError, match="filter returned failure"):  # HDF5's Fletcher-32 checksum, no itlin
        with xr.open_dataset(path, engine="h5netcdf") as ds:
            ds.load()
    for call in (opendata.read, lambda p: runner.open_record(p.parent)):
        with pytest.raises(ValueError, match=r"is damaged or incomplete: restore it with: git checkout -- ") as e:
            call(path)
        assert "record.nc" in _one_line(e)


def test_a_truncated_or_missing_record_is_one_line_naming_the_file_and_the_restore(tmp_path, monkeypatch):
    from itlin.book import opendata, records, runner

    root = tmp_path / "checkout"  # a source checkout of its own: its book/recorded is git's
    folder = root / "book" / "recorded" / "toy-4seeds"
    monkeypatch.setattr(records, "source_checkout", lambda: root)
    path = opendata.write([_run(0, 4)], folder / "record.nc")
    path.write_bytes(path.read_bytes()[:3000])
    monkeypatch.chdir(root)
    for call in (runner.open_record, runner.open_records, lambda n: opendata.attributes(folder / "record.nc")):
        with pytest.raises(ValueError, match=r"toy-4seeds/record\.nc is unreadable \(.*\); the file is damaged or "
                                             r"incomplete: restore it with: git checkout -- book/recorded/toy-4seeds/"
                                             r"record\.nc$") as e:
            call("toy-4seeds")
        _one_line(e)
    path.unlink()
    with pytest.raises(FileNotFoundError, match="holds no finished run .*; restore it with: git checkout -- "
                                                "book/recorded/toy-4seeds/record.nc") as e:
        runner.open_record("toy-4seeds")
    _one_line(e)


def test_rewrite_adds_the_checksums_and_keeps_every_array_attribute_and_verdict(tmp_path):
    """The records kept with the book were written without Fletcher-32; rewrite re-encodes one (here a
    copy) with it, and everything a reader or a chapter reads stays as it was."""
    import shutil

    import h5py
    import xarray as xr

    from itlin.book import opendata, render, runner

    name = "fig3_augmentation-mnist1d-10seeds"
    folder = tmp_path / name
    folder.mkdir()
    shutil.copy(runner.recorded_dir() / name / "record.nc", folder / "record.nc")
    path = folder / "record.nc"
    with h5py.File(path, "r") as h:
        assert not any(h[k].fletcher32 for k in h if isinstance(h[k], h5py.Dataset))  # as committed
    before = runner.open_record(folder)
    verdicts = [repr(v) for v in render.judge(before)]
    with xr.open_dataset(path, engine="h5netcdf") as ds:
        plain = ds.load()
    opendata.rewrite(path)
    with h5py.File(path, "r") as h:  # every array of numbers a reader gets (not the bare dimensions' scales)
        arrays = [k for k, v in plain.variables.items() if v.dtype.kind in "biuf" and v.ndim]
        assert arrays and all(h[k].fletcher32 for k in arrays)
    after = runner.open_record(folder)
    assert after.info == before.info and after.paths == before.paths
    for k, a in before.arrays.items():
        assert np.asarray(after.arrays[k]).tobytes() == np.asarray(a).tobytes(), k
    assert [repr(v) for v in render.judge(after)] == verdicts
    with xr.open_dataset(path, engine="h5netcdf") as ds:
        assert ds.load().identical(plain) and ds.attrs == plain.attrs
    # an edit that adds attributes is kept; one that changes a run is refused and changes nothing
    opendata.rewrite(path, edit=lambda ds: ds.assign_attrs(claims="per-claim attributes"))
    assert opendata.attributes(path)["claims"] == "per-claim attributes"
    data = path.read_bytes()
    var = next(v for v in plain.data_vars if plain[v].dtype.kind == "f" and plain[v].ndim)

    def change(ds):
        ds[var] = ds[var] + 1.0
        return ds

    with pytest.raises(ValueError, match="does not hold the same runs; nothing was changed"):
        opendata.rewrite(path, edit=change)
    assert path.read_bytes() == data and not path.with_name("record.nc.new").exists()


def test_rewrite_keeps_a_tallied_record_made_in_parts(tmp_path):
    from itlin.book import opendata
    from itlin.book.store import record_digest

    parts = []
    for p in range(2):
        part = _run(2 * p, 2, experiment="feature_updates", name=f"seeds-{2 * p}")
        rng = np.random.default_rng(p)
        runs = part.info["meta"].setdefault("runs", {})
        for s in range(2 * p, 2 * p + 2):
            for setting in ("full K=1", "full K=8"):
                bits = rng.random(20) < 0.6
                runs[f"{setting} seed={s}"] = {"final_correct": base64.b64encode(np.packbits(bits).tobytes()).decode(),
                                               "setting": setting, "seed": s, "n_test_final": 20}
                part.info["runs"].setdefault(f"{setting} seed={s}", {"status": "completed", "diverged_at": None,
                                                                      "loss_every": 1, "steps": 5})
        part.info["record_sha256"] = record_digest(part.info)
        parts.append(part)
    kept, tallies = opendata.tally_parts(parts)
    path = opendata.write(kept, tmp_path / "r" / "record.nc", tallies)
    before = opendata.read(path)
    opendata.rewrite(path)
    assert opendata._same_parts(before, opendata.read(path))
    assert opendata._tally_digest(opendata.tallies_in(path)) == opendata._tally_digest(tallies)


# ------------------------------------------------------------------------------ commands: one line per failure
def _seeds_run(p, ctx):
    seeds = range(p.seed, p.seed + p.seeds)
    return {"draws": np.stack([np.random.default_rng(s).normal(1.0, 1.0, size=3) for s in seeds])}


def _seeds_claims(rec):
    from itlin.book import verdicts as V

    d = np.asarray(rec["draws"])
    return [V.judge("positive", "the draws exceed zero", "-", V.paired_gap(d[:, 0], np.zeros(len(d))), "exceeds")]


def _register():
    from dataclasses import dataclass

    from itlin.book import experiments as E

    if "issue59_seeds" in E.names():
        return

    @dataclass(frozen=True)
    class P(E.Params):
        seeds: int = E.param(2, "seeds", min=1)

    E.register(E.Experiment("issue59_seeds", P, _seeds_run, version="1", claims=_seeds_claims,
                            doc="Test only: normal draws per seed."))


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A source checkout of its own for the records (book/recorded under tmp_path), holding the record
    ``twelve`` that repeats the live run ``seeds=2`` with more seeds, and the live run."""
    from itlin.book import opendata, records, runner

    _register()
    root = tmp_path / "checkout"
    monkeypatch.setattr(records, "source_checkout", lambda: root)
    results = tmp_path / "results"
    twelve = runner.run("issue59_seeds", {"seeds": 12}, results_dir=results, verbose=False)
    opendata.convert(twelve.path, root / "book" / "recorded" / "twelve")
    live = runner.run("issue59_seeds", {"seeds": 2}, results_dir=results, verbose=False)
    return root / "book" / "recorded", live


def test_verify_reports_a_damaged_record_it_does_not_need_and_goes_on(checkout, monkeypatch, capsys):
    from itlin.book import opendata, verify

    recorded, live = checkout
    broken = opendata.write([_run(0, 4)], recorded / "broken" / "record.nc")
    broken.write_bytes(broken.read_bytes()[:3000])
    monkeypatch.setattr(verify, "live_runs", lambda chapter, root=None, say=None: [live])
    assert verify.main(["damping"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 3, out
    assert "broken/record.nc is unreadable" in out[0] and "git checkout -- " in out[0]
    assert out[1].startswith("twelve: ") and out[1].endswith("1 of 1 verdict unchanged")
    assert out[2].startswith("verify: 1 record re-checked")
    # the record it needs, damaged: that chapter is one line, not checked, and the status says so
    _flip_a_byte(recorded / "twelve" / "record.nc", "draws")
    assert verify.main(["damping"]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert any(line.startswith("damping: not checked: ") and "twelve/record.nc" in line and "git checkout -- " in line
               for line in out), out
    assert out[-1] == "verify: 1 chapter not checked (damping)"


def test_verify_refuses_a_path_that_is_not_a_chapter_of_this_checkout(capsys, tmp_path):
    from itlin.book import verify

    (tmp_path / "damping.md").write_text("# not the book's chapter\n")
    for arg in ("no/such/folder/damping.md", str(tmp_path / "damping.md"), "damping.txt"):
        assert verify.main([arg]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "is not a chapter file of this checkout" in err, err


@pytest.mark.parametrize("module", ["verify", "findings", "run"])
def test_ctrl_c_is_one_line_and_exit_130(module, monkeypatch, capsys, tmp_path):
    from itlin.book import findings, run, verify

    def stop(*a, **k):
        raise KeyboardInterrupt

    if module == "verify":
        monkeypatch.setattr(verify, "live_runs", stop)
        rc = verify.main(["damping"])
    elif module == "findings":
        monkeypatch.setattr(findings, "findings", stop)
        rc = findings.main([])
    else:
        monkeypatch.setenv("ITLIN_RESULTS", str(tmp_path / "results"))
        monkeypatch.setattr(run, "execute_chapter", stop)
        rc = run.main([str(BOOK / "damping.md"), str(tmp_path / "out.ipynb")])
    err = capsys.readouterr().err.strip()
    assert rc == 130 and err and "\n" not in err and "interrupted" in err, err


def test_findings_with_a_damaged_or_missing_record_is_one_line(monkeypatch, capsys, tmp_path):
    from itlin.book import findings, opendata, records

    root = tmp_path / "checkout"
    monkeypatch.setattr(records, "source_checkout", lambda: root)
    name = findings.HEADLINES[0].record
    folder = root / "book" / "recorded" / name
    path = opendata.write([_run(0, 4)], folder / "record.nc")
    path.write_bytes(path.read_bytes()[:3000])
    monkeypatch.chdir(root)
    assert findings.main([]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{name}/record.nc is unreadable" in err
    assert err.endswith(f"restore it with: git checkout -- book/recorded/{name}/record.nc"), err
    path.unlink()
    assert findings.main([]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "holds no finished run" in err and f"git checkout -- book/recorded/{name}/record.nc" in err


BOOK = __import__("pathlib").Path(__file__).resolve().parent.parent / "book"


@pytest.mark.parametrize("value", ["0", "-5"])
def test_run_refuses_a_timeout_that_is_not_positive(value, monkeypatch, capsys, tmp_path):
    from itlin.book import run

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ITLIN_RESULTS", str(tmp_path / "results"))
    assert run.main([str(BOOK / "damping.md"), "out.ipynb", "--timeout", value]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"--timeout must be a positive number of seconds per cell, got {value}" in err, err
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="time-out must be a positive number"):
        run.execute_chapter(BOOK / "damping.md", tmp_path / "out.ipynb", timeout=0)


_DYING = """---
jupytext:
  formats: md:myst
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# A chapter whose kernel dies, or whose cell runs long

```{code-cell} ipython3
:tags: [parameters]
how = "die"
```

```{code-cell} ipython3
import os, signal, time
if how == "die":
    os.kill(os.getpid(), signal.SIGKILL)
else:
    time.sleep(120)
```
"""


@pytest.mark.slow
@pytest.mark.parametrize("how", ["die", "sleep"])
def test_a_dead_kernel_or_a_cell_past_its_timeout_is_one_line_naming_the_cell(how, tmp_path):
    import os
    import subprocess
    import sys

    chapter = tmp_path / "dying.md"
    chapter.write_text(_DYING)
    out = tmp_path / "out.ipynb"
    env = {**os.environ, "ITLIN_RESULTS": str(tmp_path / "results"),  # this checkout's itlin, wherever it runs
           "PYTHONPATH": os.pathsep.join([str(BOOK.parent)] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    args = [sys.executable, "-m", "itlin.book.run", str(chapter), str(out), "-p", "how", how]
    done = subprocess.run(args + (["--timeout", "3"] if how == "sleep" else []), capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)
    err = done.stderr.strip()
    assert done.returncode == 1 and "\n" not in err, err  # the kernel's own stderr included: nothing else
    if how == "die":
        assert err.startswith("error: the kernel died while running code cell 3 (import os, signal, time)"), err
    else:
        assert "ran past --timeout 3 s and was interrupted" in err, err
    assert out.exists()


# ------------------------------------------------------------------------------ properties of joins
@st.composite
def _join_cases(draw):
    """Parts as they come to a record's folder: each of some seeds (overlapping or not), mostly of one
    experiment and setting, some a repeat of an earlier part (as a join interrupted before it removed
    the parts' files leaves them); the first one joined to the file already or not."""
    specs = []
    for _ in range(draw(st.integers(1, 4))):
        if specs and draw(st.integers(0, 3)) == 0:
            specs.append(draw(st.sampled_from(specs)))
            continue
        specs.append((draw(st.integers(0, 8)), draw(st.integers(1, 3)), draw(st.sampled_from(["toy"] * 4 + ["other"])),
                      draw(st.sampled_from([0.1] * 4 + [0.2]))))
    return specs, draw(st.booleans())


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_join_cases())
def test_any_set_of_parts_joins_to_the_pooled_record_or_is_refused_before_any_file_changes(tmp_path_factory, case):
    from itlin.book import opendata, runner

    specs, first_joined = case
    folder = tmp_path_factory.mktemp("join") / "rec"
    for i, (seed, seeds, experiment, lr) in enumerate(specs):
        part = _run(seed, seeds, experiment=experiment, lr=lr, name=f"p{i}")
        if i == 0 and first_joined:
            opendata.write([part], folder / "record.nc")
        else:
            opendata.write([part._replace(name="")], folder / f"p{i}" / "record.nc")
    distinct = list(dict.fromkeys(specs))  # the oracle: the runs, each once, and whether they pool
    covered = [s for seed, seeds, _, _ in distinct for s in range(seed, seed + seeds)]
    pools = len({(e, lr) for _, _, e, lr in distinct}) == 1 and len(covered) == len(set(covered))
    before = _files(folder)
    try:
        opendata.convert(folder)
    except ValueError as err:
        assert not pools and "Nothing was written" in str(err) and "\n" not in str(err)
        assert _files(folder) == before
        return
    assert pools
    assert sorted(p.name for p in folder.iterdir()) == ["record.nc"]
    recs = runner.open_records(folder)
    pooled = runner.pooled_record(recs, {}, [])
    assert pooled.meta["resolved"]["seeds"] == len(covered) and _seeds_of(folder) == sorted(covered)
    names = [p.name for p in opendata.read(folder / "record.nc")]
    assert names == [f"p{specs.index(s)}" for s in distinct]
    opendata.convert(folder)  # joined again: the same file
    assert [p.name for p in opendata.read(folder / "record.nc")] == names
