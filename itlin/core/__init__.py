"""The core of itlin: the algorithms, importing only jax, optax and numpy.

* :mod:`~itlin.core.linearise` — the linearisation primitive (``f_lin``, stored ``J v`` /
  ``J^T r``, the empirical NTK);
* :mod:`~itlin.core.schedules` — when to relinearise (rules ``step -> bool`` and adaptive
  ``init``/``update`` schedules);
* :mod:`~itlin.core.train` — iterative linearised training: a pure ``init``/``step`` trainer;
* :mod:`~itlin.core.loop` — drivers: compiled loops, mini-batches, evaluation; the history a
  run records in :mod:`~itlin.core.history`;
* :mod:`~itlin.core.gauss_newton` — damped Gauss-Newton in kernel form;
* :mod:`~itlin.core.flow` — the closed-form gradient flow of a linearised model;
* :mod:`~itlin.core.losses`, :mod:`~itlin.core.model`, :mod:`~itlin.core.parallel`.

Everything public is re-exported flat by :mod:`itlin`. Nothing here imports the research
support (:mod:`itlin.data`, :mod:`itlin.models`, :mod:`itlin.metrics`) or the book's machinery
(:mod:`itlin.book`).
"""
