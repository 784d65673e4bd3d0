"""Short spellings shared by experiments, figures and tables: periods, values, accuracies.

Plain text only (no Markdown, no plotting), so that experiment modules may use them in the
wording of their claims.
"""

from __future__ import annotations

import difflib
import math


def fmt_K(K) -> str:
    """``1``, ``150``, ``inf``, ``5e6``: a short spelling of a period.

    >>> fmt_K(150), fmt_K(5_000_000), fmt_K(float("inf")), fmt_K("inf")
    ('150', '5e6', 'inf', 'inf')
    """
    K = float(K)
    if math.isinf(K):
        return "inf"
    K = int(K)
    if K >= 10_000:
        e = len(str(K)) - 1
        m = K / 10 ** e
        if m == int(m):
            return f"{int(m)}e{e}"
    return str(K)


def K_label(K) -> str:
    """``K=150`` or ``K=∞``.

    >>> K_label(150), K_label(float("inf"))
    ('K=150', 'K=∞')
    """
    return "K=∞" if math.isinf(float(K)) else f"K={fmt_K(K)}"


def legend_label(K, updates: int, extra: str = "") -> str:
    """``K=150: 4 feature updates`` (plus ``extra`` after the period).

    >>> legend_label(100, 1), legend_label(float("inf"), 0, ", lr x10")
    ('K=100: 1 feature update', 'K=∞, lr x10: 0 feature updates')
    """
    word = "feature update" if updates == 1 else "feature updates"
    return f"{K_label(K)}{extra}: {updates:,} {word}"


def fmt_value(v) -> str:
    """A value for a table: ``all`` for "the whole split" sizes (``>= 1e9``), ``∞`` for
    infinity, compact large powers of ten, thousands separators, lists joined by commas, ``—``
    for None.

    >>> fmt_value([1, 100, float("inf")]), fmt_value(10 ** 9), fmt_value(15000), fmt_value(1e-3)
    ('1, 100, ∞', 'all', '15,000', '0.001')
    """
    if isinstance(v, (list, tuple)):
        return ", ".join(fmt_value(x) for x in v)
    if v is None:
        return "—"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, str):
        return "∞" if v == "inf" else v
    if isinstance(v, float) and math.isnan(v):
        return "n/a"
    if isinstance(v, float) and math.isinf(v):
        return "∞" if v > 0 else "-∞"
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) >= 1):
        v = int(v)
        if v >= 10 ** 9:
            return "all"
        return fmt_K(v) if v >= 100_000 else f"{v:,}"
    return f"{v:g}"


def pct(x, digits: int = 1) -> str:
    """An accuracy in percent, ``n/a`` when missing.

    >>> pct(0.8123), pct(float("nan"))
    ('81.2%', 'n/a')
    """
    return "n/a" if x is None or not math.isfinite(float(x)) else f"{100 * float(x):.{digits}f}%"


def pts(x, digits: int = 1) -> str:
    """A difference of accuracies in percentage points.

    >>> pts(0.023)
    '+2.3 points'
    """
    return "n/a" if x is None or not math.isfinite(float(x)) else f"{100 * float(x):+.{digits}f} points"


def fmt_lr(v: float) -> str:
    """A step size or scale: ``1e-3``, ``0.1``, ``1``, ``100``, ``1e3``.

    >>> fmt_lr(1e-3), fmt_lr(0.1), fmt_lr(100), fmt_lr(1000)
    ('1e-3', '0.1', '100', '1e3')
    """
    v = float(v)
    if v == 0 or not math.isfinite(v):
        return f"{v:g}"
    e = math.log10(abs(v))
    return f"1e{int(round(e))}" if abs(e - round(e)) < 1e-9 and (e <= -2 or e >= 3) else f"{v:g}"


def fmt_finite(values, scale: float = 100.0, unit: str = "%", digits: int = 1) -> str:
    """:func:`itlin.book.verdicts.fmt_mean` over the finite values (``n/a`` if none)."""
    import numpy as np

    from .verdicts import fmt_mean

    v = np.asarray(values, np.float64)
    return fmt_mean(v[np.isfinite(v)], scale, unit, digits) if np.isfinite(v).any() else "n/a"


def fmt_lam(lam) -> str:
    """A damping value to three significant digits: ``0.316``, ``1e-06``, ``100``."""
    return f"{float(lam):.3g}"




def did_you_mean(word, options) -> str:
    """``"did you mean 'x'? "`` for the closest option (spelling, initials or prefix), else ``""``.

    >>> did_you_mean("fig2_k_swep", ["fig2_k_sweep", "fig9_damping"]), did_you_mean("lr", ["learning_rate"])
    ("did you mean 'fig2_k_sweep'? ", "did you mean 'learning_rate'? ")
    """
    word, options = str(word), [str(o) for o in options]
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    if not close:
        w = word.lower().replace("-", "_")
        initials = [o for o in options if "".join(part[:1] for part in o.lower().split("_") if part) == w]
        prefix = [o for o in options if len(w) >= 2 and o.lower().startswith(w)]
        close = initials or prefix
    return f"did you mean {close[0]!r}? " if close else ""


__all__ = ["K_label", "did_you_mean", "fmt_K", "fmt_finite", "fmt_lam", "fmt_lr", "fmt_value", "legend_label", "pct",
           "pts"]
