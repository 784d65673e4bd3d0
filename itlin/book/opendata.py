"""Recorded runs as open data: one netCDF-4 file per record, which xarray opens without itlin.

The runner keeps a finished run as ``results.npz`` (one array per run and metric) and
``record.json`` (parameters, provenance, per-run summaries): a cache format, quick to write after
every run, that a reader needs itlin to make sense of. The runs kept with the book
(``book/recorded/<name>/``) are stored instead as one ``record.nc`` each:

* **Stacked, with named dimensions.** The per-run arrays (``_fits/K=1 seed=3/loss``, ...) become
  one variable per kind of array, with a dimension per setting named in the runs' tags (``K``,
  ``seed``, ``n``, ...) whose coordinate holds the settings' values. A record made in parts (one
  folder per batch of seeds) is one file; its ``part_*`` variables say which seeds each part
  made, on which machine, at which commit.
* **Self-describing.** Each variable's ``key`` attribute is the result key it holds, with a
  ``{K}``-style field per stacked dimension, and ``units`` where one applies; the file's
  attributes give the experiment, its version, the resolved parameters and the provenance.
  Per-example results (which test examples a run got right) are ``uint8`` variables of packed
  bits (:func:`numpy.unpackbits` reads them). ``runs_json`` keeps the rest of each part's
  ``record.json`` as JSON.
* **Compressed** with HDF5's deflate and shuffle filters, which every netCDF-4 reader decodes
  (xarray, netCDF4-python, h5py, ncdump, R, Julia, MATLAB): no plug-in codec.
* **Checked by any reader**: each array carries HDF5's Fletcher-32 checksum, which those readers
  verify as they read, so a damaged array is an error, not changed values; itlin's reader names
  a damaged or missing file and how to restore it (``git checkout -- <path>``) in one line.
  :func:`rewrite` adds the checksums to a file written before them.
* **Never lost**: a record file is replaced only when asked (``--force``), and only once its
  replacement reads back right; parts are joined each once (:func:`join`), and only parts that
  pool, checked before anything is written.
* **Exact.** Every array and every field comes back as it was made, with two exceptions: a
  training run's per-step loss (``_fits/<tag>/loss``) longer than :data:`CURVE_POINTS` points is
  kept as the means of equal blocks of it (its ``loss_every`` grows to match: the resolution
  the chapters draw; no claim reads that curve); and a record of many seeds may keep its
  per-example results as counts over seeds, one pair of settings at a time
  (:func:`tally_parts`, :class:`ExampleTallies`): all a paired gap reads, in a size that does
  not grow with the seeds. Each part stores the content digests of its arrays before and
  after; :func:`read` checks the stored one on every load, :func:`tallies_in` the tallies'.

Why netCDF-4 and not zarr: a record stays one file, which git, a download and a reader handle
better than a folder of chunk files, and it opens in more tools. ``book/recorded/README.md``
documents the schema and a three-line loading example.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import re
from pathlib import Path
from typing import Mapping, NamedTuple, Optional, Sequence

import numpy as np

from .. import _io
from . import axes
from .registry import Declared

FILE = "record.nc"
FORMAT = "itlin-record-netcdf/1"
#: the most points a training run's per-step loss keeps in a record file
CURVE_POINTS = 200
_FITS = "_fits"
_BITS = "_bits"  # per-example results of a run's meta, moved out of the JSON into arrays
#: a setting in a run's tag: ``K=1``, ``seed=12``, ``n=1000``, ``K=inf``
_SETTING = re.compile(r"(?<![\w.])([A-Za-z_]\w*)=(-?(?:inf|nan|\d+(?:\.\d*)?(?:e[-+]?\d+)?))(?![\w.])")
_UNITS = (("seconds", "s"), ("accuracy", "1 (fraction of examples)"),
          ("correct", "packed bits (numpy.packbits along the last axis; 1 = example right)"))
_SMALL = 8192  # bytes: variables smaller than this are stored uncompressed (less overhead)


def restore_hint(path) -> str:
    """How to get a damaged or missing record file back: ``git checkout -- <path>`` (the path
    relative to the working directory when it lies under it)."""
    path = Path(path).absolute()
    try:
        path = path.relative_to(Path.cwd())
    except ValueError:
        pass
    return f"restore it with: git checkout -- {path}"


def _damaged(path, what: str) -> ValueError:
    """The one-line error of a record file that cannot be read as it was written."""
    return ValueError(f"{path} {what}; the file is damaged or incomplete: {restore_hint(path)}")


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0]}" if text else type(err).__name__


class Part(NamedTuple):
    """One finished run (a record, or one part of a record made in parts): its flat arrays, their
    key paths, its ``record.json`` content, its folder's name and, for a part read from a record
    file, the digests of the run as it was made (kept when the part is written again)."""

    arrays: Mapping[str, np.ndarray]
    paths: list
    info: dict
    name: str = ""
    made: Optional[dict] = None


# ---------------------------------------------------------------------------------- one part
def thin_curves(part: Part, points: int = CURVE_POINTS) -> Part:
    """``part`` with each training run's per-step loss cut to at most ``points`` values: the
    means of blocks of ``m`` consecutive values (``m`` the smallest that fits; a last, partial
    block is left out), and the run's ``loss_every`` multiplied by ``m``, which is what a run
    made with that ``loss_every`` would have kept. ``info["thinned_loss"]`` lists
    ``{tag: [m, original length]}``; the record's own checksum is renewed."""
    from .store import record_digest

    arrays, info, done = dict(part.arrays), copy.deepcopy(part.info), {}
    for tag, run in (info.get("runs") or {}).items():
        key = f"{_FITS}/{tag}/loss"
        a = arrays.get(key)
        if a is None or a.ndim != 1 or a.size <= points:
            continue
        m = -(-a.size // points)
        k = a.size // m
        arrays[key] = a[:k * m].astype(np.float64).reshape(k, m).mean(axis=1)
        run["loss_every"] = int(run.get("loss_every", 1)) * m
        done[tag] = [m, int(a.size)]
    if not done:
        return part
    info["thinned_loss"] = done
    if "record_sha256" in info:
        info["record_sha256"] = record_digest(info)
    return part._replace(arrays=arrays, info=info)


def _bits_out(part: Part) -> Part:
    """Per-example results kept as base64 text in the runs' meta (``meta.runs.<tag>.*correct``)
    moved into ``uint8`` arrays ``_bits/<tag>/<field>``; the text is replaced by that key."""
    runs = (part.info.get("meta") or {}).get("runs")
    if not isinstance(runs, Mapping):
        return part
    arrays, paths, info = dict(part.arrays), list(part.paths), copy.deepcopy(part.info)
    for tag, fields in info["meta"]["runs"].items():
        if not isinstance(fields, dict):
            continue
        for field, text in fields.items():
            if "correct" not in field or not isinstance(text, str):
                continue
            raw = base64.b64decode(text, validate=True)
            if base64.b64encode(raw).decode("ascii") != text:  # not canonical: keep the text as it is
                continue
            key = f"{_BITS}/{tag}/{field}"
            arrays[key] = np.frombuffer(raw, np.uint8).copy()
            paths.append([_BITS, tag, field])
            fields[field] = {"$bits": key}
    return part._replace(arrays=arrays, paths=paths, info=info)


def _bits_in(arrays: dict, paths: list, info: dict):
    """The inverse of :func:`_bits_out`."""
    runs = (info.get("meta") or {}).get("runs")
    if isinstance(runs, Mapping):
        for fields in runs.values():
            if isinstance(fields, dict):
                for field, v in fields.items():
                    if isinstance(v, dict) and set(v) == {"$bits"}:
                        fields[field] = base64.b64encode(arrays.pop(v["$bits"]).tobytes()).decode("ascii")
    return arrays, [p for p in paths if not (p and p[0] == _BITS)], info


# ---------------------------------------------------------------------------------- tallies
class ExampleTallies(NamedTuple):
    """The per-example results ``field`` of a record's runs (one per setting and seed) kept as
    counts over seeds: ``pairs[(a, b)] = (seeds, PairedTally)`` for settings ``a`` and ``b``
    (in name order), over the seeds where both runs completed. All a paired gap between two
    settings reads (:func:`itlin.book.verdicts.tally_noise`), in a size that does not grow with
    the seeds."""

    field: str
    pairs: Mapping

    def pair(self, a: str, b: str, seeds) -> Optional[object]:
        """The :class:`~itlin.book.verdicts.PairedTally` of setting ``a`` against ``b`` (names, or
        sets of one name) over exactly ``seeds``; ``None`` when the tally is over other seeds (a
        gap over fewer seeds, or a pool of some parts only) or those settings were not tallied."""
        from .intervals import PairedTally

        one = lambda x: x if isinstance(x, str) else next(iter(x)) if len(x) == 1 else None
        a, b = one(a), one(b)
        flip = (a, b) not in self.pairs
        got = self.pairs.get((b, a) if flip else (a, b))
        if got is None or tuple(sorted(int(s) for s in seeds)) != got[0]:
            return None
        t = got[1]
        return PairedTally(t.b_only, t.a_only, t.seeds) if flip else t


#: the experiments whose per-example results only ``_rows.gap_verdict`` reads (paired by seed, one
#: setting against another), so that tallies serve every gap they judge (they declare ``tallies=True``);
#: others keep bits. A read-only view, experiment -> True
TALLY_READERS = Declared("tallies")


def tally_parts(parts: Sequence[Part], field: str = "final_correct", n_key: str = "n_test_final"):
    """``(parts, tallies)``: the per-example results ``field`` of every pair of settings in
    ``parts`` (runs whose meta names their ``setting`` and ``seed``, the first ``n_key`` examples
    of each) counted over the seeds where both runs completed (:class:`ExampleTallies`), and the
    parts without those results; each part's ``info["tallied"]`` keeps ``field`` and the sha256
    of each run's packed results as made. ``tallies`` is ``None`` when no two settings share a
    seed."""
    from .intervals import tally
    from .store import record_digest

    other = sorted({str(p.info.get("experiment")) for p in parts if p.info.get("experiment") not in TALLY_READERS})
    if other:
        raise ValueError(f"opendata: {other[0]} reads each seed's per-example results itself; keep its record's "
                         f"results as bits (tallies serve {', '.join(sorted(TALLY_READERS))}).")
    bits: dict = {}  # setting -> {seed: (part index, tag, packed bytes)}
    for i, part in enumerate(parts):
        runs, status = (part.info.get("meta") or {}).get("runs") or {}, part.info.get("runs") or {}
        for tag, run in runs.items():
            if not (isinstance(run, Mapping) and isinstance(run.get(field), str) and "setting" in run and "seed" in run):
                continue
            if (status.get(tag) or {}).get("status") != "completed":
                continue
            raw = base64.b64decode(run[field], validate=True)
            n = int(float(run[n_key]))
            seen = bits.setdefault(str(run["setting"]), {})
            if int(run["seed"]) in seen:
                raise ValueError(f"opendata.tally_parts: two runs of {run['setting']!r} with seed {run['seed']}.")
            seen[int(run["seed"])] = (i, tag, raw, n)
    pairs, used = {}, set()
    names = sorted(bits, key=_label_order)
    for j, a in enumerate(names):
        for b in names[j + 1:]:
            seeds = tuple(sorted(set(bits[a]) & set(bits[b])))
            if not seeds:
                continue
            sizes = {bits[x][s][3] for x in (a, b) for s in seeds}
            if len(sizes) != 1:
                raise ValueError(f"opendata.tally_parts: {a!r} and {b!r} have results on {sorted(sizes)} examples.")
            n = sizes.pop()
            stack = lambda x: np.unpackbits(np.stack([np.frombuffer(bits[x][s][2], np.uint8) for s in seeds]),
                                            axis=-1)[:, :n].astype(bool)
            pairs[(a, b)] = (seeds, tally(stack(a), stack(b)))
            used |= {bits[x][s][:2] for x in (a, b) for s in seeds}
    if not pairs:
        return list(parts), None
    out = []
    for i, part in enumerate(parts):
        tags = sorted(tag for k, tag in used if k == i)
        if not tags:
            out.append(part)
            continue
        info = copy.deepcopy(part.info)
        sha = {}
        for tag in tags:
            text = info["meta"]["runs"][tag].pop(field)
            sha[tag] = hashlib.sha256(base64.b64decode(text)).hexdigest()
        info["tallied"] = {"field": field, "n_key": n_key, "sha256": sha}
        if "record_sha256" in info:
            info["record_sha256"] = record_digest(info)
        made = part.made if part.made is not None else {
            "content_digest": _io.content_digest(part.arrays, part.paths),
            "arrays_sha256": part.info.get("arrays_sha256"), "record_sha256": part.info.get("record_sha256")}
        out.append(part._replace(info=info, made=made))
    return out, ExampleTallies(field, pairs)


def merge_tallies(a: Optional[ExampleTallies], b: Optional[ExampleTallies]) -> Optional[ExampleTallies]:
    """The tallies of two sets of runs of other seeds, added (a pair of settings in one only
    keeps that one's seeds); raises ``ValueError`` when they share a seed or count another field."""
    from .intervals import PairedTally

    if a is None or b is None:
        return a if b is None else b
    if a.field != b.field:
        raise ValueError(f"opendata.merge_tallies: one tallies {a.field!r}, the other {b.field!r}.")
    pairs = dict(a.pairs)
    for key, (seeds, t) in b.pairs.items():
        if key not in pairs:
            pairs[key] = (seeds, t)
            continue
        seen, u = pairs[key]
        if set(seen) & set(seeds):
            raise ValueError(f"opendata.merge_tallies: both count seed {min(set(seen) & set(seeds))} of {key}.")
        pairs[key] = (tuple(sorted(seen + seeds)), PairedTally(np.asarray(u.a_only) + t.a_only,
                                                               np.asarray(u.b_only) + t.b_only, u.seeds + t.seeds))
    return ExampleTallies(a.field, pairs)


def _tally_variables(tallies: ExampleTallies) -> dict:
    import xarray as xr

    keys = list(tallies.pairs)
    seeds = [tallies.pairs[k][0] for k in keys]
    width = max(len(s) for s in seeds)
    grid = np.full((len(keys), width), -1, np.int64)
    for i, s in enumerate(seeds):
        grid[i, :len(s)] = s
    dtype = np.uint16 if width < 2 ** 16 else np.uint32
    count = lambda what: np.stack([np.asarray(getattr(tallies.pairs[k][1], what)) for k in keys]).astype(dtype)
    dims = ("tally_pair", "tally_example")
    return {
        "tally_a_only": xr.Variable(dims, count("a_only"), {
            "long_name": f"seeds where setting a got the example right and setting b wrong ({tallies.field})",
            "units": "seeds"}),
        "tally_b_only": xr.Variable(dims, count("b_only"), {
            "long_name": f"seeds where setting b got the example right and setting a wrong ({tallies.field})",
            "units": "seeds"}),
        "tally_setting_a": xr.Variable(("tally_pair",), np.asarray([k[0] for k in keys], dtype=str)),
        "tally_setting_b": xr.Variable(("tally_pair",), np.asarray([k[1] for k in keys], dtype=str)),
        "tally_seeds": xr.Variable(("tally_pair", "tally_seed"), grid, {
            "description": "the seeds each pair's counts are over (-1: padding)"}),
    }


def _tally_digest(tallies: ExampleTallies) -> str:
    h = hashlib.sha256(tallies.field.encode())
    for k in sorted(tallies.pairs):
        seeds, t = tallies.pairs[k]
        h.update(json.dumps([list(k), list(seeds), int(t.seeds)]).encode())
        for a in (t.a_only, t.b_only):
            h.update(np.asarray(a, np.int64).tobytes())
    return h.hexdigest()


def tallies_in(path) -> Optional[ExampleTallies]:
    """The :class:`ExampleTallies` a record file keeps (``None`` if none); raises ``ValueError``
    when they do not match their stored digest."""
    import h5py

    from .intervals import PairedTally

    try:
        with h5py.File(path, "r") as h:
            if "tally_a_only" not in h:
                return None
            field, digest = h.attrs["tally_field"], h.attrs["tally_sha256"]
            field, digest = (x.decode() if isinstance(x, bytes) else str(x) for x in (field, digest))
            a_only, b_only, grid = h["tally_a_only"][...], h["tally_b_only"][...], h["tally_seeds"][...]
            names = [[x.decode() if isinstance(x, bytes) else str(x) for x in h[v][...]]
                     for v in ("tally_setting_a", "tally_setting_b")]
    except (OSError, KeyError) as err:
        raise _damaged(path, f"is unreadable ({_first_line(err)})") from None
    pairs = {}
    for i, (a, b) in enumerate(zip(*names)):
        seeds = tuple(int(s) for s in grid[i] if s >= 0)
        pairs[(a, b)] = (seeds, PairedTally(a_only[i].astype(np.int64), b_only[i].astype(np.int64), len(seeds)))
    out = ExampleTallies(field, pairs)
    if _tally_digest(out) != digest:
        raise _damaged(path, "has per-example tallies that do not match their digest")
    return out


# ---------------------------------------------------------------------------------- grouping
def _template(key: str):
    """``("_fits/K={K} seed={seed}/loss", (("K", "1"), ("seed", "3")))``: a key with each
    setting's value replaced by a field named after it (a name seen twice gets ``_2``)."""
    found: list = []

    def sub(m):
        name, n = m.group(1), 2
        while name in [f for f, _ in found]:
            name, n = f"{m.group(1)}_{n}", n + 1
        found.append((name, m.group(2)))
        return f"{m.group(1)}={{{name}}}"

    return _SETTING.sub(sub, key.replace("{", "{{").replace("}", "}}")), tuple(found)


def _label_order(label: str):
    try:
        return (0, float(label), label)
    except ValueError:
        return (1, 0.0, label)


def _var_name(template: str, used: set) -> str:
    base = re.sub(r"[^A-Za-z0-9_]+", "_", re.sub(r"\w+=\{\w+\}", "", template)).strip("_") or "value"
    base = re.sub(r"_+", "_", base)
    base = "v_" + base if base[0].isdigit() else base
    name, n = base, 2
    while name in used:
        name, n = f"{base}_{n}", n + 1
    used.add(name)
    return name


def _axis_base(template: str, var: str, i: int, named: Optional[tuple] = None) -> str:
    """The name of an array's own axis ``i`` before sizes are told apart: what a training run's
    arrays hold along it, the name its experiment gives it (``named``, from
    :mod:`itlin.book.axes`), else the variable's own name."""
    if named is not None:
        return named[i]
    parts = template.split("/")
    if parts[0] == _FITS and len(parts) >= 3 and i == 0:
        rest = "/".join(parts[2:])
        if rest == "loss":
            return "loss_block"
        if rest == "loss_pending":
            return "pending_step"
        if rest == "relin_steps":
            return "relinearisation"
        if rest.startswith("eval/"):
            return "evaluation"
    if parts[0] == _BITS:
        return "packed_examples"
    return f"{var}_dim{i}"


def _unit(template: str):
    leaf = template.rsplit("/", 1)[-1]
    return next((unit for word, unit in _UNITS if word in leaf), None)


# ---------------------------------------------------------------------------------- writing
def to_dataset(parts: Sequence[Part], tallies: Optional[ExampleTallies] = None):
    """An :class:`xarray.Dataset` of one record (one or more parts of one experiment), with each
    part's per-step losses cut to :data:`CURVE_POINTS` (:func:`thin_curves`) and the
    :class:`ExampleTallies` of parts made by :func:`tally_parts`."""
    import xarray as xr

    from .store import pool_over

    if not parts:
        raise ValueError("opendata.to_dataset: no parts to store.")
    if tallies is None and any("tallied" in p.info for p in parts):
        raise ValueError("opendata.to_dataset: some parts keep their per-example results as tallies; pass them.")
    stored = [_bits_out(thin_curves(p)) for p in parts]
    groups: dict = {}
    for p, part in enumerate(stored):
        for path in part.paths:
            key = "/".join(path) if path else _io._LEAF
            a = np.asarray(part.arrays[key])
            if a.dtype.kind not in "biuf":
                raise TypeError(f"opendata: {key!r} is a {a.dtype} array; only numbers and booleans are stored.")
            template, values = _template(key)
            groups.setdefault((template, a.dtype.str, a.ndim), []).append((p, values, a))
    # a part dimension only for the arrays that two parts both have under the same settings
    for group, members in groups.items():
        split = len({values for _, values, _ in members}) < len(members)
        groups[group] = [((("part", str(p)),) + values if split else values, a) for p, values, a in members]
    labels: dict = {}
    for members in groups.values():
        for values, _ in members:
            for name, label in values:
                labels.setdefault(name, set()).add(label)
    coords = {name: sorted(v, key=_label_order) for name, v in labels.items()}
    if "part" in coords:
        coords["part"] = [str(i) for i in range(len(parts))]
    index = {name: {label: i for i, label in enumerate(v)} for name, v in coords.items()}
    used = set(coords) | {f"{c}_value" for c in coords}
    planned = []  # (var, template, names, shape, members, the experiment's names of its own axes)
    sizes_of: dict = {}
    experiment = str(stored[0].info.get("experiment", ""))
    for (template, _, rank), members in groups.items():
        names = [n for n, _ in members[0][0]]
        if any([n for n, _ in v] != names for v, _ in members):
            raise ValueError(f"opendata: the settings of {template!r} are named in another order in some runs.")
        shape = tuple(max(a.shape[i] for _, a in members) for i in range(rank))
        var = _var_name(template, used)
        named = axes.names(experiment, template, rank)
        planned.append((var, template, names, shape, members, named))
        for i, size in enumerate(shape):
            sizes_of.setdefault(_axis_base(template, var, i, named), set()).add(size)
    clash = sorted((set(coords) | used) & {_axis_base(t, v, i, n) for v, t, _, sh, _, n in planned if n
                                           for i in range(len(sh))})
    if clash:
        raise ValueError(f"opendata: the axes {experiment} declares name an axis {clash[0]!r}, which is a setting or "
                         "a variable of its record; name it otherwise.")
    variables = {}
    for var, template, names, shape, members, named in planned:
        inner = []
        for i, size in enumerate(shape):
            base = _axis_base(template, var, i, named)
            inner.append(base if len(sizes_of[base]) == 1 else f"{base}_{size}")
        grid = tuple(len(coords[n]) for n in names)
        dtype = members[0][1].dtype
        out = np.full(grid + shape, np.nan if dtype.kind == "f" else 0, dtype=dtype)
        have = np.full(grid + (len(shape),), -1, dtype=np.int64)
        for values, a in members:
            at = tuple(index[n][label] for n, label in values)
            out[at + tuple(slice(0, s) for s in a.shape)] = a
            have[at] = a.shape
        attrs = {"key": template, "long_name": template}
        if names:
            attrs["stacked_over"] = " ".join(names)
        if _unit(template):
            attrs["units"] = _unit(template)
        variables[var] = xr.Variable(names + inner, out, attrs)
        missing = len(members) != int(np.prod(grid, dtype=np.int64))
        if shape and (missing or bool((have != np.asarray(shape)).any())):
            variables[var + "__shape"] = xr.Variable(names + ["rank_" + str(len(shape))], have, {
                "description": f"each run's shape of {var} (-1: no such run); beyond it, {var} is padding"})
        elif missing:
            variables[var + "__shape"] = xr.Variable(names, _present(members, index, grid) - 1, {
                "description": f"0 where a run has {var}, -1 where there is no such run"})
    ds = xr.Dataset(variables, coords={n: (n, np.asarray(v, dtype=str)) for n, v in coords.items()})
    for name, v in coords.items():
        try:
            ds = ds.assign_coords({f"{name}_value": (name, np.asarray([float(x) for x in v]))})
        except ValueError:
            pass
    first = stored[0].info
    resolved = dict((first.get("meta") or {}).get("resolved", {}))
    each = [(p.info.get("meta") or {}).get("resolved", {}).get("seeds") for p in stored]
    if len(stored) > 1 and all(isinstance(n, int) for n in each):
        resolved["seeds"] = sum(each)  # the pooled settings: the first part's, with the seeds of all
    for key in pool_over(first):  # and the values of every part of what the record pools over
        resolved[key] = list(dict.fromkeys(v for p in stored for v in (p.info.get("meta") or {})["resolved"][key]))
    ds.attrs.update({
        "Conventions": "CF-1.10",
        "title": f"itlin recorded run of the experiment {first.get('experiment', '?')}",
        "itlin_format": FORMAT,
        "experiment": str(first.get("experiment", "")),
        "version": str(first.get("version", "")),
        "status": "completed" if all(p.info.get("status") == "completed" for p in stored)
        else "; ".join(str(p.info.get("status")) for p in stored),
        "parts": len(stored),
        "resolved_params": json.dumps(_io.jsonable(resolved)),
        "git_commit": str(first.get("git_commit", "")),
        "device": str(first.get("device", "")),
        "wall_seconds": float(sum(float(p.info.get("wall_seconds") or 0.0) for p in stored)),
        "loss_curves": f"a training run's per-step loss longer than {CURVE_POINTS} points is kept as block means "
                       "(see each part's thinned_loss in runs_json)",
    })
    if len(stored) > 1:
        seeds = [(p.info.get("meta") or {}).get("resolved", {}) for p in stored]
        ds = ds.assign(
            part_name=("part", np.asarray([p.name for p in stored], dtype=str)),
            part_first_seed=("part", np.asarray([int(s.get("seed", -1)) for s in seeds], np.int64)),
            part_seeds=("part", np.asarray([int(s.get("seeds", 0)) for s in seeds], np.int64)),
            part_git_commit=("part", np.asarray([str(p.info.get("git_commit", "")) for p in stored], dtype=str)),
            part_device=("part", np.asarray([str(p.info.get("device", "")) for p in stored], dtype=str)),
            part_wall_seconds=("part", np.asarray([float(p.info.get("wall_seconds") or 0.0) for p in stored])))
        if "part" not in ds.coords:
            ds = ds.assign_coords(part=("part", np.asarray([str(i) for i in range(len(stored))], dtype=str)))
    entries = [{"name": s.name, "info": s.info, "paths": s.paths,
                "digest": _io.content_digest(s.arrays, s.paths),
                "made": p.made if p.made is not None else {
                    "content_digest": _io.content_digest(p.arrays, p.paths),
                    "arrays_sha256": p.info.get("arrays_sha256"), "record_sha256": p.info.get("record_sha256")}}
               for p, s in zip(parts, stored)]
    text = json.dumps(entries, allow_nan=False)
    ds["runs_json"] = xr.Variable(("runs_json_bytes",), np.frombuffer(text.encode("utf-8"), np.uint8), {
        "description": "UTF-8 JSON, one entry per part: its folder 'name', its record.json 'info' (per-example "
                       "results replaced by {'$bits': key}, the key of their array), its result key 'paths', the "
                       "sha256 'digest' of its stored arrays and, under 'made', the digests of the run as made"})
    if tallies is not None:
        ds = ds.assign(_tally_variables(tallies))
        ds.attrs.update(tally_field=tallies.field, tally_sha256=_tally_digest(tallies),
                        tallies="per-example results of each pair of settings counted over seeds (tally_*); "
                                "each run's packed results as made: its sha256 in runs_json (info.tallied)")
    return ds


def _present(members, index, grid) -> np.ndarray:
    out = np.zeros(grid, np.int64)
    for values, _ in members:
        out[tuple(index[n][label] for n, label in values)] = 1
    return out


def _encoding(ds) -> dict:
    """How each variable is stored: numbers without a fill value; arrays with HDF5's Fletcher-32
    checksum, which every HDF5 reader (xarray, h5py, netCDF4, ncdump) verifies as it reads, and, from
    :data:`_SMALL` bytes, deflate and shuffle. (A scalar cannot carry a filter: HDF5 filters need
    chunked storage; itlin's digests check those and everything else.)"""
    encoding = {}
    for name, v in ds.variables.items():
        if v.dtype.kind in "biuf":
            encoding[name] = {"_FillValue": None}
            if v.ndim:
                encoding[name]["fletcher32"] = True
                if v.nbytes >= _SMALL:
                    encoding[name].update(zlib=True, complevel=9, shuffle=True)
    return encoding


def _put(ds, path: Path, replace: bool, check) -> Path:
    """Write ``ds`` beside ``path`` (``<name>.new``), ``check(new file)`` it, then move it over
    ``path``: a file already there stays, untouched, until its replacement reads back right (a
    failure or an interruption before leaves it as it was, and no ``.new`` file behind)."""
    if path.exists() and not replace:
        raise FileExistsError(f"{path} already holds a record; it is replaced only when asked (replace=True, or "
                              "--force on the command line).")
    new = path.with_name(path.name + ".new")
    data = ds.to_netcdf(engine="h5netcdf", encoding=_encoding(ds))
    try:
        _io.atomic_write(new, lambda fh: fh.write(bytes(data)))
        check(new)
    except BaseException:
        new.unlink(missing_ok=True)
        raise
    new.replace(path)
    return path


def write(parts: Sequence[Part], path, tallies: Optional[ExampleTallies] = None, *, replace: bool = False) -> Path:
    """Write ``parts`` (with their ``tallies``, see :func:`tally_parts`) as one netCDF-4 record
    file at ``path`` (atomically), read it back and check that each part's arrays and record
    are the ones stored; returns the path. A file already at ``path`` is replaced only with
    ``replace=True``, and only once the new one reads back right (:class:`FileExistsError`
    otherwise)."""
    ds = to_dataset(parts, tallies)

    def check(new):
        back = read(new)
        expected = [thin_curves(p) for p in parts]
        if tallies is not None and _tally_digest(tallies_in(new)) != _tally_digest(tallies):
            raise ValueError(f"{path}: its per-example tallies do not read back as written.")
        if len(back) != len(parts):
            raise ValueError(f"{path}: wrote {len(parts)} parts, read {len(back)}.")
        for want, got in zip(expected, back):
            same = json.dumps(_io.jsonable(want.info), sort_keys=True) == json.dumps(_io.jsonable(got.info), sort_keys=True)
            if not same or want.paths != got.paths or want.name != got.name:
                raise ValueError(f"{path}: part {want.name!r} does not read back as written.")

    return _put(ds, Path(path), replace, check)


def _same_parts(a: Sequence[Part], b: Sequence[Part]) -> bool:
    """Whether two lists of parts hold the same runs: arrays bit for bit, records, names, digests."""
    key = lambda p: (p.name, p.paths, json.dumps(_io.jsonable(p.info), sort_keys=True),
                     json.dumps(_io.jsonable(p.made), sort_keys=True), _io.content_digest(p.arrays, p.paths))
    return len(a) == len(b) and all(key(x) == key(y) for x, y in zip(a, b))


def rewrite(path, edit=None) -> Path:
    """Re-encode the record file ``path`` as :func:`write` writes one today (each array with HDF5's
    Fletcher-32 checksum, which plain xarray and h5py readers verify), keeping every value,
    attribute and itlin digest as it is; returns the path. ``edit(dataset) -> dataset``, if given,
    changes the :class:`xarray.Dataset` (loaded whole, undecoded) before it is written, e.g. to add
    attributes; the runs it holds may not change. The file is replaced only once the new one reads
    back with the same parts (arrays bit for bit, records, digests) and tallies and, without
    ``edit``, the same dataset (:meth:`xarray.Dataset.identical`); a damaged file is refused."""
    import xarray as xr

    path = Path(path)
    before, tallies = read(path), tallies_in(path)
    open_ = lambda p: xr.open_dataset(p, engine="h5netcdf", mask_and_scale=False, decode_times=False,
                                      decode_timedelta=False)
    with open_(path) as ds:
        ds = ds.load()
    for v in ds.variables.values():
        v.encoding = {}
    new_ds = ds if edit is None else edit(ds.copy())

    def check(new):
        try:
            same = _same_parts(before, read(new))
        except ValueError:  # an edit that changed an array: its digest no longer matches
            same = False
        if not same:
            raise ValueError(f"{path}: the rewritten file does not hold the same runs; nothing was changed.")
        got = tallies_in(new)
        if (got is None) != (tallies is None) or (got is not None and _tally_digest(got) != _tally_digest(tallies)):
            raise ValueError(f"{path}: the rewritten file does not hold the same tallies; nothing was changed.")
        if edit is None:
            with open_(new) as back:
                if not back.load().identical(ds):
                    raise ValueError(f"{path}: the rewritten file is not the same dataset; nothing was changed.")

    return _put(new_ds, path, True, check)


# ---------------------------------------------------------------------------------- reading
def attributes(path) -> dict:
    """The file attributes of a record file (experiment, version, resolved parameters, ...),
    without reading its arrays."""
    import h5py

    try:
        with h5py.File(path, "r") as h:
            return {k: (v.decode() if isinstance(v, bytes) else v.item() if hasattr(v, "item") else v)
                    for k, v in h.attrs.items() if not k.startswith("_")}
    except OSError as err:
        if not Path(path).is_file():
            raise FileNotFoundError(f"{path} is missing; {restore_hint(path)}") from None
        raise _damaged(path, f"is unreadable ({_first_line(err)})") from None


def read(path) -> list:
    """Every :class:`Part` of a record file, with its arrays and ``record.json`` as stored; raises
    ``FileNotFoundError`` when there is no file, and a one-line ``ValueError`` that says how to
    restore it when the file is not a record, is damaged (HDF5's checksums or an array that does not
    match its stored digest) or incomplete."""
    import xarray as xr

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; {restore_hint(path)}")
    try:
        ds = xr.open_dataset(path, engine="h5netcdf", mask_and_scale=False, decode_times=False,
                             decode_timedelta=False)
    except Exception as err:  # noqa: BLE001 - whatever h5py or xarray make of a damaged file: one line
        raise _damaged(path, f"is unreadable ({_first_line(err)})") from None
    with ds:
        if ds.attrs.get("itlin_format") != FORMAT:
            raise ValueError(f"{path} is not an itlin record file (no itlin_format {FORMAT!r}).")
        try:
            entries = json.loads(bytes(ds["runs_json"].values).decode("utf-8"))
            var_of = {ds[v].attrs["key"]: v for v in ds.data_vars if "key" in ds[v].attrs}
            values = {v: ds[v].values for v in var_of.values()}
            dims = {v: ds[v].dims for v in var_of.values()}
            shapes = {v: ds[v + "__shape"].values for v in var_of.values() if v + "__shape" in ds}
            where = {n: {str(x): i for i, x in enumerate(ds[n].values)} for n in ds.coords if ds[n].dims == (n,)}
        except Exception as err:  # noqa: BLE001 - a checksum (Fletcher-32) or a read that fails: one line
            raise _damaged(path, f"is unreadable ({_first_line(err)})") from None
    parts = []
    for p, entry in enumerate(entries):
        flat = {}
        try:
            for path_ in entry["paths"]:
                key = "/".join(path_) if path_ else _io._LEAF
                template, settings = _template(key)
                var = var_of[template]
                if dims[var] and dims[var][0] == "part" and (not settings or settings[0][0] != "part"):
                    settings = (("part", str(p)),) + settings
                at = tuple(where[n][label] for n, label in settings)
                a = values[var][at]
                if var in shapes and np.ndim(shapes[var][at]) == 1:
                    a = a[tuple(slice(0, int(s)) for s in shapes[var][at])]
                flat[key] = np.array(a)
        except (KeyError, IndexError, TypeError, ValueError) as err:
            raise _damaged(path, f"does not hold the arrays its part {p} ({entry.get('name')}) lists "
                                 f"({_first_line(err)})") from None
        if _io.content_digest(flat, entry["paths"]) != entry["digest"]:
            raise _damaged(path, f"has arrays of part {p} ({entry.get('name')}) that do not match their digest")
        flat, paths, info = _bits_in(flat, entry["paths"], entry["info"])
        made = entry.get("made") or {}
        if "thinned_loss" not in info and made.get("content_digest") not in (None, _io.content_digest(flat, paths)):
            raise _damaged(path, f"has a part {p} ({entry.get('name')}) that differs from the run as it was made")
        parts.append(Part(flat, paths, info, entry.get("name", ""), made or None))
    return parts


# ---------------------------------------------------------------------------------- attributes
def set_attributes(path, attrs: Mapping[str, str], *, drop_prefix: str = "") -> Path:
    """Set file attributes of the record file ``path`` (text), and remove those whose name starts
    with ``drop_prefix`` (when given) that ``attrs`` does not set; nothing else of the file is
    rewritten: its arrays, their encoding and the digests that check them (which cover arrays and
    ``runs_json``, not file attributes) stay as they are. Done on a copy, which must read back
    (:func:`read`) to the same parts, arrays and tallies, then put in place; returns the path."""
    import shutil

    import h5netcdf

    path = Path(path)
    new = path.with_name(path.name + ".new")
    shutil.copyfile(path, new)
    try:
        with h5netcdf.File(new, "r+") as f:
            for k in [k for k in f.attrs if drop_prefix and k.startswith(drop_prefix) and k not in attrs]:
                del f.attrs[k]
            for k, v in attrs.items():
                f.attrs[k] = str(v)
        for a, b in zip(read(path), read(new), strict=True):
            same = (a.name, a.paths, a.made) == (b.name, b.paths, b.made) and json.dumps(
                _io.jsonable(a.info), sort_keys=True) == json.dumps(_io.jsonable(b.info), sort_keys=True)
            if not same or set(a.arrays) != set(b.arrays) or not all(
                    np.array_equal(a.arrays[k], b.arrays[k], equal_nan=a.arrays[k].dtype.kind in "fc") for k in a.arrays):
                raise ValueError(f"{path}: part {a.name!r} does not read back the same after setting attributes.")
        old, now = tallies_in(path), tallies_in(new)
        if (old is None) != (now is None) or (old is not None and _tally_digest(old) != _tally_digest(now)):
            raise ValueError(f"{path}: its tallies do not read back the same after setting attributes.")
    except BaseException:
        new.unlink(missing_ok=True)
        raise
    new.replace(path)
    return path


# ---------------------------------------------------------------------------------- converting
def parts_of(folder) -> list:
    """The :class:`Part` s of a folder of finished runs: the runner's files (``results.npz`` and
    ``record.json``) or a record file, in the folder itself and then in each of its sub-folders (in
    name order; a sub-folder's one part takes the sub-folder's name), e.g. the parts of a record
    made over several sessions, to be joined into one file (or into the file already there)."""
    from .store import RECORD_FILE, RESULTS_FILE, _record_problem

    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a folder; give the results folder of a finished run "
                                "(results/<experiment>/<hash>) or a record's folder (book/recorded/<name>).")
    if (folder / FILE).is_file() and (folder / RECORD_FILE).is_file():
        raise ValueError(f"{folder} holds both a record file ({FILE}) and a run ({RECORD_FILE}); move the run into a "
                         f"sub-folder of its own ({folder}/<part name>) to join it to the record.")
    has = lambda p: (p / RECORD_FILE).is_file() or (p / FILE).is_file()
    subs = sorted(p for p in folder.iterdir() if p.is_dir() and has(p))
    subs = ([folder] if has(folder) else []) + subs  # a joined file first, then parts still kept one file each
    if not subs:
        raise FileNotFoundError(f"{folder} holds no finished run (need {FILE}, or {RECORD_FILE} and {RESULTS_FILE}, "
                                "in it or in its sub-folders).")
    out = []
    for sub in subs:
        name = "" if sub == folder else sub.name
        if (sub / FILE).is_file():
            got = read(sub / FILE)
            out += [p._replace(name=p.name or name) for p in got] if len(got) > 1 or name == "" else \
                [got[0]._replace(name=name)]
            continue
        info = _io.read_json(sub / RECORD_FILE)
        problem = None if info is None else _record_problem(info, sub / RECORD_FILE)
        if info is None or problem:
            raise ValueError(problem or f"{sub / RECORD_FILE} is unreadable")
        if not (sub / RESULTS_FILE).is_file() or _io.sha256_file(sub / RESULTS_FILE) != info.get("arrays_sha256"):
            raise ValueError(f"{sub / RESULTS_FILE} is missing or does not match the checksum in its record.json; make "
                             "the run again (or restore the file).")
        flat, paths, _ = _io.load_tree(sub / RESULTS_FILE)
        out.append(Part(flat, paths, info, name))
    return out


