"""Recompute the book's headline gaps from the record files alone, without itlin.

Needs only Python's standard library, xarray, h5netcdf (with h5py), NumPy and SciPy::

    pip install xarray h5netcdf h5py numpy scipy
    python book/recorded/recompute.py             # JSON: [{"id", "gap", "half_width"}, ...]
    python book/recorded/recompute.py --all       # every claim a file describes, with its file and level
    python book/recorded/recompute.py --table     # the README's table: claim, file, variables, formula

Each ``record.nc`` describes the claims judged on it in attributes named ``claim.<id>`` (JSON, see
README.md): the variables that decide the claim and, as NumPy expressions over them, the two sides
``a`` and ``b`` of the gap per seed, the test set's per-example results, and the confidence level
at which the book states it. This script evaluates those expressions (a small, fixed vocabulary:
see ``FUNCTIONS``; nothing else can be called) and computes the gap and its interval the way the
README states it. It knows nothing about the experiments: the files say it all.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import re
import sys
import warnings
from pathlib import Path

import h5netcdf
import numpy as np
import xarray as xr
from scipy import stats

PREFIX = "claim."
#: a setting in a run's tag, as the files name runs: ``K=1``, ``seed=12``, ``n=400``, ``K=inf``
SETTING = re.compile(r"(?<![\w.])([A-Za-z_]\w*)=(-?(?:inf|nan|\d+(?:\.\d*)?(?:e[-+]?\d+)?))(?![\w.])")


class Record:
    """One record file: its variables, and its runs as ``runs_json`` lists them."""

    def __init__(self, path):
        self.path, self._values = Path(path), {}
        self.ds = xr.open_dataset(self.path, engine="h5netcdf", mask_and_scale=False, decode_times=False,
                                  decode_timedelta=False)
        self.runs = {}  # tag -> (its fields, completed); a run naming no seed or setting: its part's first seed, its tag
        for part in json.loads(bytes(self.ds["runs_json"].values).decode("utf-8")):
            info = part["info"]
            status = info.get("runs") or {}
            runs = (info.get("meta") or {}).get("runs")
            for tag, fields in (runs.items() if isinstance(runs, dict) else ()):
                if isinstance(fields, dict):
                    s = status.get(tag) or {}
                    fields = {"seed": int((info.get("params") or {}).get("seed", 0)), "setting": tag, **fields}
                    self.runs[tag] = (fields, s.get("status") == "completed" and s.get("diverged_at") is None)
        self.seeds = sorted({int(f["seed"]) for f, _ in self.runs.values() if "seed" in f})

    def values(self, name):
        """A variable's values as stored (read once)."""
        if name not in self._values:
            self._values[name] = np.asarray(self.ds[name].values)
        return self._values[name]

    # ------------------------------------------------------------------ the vocabulary
    def var(self, name):
        """A variable's values; a pooled file's variable with a ``part`` axis has its parts joined
        along its ``seed`` axis (each cut to its own shape, ``<name>__shape``), or is the first
        part's when it has no seed axis (the same in every part)."""
        v = self.ds[name]
        if "part" not in v.dims:
            return self.values(name)
        a = np.moveaxis(self.values(name), v.dims.index("part"), 0)
        dims = [d for d in v.dims if d != "part"]
        if "seed" not in dims:
            return a[0]
        shapes = self.values(name + "__shape") if name + "__shape" in self.ds else [a.shape[1:]] * len(a)
        cut = [p[tuple(slice(0, int(s)) for s in shape)] for p, shape in zip(a, shapes)]
        return np.concatenate(cut, axis=dims.index("seed"))

    def _matching(self, match, done_only=True):
        """``{seed: (tag, fields, completed)}`` of the completed runs (``done_only=False``: of all
        runs) whose fields equal ``match`` (numbers as numbers)."""
        def same(x, y):
            try:
                return float(x) == float(y)
            except (TypeError, ValueError):
                return x == y

        out = {}
        for tag, (fields, done) in self.runs.items():
            if (done or not done_only) and all(k in fields and same(fields[k], v) for k, v in match.items()):
                seed = int(fields["seed"])
                if seed in out:
                    raise ValueError(f"{self.path}: two {'completed ' if done_only else ''}runs of seed {seed} "
                                     f"match {match}")
                out[seed] = (tag, fields, done)
        return out

    def completed(self, /, **match):
        """Whether each seed's run matching ``match`` completed (from ``runs_json``), one value per
        seed of the file: 1 where it completed, 0 where it ran but did not (it diverged or
        stopped), NaN where the seed has no such run."""
        runs = self._matching(match, done_only=False)
        return np.asarray([float(runs[s][2]) if s in runs else np.nan for s in self.seeds])

    def meta(self, field, /, **match):
        """``field`` of each seed's completed run matching ``match`` (from ``runs_json``), one value
        per seed of the file (NaN: no such completed run)."""
        runs = self._matching(match)
        return np.asarray([float(runs[s][1][field]) if s in runs else np.nan for s in self.seeds])

    def per_run(self, name, /, at=None, **match):
        """Each seed's array of the completed run matching ``match`` in the variable ``name`` (stacked
        over the settings its runs' tags name), cut to the run's own shape, its first axis indexed by
        ``at`` if given; stacked over the file's seeds, padded with NaN (a seed without such a run:
        all NaN)."""
        return self._stacked(name, at, match, lambda a: np.asarray(a, np.float64))

    def correct(self, name, n, /, at=None, **match):
        """:meth:`per_run` of a variable of packed per-example results, unpacked: 0/1 per example, ``n`` of them."""
        return self._stacked(name, at, match, lambda a: unpack(a, n))

    def _stacked(self, name, at, match, convert):
        v = self.ds[name]
        template, values = v.attrs["key"], self.values(name)
        shaped = name + "__shape" in self.ds and self.ds[name + "__shape"].dims[-1].startswith("rank_")
        labels = {d: list(map(str, self.ds[d].values)) for d in v.dims if d in self.ds.coords}
        rows = {}
        for seed, (tag, _, _) in self._matching(match).items():
            settings = {}
            for key, value in SETTING.findall(tag):  # a name seen twice is name_2, then name_3, ...
                name_, k = key, 2
                while name_ in settings:
                    name_, k = f"{key}_{k}", k + 1
                settings[name_] = value
            try:
                key = template.format(**settings)
            except KeyError:
                continue
            if f"/{tag}/" not in f"/{key}/":
                raise ValueError(f"{self.path}: run {tag!r} is not one of {name} (its key is {template!r})")
            if "part" in v.dims:
                raise ValueError(f"{self.path}: {name} holds one run in several parts; read it with var()")
            at_run = tuple(labels[d].index(settings[d]) for d in v.dims if d in settings)
            a = values[at_run]
            if shaped:  # the run's own shape
                a = a[tuple(slice(0, int(s)) for s in self.values(name + "__shape")[at_run])]
            rows[seed] = convert(a if at is None else a[at])
        if not rows:
            raise ValueError(f"{self.path}: no completed run of {name} matches {match}")
        shape = tuple(max(r.shape[i] for r in rows.values()) for i in range(next(iter(rows.values())).ndim))
        out = np.full((len(self.seeds),) + shape, np.nan)
        for i, s in enumerate(self.seeds):
            if s in rows:
                out[(i,) + tuple(slice(0, k) for k in rows[s].shape)] = rows[s]
        return out


