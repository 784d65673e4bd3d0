"""Checkpoints of :mod:`itlin.book.runner`: the resumable :class:`RunContext` an experiment's
``run(params, ctx)`` trains through (``fit-<tag>.msgpack`` checkpoints, ``stage-<tag>.npz``
sub-results, the clock over sittings) and :func:`pause_on_signals`. :mod:`itlin.book.runner`
re-exports these names."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import time
import warnings
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Optional

import numpy as np

from .. import _io
from .provenance import _now
from .store import _FORMAT, ELAPSED_FILE, WORK_DIR, Plan

PROGRESS_SECONDS = 30.0  # a text progress line per training run at most this often


def quiet() -> bool:
    """True when ``CI`` or ``ITLIN_QUIET`` is set: no progress lines."""
    return bool(os.environ.get("CI")) or os.environ.get("ITLIN_QUIET", "") not in ("", "0")


def in_kernel() -> bool:
    """True inside a Jupyter kernel (a chapter executed by Jupyter Book, papermill or JupyterLab):
    there the runner's lines would land in the page's cell outputs, so it prints none."""
    import sys

    ipython = sys.modules.get("IPython")
    try:
        shell = ipython.get_ipython() if ipython is not None else None
    except Exception:  # noqa: BLE001 - an IPython that cannot say is not a kernel of ours
        return False
    return shell is not None and getattr(shell, "kernel", None) is not None


def log(line: str) -> None:
    """One line of the runner's log (``[itlin] ...``): on standard error, where command-line runs
    keep their progress, and nowhere inside a Jupyter kernel (:func:`in_kernel`), so that no page
    of the book shows a progress log."""
    import sys

    if not in_kernel():
        print(line, file=sys.stderr, flush=True)



# ---------------------------------------------------------------------------------- checkpoints
def _safe_tag(tag: str) -> str:
    """A file-name-safe version of a tag (with a short hash when characters were replaced)."""
    import hashlib

    safe = re.sub(r"[^A-Za-z0-9._=+-]", "_", tag)[:80]
    if safe != tag:
        safe += "-" + hashlib.sha256(tag.encode()).hexdigest()[:8]
    return safe


def _history_snapshot(h) -> tuple:
    """What is needed to rebuild ``h`` as it is now, cheaply (fit keeps appending to it)."""
    return (len(h.loss), list(h.pending), len(h.relin_steps), len(h.evals.get("step", [])),
            h.status, h.diverged_at)


def _history_from_snapshot(h, snap):
    n_loss, pending, n_relin, n_eval, status, diverged_at = snap
    return h.truncated(losses=n_loss, relin_steps=n_relin, evals=n_eval, pending=pending, status=status,
                       diverged_at=diverged_at)


def _final_metrics(history) -> dict:
    out = {}
    for k, v in history.evals.items():
        if k in ("step", "seconds", "feature_updates") or not v:
            continue
        out[k] = float(v[-1])
    return out


# ---------------------------------------------------------------------------------- context
class FitJob(NamedTuple):
    """One training run, the value a :class:`RunContext` makes (:meth:`RunContext.run`): ``tag``
    names it (unique within the experiment, e.g. ``"K=100 seed=3"``), ``trainer`` trains ``state``
    on ``(x, y)`` for ``steps`` steps; the rest are :func:`itlin.fit`'s options of the same names
    (``None``: its defaults)."""

    tag: str
    trainer: Any
    state: Any
    x: Any
    y: Any
    steps: int
    batch_size: Optional[int] = None
    eval_sets: Optional[Mapping] = None
    eval_every: Optional[int] = None
    seed: int = 0
    blowup: Optional[float] = None
    loss_every: Optional[int] = None
    callback: Optional[Callable] = None

    def options(self) -> dict:
        """The job's options for :func:`itlin.fit`."""
        return {k: getattr(self, k) for k in ("batch_size", "eval_sets", "eval_every", "seed", "blowup", "loss_every",
                                              "callback")}