def _made(part: Part) -> tuple:
    """What names a run as it was made, whichever file it is read from: the digests of its arrays
    and of its record before any thinning or tallying."""
    if part.made is not None:
        return part.made.get("content_digest"), part.made.get("record_sha256")
    return _io.content_digest(part.arrays, part.paths), part.info.get("record_sha256")


def join(parts: Sequence[Part]) -> tuple:
    """``(parts, repeats)``: ``parts`` as one record joins them, each run once (a part that is
    already there, e.g. left by a join interrupted before it removed the parts' files, is a repeat,
    not added again), after checking, before anything is written, that they pool
    (:func:`itlin.book.store.pool_problem`: one experiment and version, the same settings but
    the seeds, no seed twice) and that no two other parts share a name; a one-line ``ValueError``
    otherwise."""
    from .store import pool_problem

    kept, seen, repeats = [], set(), []
    for part in parts:
        if _made(part) in seen:
            repeats.append(part)
            continue
        seen.add(_made(part))
        kept.append(part)
    names = [p.name for p in kept]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        raise ValueError(f"opendata: two different parts are named {twice!r}; rename one of their folders (or remove "
                         "the one that is wrong). Nothing was written.")
    problem = pool_problem([(p.name or "the run", p.info) for p in kept], "join parts")
    if problem is not None:
        raise ValueError(f"opendata: {problem} Nothing was written.")
    return kept, repeats