def unpack(bits, n):
    """Packed per-example results (``numpy.packbits`` along the last axis) as 0/1, the first ``n``."""
    return np.unpackbits(np.asarray(bits, np.uint8), axis=-1)[..., :int(n)].astype(np.float64)


def slope_weights(x):
    """Least-squares weights of ``log10 x``: ``slope_weights(x) @ v`` is the slope of ``v`` per tenfold ``x``."""
    u = np.log10(np.asarray(x, np.float64))
    return (u - u.mean()) / np.sum((u - u.mean()) ** 2)


def rownorm(x):
    """The Euclidean norm of each row (first axis) of ``x``, over all its other axes."""
    x = np.asarray(x, np.float64)
    return np.sqrt(np.sum(x.reshape(len(x), -1) ** 2, axis=1))


#: everything an expression may call or name, besides the record's var, meta, completed, per_run and correct
FUNCTIONS = {name: getattr(np, name) for name in (
    "abs", "all", "any", "arange", "argmin", "argsort", "cumprod", "einsum", "exp", "isfinite", "isnan", "log",
    "log10", "max", "maximum", "mean", "min", "nanmean", "quantile", "stack", "sqrt", "sum", "take_along_axis",
    "where", "zeros_like")}
FUNCTIONS.update(unpack=unpack, slope_weights=slope_weights, rownorm=rownorm, inf=np.inf, nan=np.nan)
_NODES = (ast.Expression, ast.Call, ast.Name, ast.Load, ast.Constant, ast.List, ast.Tuple, ast.Subscript, ast.Slice,
          ast.UnaryOp, ast.USub, ast.UAdd, ast.Invert, ast.Not, ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.Div,
          ast.Pow, ast.MatMult, ast.BitAnd, ast.BitOr, ast.Compare, ast.Gt, ast.GtE, ast.Lt, ast.LtE, ast.Eq,
          ast.NotEq, ast.keyword)