class RunContext:
    """What an experiment's ``run(params, ctx)`` uses to train, save and report.

    Attributes: ``experiment``, ``params`` (resolved), ``path`` (the run's folder), ``hash``,
    ``runs`` (``{tag: summary}`` of the fits so far), ``checkpoint_every_steps``,
    ``checkpoint_every_seconds``, ``show_progress``, ``sittings`` (this process's sitting: 1 for
    a run that starts fresh, one more for each resumption after a checkpoint).
    """

    def __init__(self, plan_: Plan, *, checkpoint_every_steps, checkpoint_every_seconds, progress: bool,
                 verbose: bool):
        self.experiment = plan_.experiment
        self.params = dict(plan_.params)
        self.path = plan_.path
        self.hash = plan_.hash
        self.work = plan_.path / WORK_DIR
        self.checkpoint_every_steps = checkpoint_every_steps
        self.checkpoint_every_seconds = checkpoint_every_seconds
        self.show_progress = bool(progress) and not quiet()
        self.verbose = verbose
        self.runs: dict = {}
        self.histories: dict = {}
        self.resumed: dict = {}
        self._tags: set = set()
        # the clock over sittings: a resumed run adds the seconds its earlier sittings reached by
        # their latest checkpoints (time after that was lost with the process, and is redone here)
        before = _io.read_json(self.work / ELAPSED_FILE) or {}
        self._seconds_before = float(before.get("seconds", 0.0))
        self.sittings = int(before.get("sittings", 0)) + 1
        self._clock = time.perf_counter()

    def elapsed(self) -> float:
        """Wall-clock seconds of this run over all its sittings (see ``sittings``)."""
        return self._seconds_before + time.perf_counter() - self._clock

    def _note_elapsed(self):
        _io.write_json(self.work / ELAPSED_FILE, {"seconds": self.elapsed(), "sittings": self.sittings}, fsync=False)

    # ------------------------------------------------------------ helpers
    @property
    def checkpointing(self) -> bool:
        return self.checkpoint_every_steps is not None or self.checkpoint_every_seconds is not None

    def say(self, msg: str):
        """One line of the log (``[itlin] <experiment>: msg``, :func:`log`: standard error, none in
        a notebook) unless the run is silent."""
        if self.verbose:
            log(f"[itlin] {self.experiment.name}: {msg}")

    def progress(self, iterable: Iterable, *, desc: Optional[str] = None, total: Optional[int] = None):
        """``iterable``, with one text line per item (``desc: i/total``) when progress is on."""
        items = list(iterable) if total is None else iterable
        total = len(items) if total is None else total
        for i, item in enumerate(items, 1):
            yield item
            if self.show_progress:
                self.say(f"{desc or 'progress'}: {i}/{total}")

    def _claim(self, kind: str, tag: str):
        if not isinstance(tag, str) or not tag:
            raise ValueError(f"ctx.{kind} needs a non-empty string tag, got {tag!r}.")
        if tag in self._tags:
            raise ValueError(f"ctx.{kind}: tag {tag!r} is already used in this run; tags must be unique "
                             "(they name the checkpoints).")
        self._tags.add(tag)

    # ------------------------------------------------------------ stage
    def stage(self, tag: str, fn: Callable[[], Any]):
        """Compute ``fn()`` once and keep it: on a resumed run, the saved value is returned.

        ``fn`` returns a dict (nested dicts allowed) of arrays, numbers or strings, or a single
        array. The value returned is the saved one (numpy arrays), the same on the first run as
        on a resumed one. Use it for expensive sub-results that are not training runs (e.g. a
        vmapped Gauss-Newton sweep); keep each stage deterministic.
        """
        self._claim("stage", tag)
        path = self.work / f"stage-{_safe_tag(tag)}.npz"
        if path.exists():
            try:
                flat, paths, meta = _io.load_tree(path)
                if meta.get("tag") != tag:
                    raise ValueError(f"it holds stage {meta.get('tag')!r}")
                self.say(f"stage {tag}: loaded from {path.name}")
                return _io.unflatten_tree(flat, paths)
            except Exception as err:
                warnings.warn(f"itlin.book.runner: stage file {path} is unusable ({err}); recomputing the stage.",
                              RuntimeWarning, stacklevel=2)
        value = fn()
        flat, paths = _io.flatten_tree(value, what=f"stage {tag!r}")
        if self.checkpointing:
            _io.save_tree(path, value, {"format": _FORMAT, "kind": "stage", "tag": tag, "saved_at": _now()},
                          what=f"stage {tag!r}", checksum=False)
            self._note_elapsed()
        return _io.unflatten_tree(flat, paths)

    # ------------------------------------------------------------ fit
    def run(self, job: FitJob):
        """Make the training run ``job`` (:meth:`fit` with its fields)."""
        return self.fit(job.tag, job.trainer, job.state, job.x, job.y, job.steps, **job.options())

    def fit(self, tag: str, trainer, state, x, y, steps: int, **fit_kwargs):
        """:func:`itlin.fit` with checkpoints; returns its :class:`itlin.FitResult`.

        ``tag`` names the training run (unique within the experiment, e.g. ``"K=100"``). If a
        checkpoint of this run exists it is restored (the fresh ``state`` is the template its
        pytree paths are matched against) and training continues from there; a run that had
        already finished is returned at once. Checkpoints are saved from ``fit``'s callback every
        ``checkpoint_every_steps`` steps or ``checkpoint_every_seconds`` seconds, whichever
        comes first, and when the run ends (completed or diverged). ``fit_kwargs`` go to
        :func:`itlin.fit` (``batch_size``, ``eval_sets``, ``eval_every``, ``seed``, ``blowup``,
        ...); ``history`` and ``progress`` are managed here.
        """
        from ..core.loop import FitResult
        from ..core.loop import fit as train_fit

        self._claim("fit", tag)
        if "history" in fit_kwargs:
            raise TypeError("ctx.fit manages the history itself (it restores it from the checkpoint); "
                            "do not pass history=.")
        user_cb = fit_kwargs.pop("callback", None)
        steps = int(steps)
        fingerprint = _io.jsonable({
            "steps": steps,
            "seed": int(fit_kwargs.get("seed", 0)),
            "eval_every": fit_kwargs.get("eval_every"),
            "loss_every": fit_kwargs.get("loss_every"),
            "batch_size": fit_kwargs.get("batch_size"),
            "blowup": fit_kwargs.get("blowup"),
            "x": [list(np.shape(x)), str(getattr(x, "dtype", ""))],
            "y": [list(np.shape(y)), str(getattr(y, "dtype", ""))],
            "eval_sets": sorted((fit_kwargs.get("eval_sets") or {}).keys()),
            "schedule": trainer.schedule.spec,
        })
        path = self.work / f"fit-{_safe_tag(tag)}.msgpack"

        history, resumed_from = None, None
        restored = self._restore_fit(path, tag, state, fingerprint) if path.exists() else None
        if restored is not None:
            state, history, done = restored
            if done:
                self.say(f"{tag}: finished earlier ({history.status}, step {int(state.step)}); restored")
                result = FitResult(state, history)
                self._summarize(tag, result, steps, resumed_from=int(state.step))
                return result
            resumed_from = int(state.step)
            self.resumed[tag] = resumed_from
            self.say(f"resuming {tag} from step {resumed_from}")

        every_steps, every_seconds = self.checkpoint_every_steps, self.checkpoint_every_seconds
        mark = {"step": int(state.step), "time": time.monotonic(), "saved": None, "said": time.monotonic()}
        last = {}

        def save(st, hist, done):
            self._save_fit(path, tag, st, hist, fingerprint, done)

        def callback(st, hist):
            step = int(st.step)
            if self.checkpointing:
                last["state"], last["snap"], last["history"] = st, _history_snapshot(hist), hist
                due = (every_steps is not None and step - mark["step"] >= every_steps) or \
                      (every_seconds is not None and time.monotonic() - mark["time"] >= every_seconds)
                if due:
                    save(st, hist, False)
                    mark.update(step=step, time=time.monotonic(), saved=step)
            if self.show_progress and time.monotonic() - mark["said"] >= PROGRESS_SECONDS:
                mark["said"] = time.monotonic()
                loss = hist.loss[-1] if hist.loss else float("nan")
                self.say(f"{tag}: step {step:,}/{steps:,}, loss {loss:.4g}, {int(st.updates):,} feature updates")
            if user_cb is not None:
                user_cb(st, hist)

        try:
            result = train_fit(trainer, state, x, y, steps, history=history, callback=callback, **fit_kwargs)
        except KeyboardInterrupt:
            # Keep what was reached: the state and history as of the latest chunk.
            if self.checkpointing and last and mark["saved"] != int(last["state"].step):
                save(last["state"], _history_from_snapshot(last["history"], last["snap"]), False)
                self.say(f"{tag}: interrupted; checkpoint saved at step {int(last['state'].step)}")
            raise
        if self.checkpointing:
            save(result.state, result.history, True)
        self._summarize(tag, result, steps, resumed_from=resumed_from)
        return result

    def _save_fit(self, path, tag, state, history, fingerprint, done):
        from flax import serialization

        meta = {"format": _FORMAT, "kind": "fit", "tag": tag, "step": int(state.step), "done": bool(done),
                "history_meta": history.meta(), "fingerprint": fingerprint, "saved_at": _now()}
        body = serialization.msgpack_serialize({"state": serialization.to_state_dict(state),
                                                "history": history.arrays(), "meta": json.dumps(meta)})
        blob = serialization.msgpack_serialize({"body": body, "sha256": hashlib.sha256(body).hexdigest()})
        _io.atomic_write(path, lambda fh: fh.write(blob), fsync=False)
        self._note_elapsed()

    def _restore_fit(self, path, tag, template, fingerprint):
        import jax
        from flax import serialization

        from ..core.loop import History

        try:
            outer = serialization.msgpack_restore(path.read_bytes())
            if hashlib.sha256(outer["body"]).hexdigest() != outer["sha256"]:
                raise ValueError("its contents do not match their checksum")
            raw = serialization.msgpack_restore(outer["body"])
            meta = json.loads(raw["meta"])
            if meta.get("tag") != tag or meta.get("kind") != "fit":
                raise ValueError(f"it holds {meta.get('kind')} {meta.get('tag')!r}")
            if meta.get("fingerprint") != fingerprint:
                raise ValueError(f"it was made by a different call (saved {meta.get('fingerprint')}, now {fingerprint})")
            state = serialization.from_state_dict(template, raw["state"])
            spec = lambda t: jax.tree_util.tree_map(lambda a: (np.shape(a), np.asarray(a).dtype.str), t)
            if spec(state) != spec(template):
                raise ValueError("its state does not have the shapes and dtypes of the fresh state")
            history = History.from_arrays(dict(raw["history"]), meta["history_meta"])
        except Exception as err:
            warnings.warn(f"itlin.book.runner: checkpoint {path} is unusable ({err}); starting {tag} from scratch.",
                          RuntimeWarning, stacklevel=3)
            return None
        return state, history, bool(meta.get("done"))

    def _summarize(self, tag, result, steps, resumed_from):
        h = result.history
        self.histories[tag] = h
        self.runs[tag] = {
            "status": h.status.value,
            "diverged_at": h.diverged_at,
            "steps": int(result.state.step),
            "target_steps": int(steps),
            "feature_updates": int(result.state.feature_updates),
            "loss_every": int(h.loss_every),
            "resumed_from": resumed_from,
            "final": _final_metrics(h),
        }



# ---------------------------------------------------------------------------------- signals
def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"received {signal.Signals(signum).name}")


def pause_on_signals(signals: Iterable[int] = (signal.SIGINT, signal.SIGTERM)) -> dict:
    """Make each of ``signals`` raise KeyboardInterrupt in the main thread, so a run stopped
    politely saves a checkpoint of the training run in progress and the same call resumes it.

    Two cases need it: a shell without job control starts a background command (``nohup ... &``)
    with SIGINT *ignored*, so ``kill -INT`` does nothing; and Python dies on SIGTERM (what
    ``kill``, ``timeout`` and cluster schedulers send) without saving, losing the work since the
    last periodic checkpoint. Call it once, from the main thread, before :func:`run`. Returns
    the previous handlers, ``{signal: handler}``, for :func:`signal.signal` to restore.
    """
    return {s: signal.signal(s, _interrupt) for s in signals}


__all__ = ["FitJob", "RunContext", "pause_on_signals", "quiet"]