def convert(source, dest=None, *, tally: bool = False, force: bool = False) -> Path:
    """Write the finished runs in ``source`` (see :func:`parts_of`) as ``dest/record.nc``. With no
    ``dest``, in place: the file goes in ``source``, and the files it replaces there
    (``record.json``, ``results.npz``, ``params.json`` and the parts' own ``record.nc``, in it and
    in its parts' folders) are removed once it reads back right; other files (notes) stay.
    ``tally``: keep the runs' per-example results as counts over seeds (:func:`tally_parts`, for
    the experiments in :data:`TALLY_READERS`);
    a record file that has them keeps them, and tallies the parts joined to it.

    The parts are joined by :func:`join`: each run once, so that a join repeated (after an
    interruption) gives the same file, and only parts that pool, checked before anything is
    written. A record file already at ``dest`` is replaced only with ``force`` (in place, the
    file there is joined to, not replaced); it stays until the new one reads back right."""
    from .store import PARAMS_FILE, RECORD_FILE, RESULTS_FILE

    source = Path(source)
    target = Path(source if dest is None else dest) / FILE
    in_place = target.absolute() == (source / FILE).absolute()
    if target.exists() and not in_place and not force:
        raise FileExistsError(f"{target} already holds a record; to add these runs to it, convert them into a "
                              f"sub-folder of its own ({target.parent}/<part name>) and join in place (python -m "
                              f"itlin.book.opendata {target.parent}); --force replaces it.")
    parts, repeats = join(parts_of(source))
    tallies = tallies_in(source / FILE) if (source / FILE).is_file() else None
    if tally or tallies is not None:  # a file kept as tallies tallies the parts joined to it
        parts, more = tally_parts(parts)
        tallies = merge_tallies(tallies, more)
    path = write(parts, target, tallies, replace=True)
    if dest is None:
        for part in parts + repeats:
            if not part.name:
                for name in (RECORD_FILE, RESULTS_FILE, PARAMS_FILE):
                    (source / name).unlink(missing_ok=True)
                continue
            folder = source / part.name
            for name in (RECORD_FILE, RESULTS_FILE, PARAMS_FILE, FILE):
                (folder / name).unlink(missing_ok=True)
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
    return path