def evaluate(text: str, names: dict):
    """The value of the expression ``text`` over ``names``: numbers, names, calls, indexing and
    arithmetic only (no attribute, no lambda, nothing outside ``names``)."""
    tree = ast.parse(text, mode="eval")
    for node in ast.walk(tree):
        if not isinstance(node, _NODES):
            raise ValueError(f"not allowed in a claim's expression: {type(node).__name__} in {text!r}")
        if isinstance(node, ast.Name) and node.id not in names:
            raise ValueError(f"unknown name {node.id!r} in {text!r}")
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a mean of no value is NaN, as it should be
        return eval(compile(tree, "<claim>", "eval"), {"__builtins__": {}}, names)


# ---------------------------------------------------------------------- the gap and its interval
def _widen(c: dict, level: float) -> float:
    """The factor that takes a half-width stated at the claim's ``base_level`` to ``level``: the
    ratio of the two normal quantiles."""
    return float(stats.norm.ppf(0.5 + level / 2) / stats.norm.ppf(0.5 + float(c["base_level"]) / 2))


def paired(rec: Record, c: dict, level: float, names: dict) -> tuple:
    """``(gap, half-width)`` of a paired claim (README: the mean over seeds of a - b, Student's t
    over the seeds, the test set's noise and any reading error added in quadrature)."""
    a, b = (np.asarray(evaluate(c[k], names), np.float64) for k in ("a", "b"))
    keep = np.isfinite(a) & np.isfinite(b) if "keep" not in c else np.asarray(evaluate(c["keep"], names), bool)
    d = (a - b)[keep]
    n, q = d.size, 0.5 + level / 2
    if n == 0:
        return math.nan, math.nan
    seed = math.inf if n == 1 else float(stats.t.ppf(q, n - 1) * d.std(ddof=1) / math.sqrt(n))
    z, test = float(stats.norm.ppf(q)), 0.0
    ex = [np.asarray(evaluate(e, names), np.float64)[keep] for e in c["examples"]] if "examples" in c else None
    tally = _tally(rec, c["tally"], np.asarray(rec.seeds)[keep]) if "tally" in c else None
    if ex is not None and all(np.isfinite(e).all() for e in ex):
        e = (ex[0] - ex[1]).mean(axis=0)
        test = z * float(e.std(ddof=1)) / math.sqrt(e.size)
    elif tally is not None:
        e = (tally[0] - tally[1]) / tally[2]
        test = z * float(e.std(ddof=1)) / math.sqrt(e.size)
    elif "n_test" in c:
        p = min(max(float(np.mean((a[keep] + b[keep]) / 2)), 0.0), 1.0)
        test = z * math.sqrt(2 * p * (1 - p) / int(c["n_test"]))
    if "reading" in c:  # a half-width at base_level, e.g. half the spacing of the snapshots a value is read from
        test = math.hypot(test, float(evaluate(c["reading"], names)) * _widen(c, level))
    return float(d.mean()), (math.hypot(seed, test) if math.isfinite(seed) else seed)


def _tally(rec: Record, settings, seeds):
    """``(a_only, b_only, seeds)`` of the tallied pair of settings ``(a, b)`` when it counts exactly
    ``seeds`` (else ``None``: then the unpaired bound applies)."""
    if "tally_a_only" not in rec.ds:
        return None
    pairs = list(zip(map(str, rec.ds["tally_setting_a"].values), map(str, rec.ds["tally_setting_b"].values)))
    a, b = settings
    flip = (a, b) not in pairs
    if flip and (b, a) not in pairs:
        return None
    i = pairs.index((b, a) if flip else (a, b))
    counted = rec.ds["tally_seeds"].values[i]
    if sorted(int(s) for s in counted if s >= 0) != sorted(int(s) for s in seeds):
        return None
    x, y = (rec.ds[k].values[i].astype(np.float64) for k in ("tally_a_only", "tally_b_only"))
    return (y, x, len(seeds)) if flip else (x, y, len(seeds))


def bootstrap(rec: Record, c: dict, level: float, names: dict) -> tuple:
    """``(gap, half-width)`` of a claim on a statistic of all seeds together (README): the gap
    ``log10 stat(values[i]) - log10 stat(values[j])``, its interval the standard deviation of the same
    gap over resamples of the seeds times Student's t quantile for the number of seeds. The statistic
    is the expression ``reducer`` over ``v``, the values with the seeds along the last axis."""
    v = np.asarray(evaluate(c["values"], names), np.float64)
    n = v.shape[-1]
    reduce = lambda x: np.asarray(evaluate(c["reducer"], {**FUNCTIONS, "v": x}), np.float64)  # noqa: E731
    idx = np.random.default_rng([int(c["rng_seed"]), n]).integers(0, n, (int(c["resamples"]), n))
    i, j = c["ends"]
    with np.errstate(all="ignore"):
        obs, reps = reduce(v), reduce(v[:, idx])
        gap, boot = float(np.log10(obs[i]) - np.log10(obs[j])), np.log10(reps[i]) - np.log10(reps[j])
    boot = boot[np.isfinite(boot)]
    if not math.isfinite(gap) or boot.size < 2 or n < 2:
        return math.nan, math.nan
    return gap, float(stats.t.ppf(0.5 + level / 2, n - 1) * np.std(boot, ddof=1))


