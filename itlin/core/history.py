"""What a run records: :class:`History` (evaluations, the training loss, relinearisation steps
and the run's :class:`Status`).

:func:`itlin.core.loop.fit` fills one in as it trains; the book stores it with each run
(:meth:`History.arrays` and :meth:`History.meta`, read back by :meth:`History.from_arrays`) and
cuts it back to a checkpoint (:meth:`History.truncated`). Both names are re-exported by
:mod:`itlin.core.loop` and by :mod:`itlin`.
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass, field
from typing import Optional

import numpy as np


class Status(str, enum.Enum):
    """A run's status. A ``str`` enum: it compares equal to its value (``Status.COMPLETED ==
    "completed"``) and is stored as that value, so files written before it read the same.

    >>> Status.read("diverged at step 412")      # an old record's text, mapped once, at load
    (<Status.DIVERGED: 'diverged'>, 412)
    >>> Status.DIVERGED.describe(412), Status.COMPLETED.describe()
    ('diverged at step 412', 'completed')
    """

    RUNNING = "running"
    COMPLETED = "completed"
    DIVERGED = "diverged"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @classmethod
    def read(cls, status, diverged_at=None) -> tuple:
        """``(Status, diverged_at)`` from stored values: ``None`` is running, and an old record's
        ``"diverged at step N"`` is ``(DIVERGED, N)``; anything else is refused."""
        text = "running" if status is None else str(status)
        if text.startswith("diverged"):
            m = re.search(r"(\d+)", text)
            if diverged_at is None and m:
                diverged_at = int(m.group(1))
            return cls.DIVERGED, (None if diverged_at is None else int(diverged_at))
        try:
            return cls(text), (None if diverged_at is None else int(diverged_at))
        except ValueError:
            raise ValueError(f"a run status is one of {', '.join(s.value for s in cls)}, got {status!r}.") from None

    def describe(self, diverged_at: Optional[int] = None) -> str:
        """The status in words, the one place a run's status becomes a sentence: ``"completed"``,
        ``"running"``, ``"diverged"`` or ``"diverged at step s"``."""
        if self is Status.DIVERGED and diverged_at is not None:
            return f"diverged at step {int(diverged_at)}"
        return self.value


#: the values of :attr:`History.status` (the :class:`Status` members)
STATUSES = tuple(Status)


def _parse_status(status, diverged_at):
    """``(status, diverged_at)`` from stored values (:meth:`Status.read`)."""
    return Status.read(status, diverged_at)


@dataclass
class History:
    """What a run recorded.

    ``evals``: lists keyed ``step``, ``feature_updates``, ``seconds`` and ``<set>/<metric>``
    (e.g. ``test/accuracy``, ``test/accuracy_lin``), one entry per evaluation. ``loss``: the
    trained model's training loss, one value per ``loss_every`` steps (the mean over those
    steps); ``pending``: the losses of the block not yet full. ``relin_steps``: the steps after
    which it relinearised. ``status``: one of ``STATUSES``, ``"running"``,
    ``"completed"`` or ``"diverged"``, and then ``diverged_at`` is the step (data, not text:
    :meth:`describe` writes ``"diverged at step s"``).

    >>> h = History(loss_every=2)
    >>> h.add_losses([1.0, 3.0, 5.0])          # means over blocks of 2 steps; 5.0 waits for its pair
    >>> h.loss, h.pending
    ([2.0], [5.0])
    >>> h.add_eval({"step": 0, "test/accuracy": 0.5})
    >>> h.eval_array("test/accuracy").tolist(), h.status
    ([0.5], <Status.RUNNING: 'running'>)
    >>> h.mark_diverged(412); h.status == "diverged", h.diverged_at, h.describe()
    (True, 412, 'diverged at step 412')
    """

    evals: dict = field(default_factory=dict)
    loss: list = field(default_factory=list)
    loss_every: int = 1
    relin_steps: list = field(default_factory=list)
    status: Status = Status.RUNNING
    diverged_at: Optional[int] = None
    pending: list = field(default_factory=list, repr=False)

    def __post_init__(self):
        self.status, self.diverged_at = _parse_status(self.status, self.diverged_at)

    def add_eval(self, record: dict):
        """Append one evaluation (missing keys become NaN, new keys are back-filled with NaN)."""
        for k in set(self.evals) | set(record):
            self.evals.setdefault(k, [math.nan] * (len(self.evals.get("step", []))))
        for k in self.evals:
            self.evals[k].append(record.get(k, math.nan))

    def add_losses(self, losses: np.ndarray):
        """Append per-step losses; stored as means over blocks of ``loss_every`` steps."""
        self.pending.extend(np.asarray(losses, np.float64).tolist())
        while len(self.pending) >= self.loss_every:
            block, self.pending = self.pending[:self.loss_every], self.pending[self.loss_every:]
            self.loss.append(float(np.mean(block)))

    def mark_diverged(self, step: int):
        """Set the status to ``"diverged"`` at ``step``."""
        self.status, self.diverged_at = Status.DIVERGED, int(step)

    def mark_completed(self):
        """Set the status to ``"completed"``."""
        self.status, self.diverged_at = Status.COMPLETED, None

    @property
    def diverged(self) -> bool:
        """Whether the run diverged."""
        return self.status is Status.DIVERGED

    def describe(self) -> str:
        """The status in words: ``"completed"``, ``"running"`` or ``"diverged at step s"``."""
        return self.status.describe(self.diverged_at)

    def truncated(self, *, losses: int, relin_steps: int, evals: int, pending=None, status=Status.RUNNING,
                  diverged_at: Optional[int] = None) -> "History":
        """A copy holding the first ``losses`` loss blocks, ``relin_steps`` relinearisation steps
        and ``evals`` evaluations, with ``pending`` (default: the current ones) as the losses of
        the unfinished block: the history as it was at an earlier point of the run."""
        out = History(loss_every=self.loss_every, status=status, diverged_at=diverged_at)
        out.loss = list(self.loss[:losses])
        out.pending = list(self.pending if pending is None else pending)
        out.relin_steps = list(self.relin_steps[:relin_steps])
        out.evals = {k: list(v[:evals]) for k, v in self.evals.items()}
        return out

    def arrays(self) -> dict:
        """The history as a dict of numpy arrays (for saving and plotting)."""
        out = {f"eval/{k}": np.asarray(v, np.float64) for k, v in self.evals.items()}
        out["loss"] = np.asarray(self.loss, np.float64)
        out["loss_pending"] = np.asarray(self.pending, np.float64)
        out["relin_steps"] = np.asarray(self.relin_steps, np.int64)
        return out

    def meta(self) -> dict:
        """The non-array part (status, divergence step, loss_every)."""
        return {"status": self.status.value, "diverged_at": self.diverged_at, "loss_every": self.loss_every}

    @classmethod
    def from_arrays(cls, arrays: dict, meta: dict) -> "History":
        """The inverse of :meth:`arrays` and :meth:`meta` (an old record's status
        ``"diverged at step s"`` reads as ``"diverged"`` with ``diverged_at = s``)."""
        h = cls(loss_every=int(meta.get("loss_every", 1)), status=meta.get("status", "running"),
                diverged_at=meta.get("diverged_at"))
        h.evals = {k[5:]: list(map(float, v)) for k, v in arrays.items() if k.startswith("eval/")}
        h.loss = list(map(float, arrays.get("loss", [])))
        h.pending = list(map(float, arrays.get("loss_pending", [])))
        h.relin_steps = [int(s) for s in arrays.get("relin_steps", [])]
        return h

    def eval_array(self, key: str) -> np.ndarray:
        """One evaluated quantity (e.g. ``"test/accuracy"``), one entry per evaluation."""
        return np.asarray(self.evals.get(key, []), np.float64)


__all__ = ["STATUSES", "History", "Status"]