def main(argv=None) -> int:
    """``python -m itlin.book.opendata SOURCE [DEST]``: convert a folder of finished runs (one run,
    or one sub-folder per part, as the runner's files or record files) into ``DEST/record.nc``
    (default: in place, see :func:`convert`; a record kept one file per part is joined so).
    Exit status 0 when written; 2, with a one-line error and no file changed, when refused; 130
    when interrupted (no file changed, or the join done, to be run again)."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m itlin.book.opendata", description=main.__doc__)
    ap.add_argument("source", help="a results folder of one finished run, or a folder of such folders (parts)")
    ap.add_argument("dest", nargs="?", help="the record's folder, e.g. book/recorded/<name> (default: SOURCE, "
                                            "replacing the runner's files there)")
    ap.add_argument("--tally", action="store_true", help="keep per-example results as counts over seeds, one "
                                                         "pair of settings at a time (for records of many seeds)")
    ap.add_argument("--force", action="store_true", help="replace a record file already in DEST (it stays until the "
                                                         "new one reads back right)")
    args = ap.parse_args(argv)
    try:
        path = convert(args.source, args.dest, tally=args.tally, force=args.force)
        if args.tally and tallies_in(path) is None:
            print("nothing to tally (no two settings with per-example results share a seed): kept as bits")
    except KeyboardInterrupt:
        print("opendata: interrupted; the record file is as it was or completely written: run the same command again "
              "to finish (a part already joined is not added twice).", file=sys.stderr)
        return 130
    except (OSError, ValueError) as err:
        print(f"error: {str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__}", file=sys.stderr)
        return 2
    print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)")
    return 0


__all__ = ["CURVE_POINTS", "ExampleTallies", "FILE", "FORMAT", "Part", "TALLY_READERS", "attributes", "convert", "join",
           "merge_tallies", "parts_of", "read", "restore_hint", "rewrite", "set_attributes", "tallies_in", "tally_parts",
           "thin_curves",
           "to_dataset", "write"]

if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