def proportions(rec: Record, c: dict, level: float, names: dict) -> tuple:
    """``(gap, half-width)`` of a claim on two shares of independent runs (README): ``a`` and ``b``
    are 1 or 0 per run (NaN: no run, not counted); the gap is ``k_a / n_a - k_b / n_b``, its interval
    Newcombe's hybrid score interval at ``base_level`` (from the two Wilson score intervals), its
    wider side, widened to ``level`` by the ratio of the normal quantiles."""
    (ka, na), (kb, nb) = ((float(np.sum(x[np.isfinite(x)])), int(np.sum(np.isfinite(x))))
                          for x in (np.asarray(evaluate(c[k], names), np.float64).ravel() for k in ("a", "b")))
    if na == 0 or nb == 0:
        return math.nan, math.nan

    def wilson(k, n):
        ci = stats.binomtest(int(k), int(n)).proportion_ci(confidence_level=float(c["base_level"]), method="wilson")
        return max(0.0, float(ci.low)), min(1.0, float(ci.high))

    pa, pb = ka / na, kb / nb
    (la, ua), (lb, ub) = wilson(ka, na), wilson(kb, nb)
    half = max(math.sqrt((pa - la) ** 2 + (ub - pb) ** 2), math.sqrt((ua - pa) ** 2 + (pb - lb) ** 2))
    return pa - pb, half * _widen(c, level)


STATISTICS = {"paired": paired, "bootstrap": bootstrap, "proportions": proportions}


def claims_of(path) -> list:
    """``[(claim id, its description)]`` of a record file."""
    with h5netcdf.File(path, "r") as f:  # the attributes alone, without reading the variables
        return [(k[len(PREFIX):], json.loads(v)) for k, v in f.attrs.items() if k.startswith(PREFIX)]


def recompute(path) -> list:
    """Every claim a record file describes, recomputed: dicts of its file, claim id, the Findings
    rows it decides, is judged beside and is a part of, its level, gap and half-width."""
    described = claims_of(path)
    if not described:
        return []
    rec = Record(path)
    names = {**FUNCTIONS, "var": rec.var, "meta": rec.meta, "completed": rec.completed, "per_run": rec.per_run,
             "correct": rec.correct}
    out = []
    for cid, c in described:
        scope = dict(names)
        for name, text in c.get("define", {}).items():
            scope[name] = evaluate(text, scope)
        gap, half = STATISTICS[c["statistic"]](rec, c, float(c["level"]), scope)
        out.append({"file": path.parent.name, "claim": cid, "decides": c.get("decides", []),
                    "beside": c.get("beside", []), "part_of": c.get("part_of", []), "level": c["level"], "gap": gap,
                    "half_width": half})
    return out


def table(paths) -> str:
    """The README's table: per Findings row, its claim and then its parts (the other claims its
    verdict is a conjunction with), each with its file, variables and formula."""
    rows = []
    for path in paths:
        for cid, c in claims_of(path):
            line = (f"`{cid}` | `{path.parent.name}` | {', '.join(f'`{v}`' for v in c['variables'])} | "
                    f"{c['formula']} |")
            rows += [((row, 0, ""), f"| {row} | {line}") for row in c.get("decides", [])]
            rows += [((row, 1, f"{path.parent.name}/{cid}"), f"| {row} (part) | {line}") for row in c.get("part_of", [])]
    head = "| row | claim | file | variables | gap (a - b, per seed) |\n|---|---|---|---|---|"
    return "\n".join([head] + [line for _, line in sorted(rows)])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder", nargs="?", default=str(Path(__file__).resolve().parent),
                   help="the folder of recorded runs (default: this script's)")
    p.add_argument("--all", action="store_true", help="every claim described, not only the Findings' rows")
    p.add_argument("--table", action="store_true", help="print the README's table instead")
    a = p.parse_args(argv)
    paths = sorted(Path(a.folder).glob("*/record.nc"))
    if a.table:
        print(table(paths))
        return 0
    found = [r for path in paths for r in recompute(path)]
    if not a.all:
        found = [{"id": row, "gap": r["gap"], "half_width": r["half_width"]} for r in found for row in r["decides"]]
    clean = lambda x: None if isinstance(x, float) and not math.isfinite(x) else x  # noqa: E731
    print(json.dumps([{k: clean(v) for k, v in r.items()} for r in found], indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
