"""The book's demos: declared once, live in Jupyter and static in the built book.

A :class:`Demo` is its knobs (:class:`Knob`: a name, the values it steps through, a default) and
one function from knob values to what is shown: a matplotlib figure, or a :class:`View` (a
figure, a table of rows and a line of text), or data that a ``draw`` function turns into either.
From that one declaration it renders two ways:

* :meth:`Demo.live`, for local Jupyter: one ``ipywidgets`` slider per knob, acting when released;
  the function runs for the chosen values (cached, so a setting seen before is instant) while a
  status line says it is computing;
* :meth:`Demo.static`, for the built book: the function runs for every point of the knob grid
  when the page is built, and the page carries every frame (PNG images, tables as HTML) with
  range sliders and a few lines of JavaScript that show the frame of the sliders' positions. It
  needs no kernel and no network, and without JavaScript it still shows the default frame.

Displayed as the last expression of a cell, a demo is live where a widget frontend is attached
(JupyterLab, Notebook 7; ``python -m itlin.book.live CHAPTER`` opens a chapter so) and static
elsewhere: the book's build, papermill, ``python -m itlin.book.run`` (:func:`live_mode`).
Chapters write no HTML or JavaScript: this module does.

>>> import matplotlib.pyplot as plt
>>> def draw(slope):
...     fig, ax = plt.subplots(figsize=(2, 1))
...     ax.plot([0, 1], [0, slope])
...     return fig
>>> demo = Demo([Knob("slope", [1, 2, 3], default=2)], draw, title="a line")
>>> html = demo.static(html_only=True)
>>> html.count('class="itlin-demo-frame"'), html.count('type="range"')
(3, 1)
"""

from __future__ import annotations

import base64
import html
import io
import itertools
import json
import math
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Optional, Sequence

__all__ = ["DEMOS_ENV", "Demo", "Knob", "View", "figure_to_png", "format_value", "live_mode"]

#: ``live`` or ``static`` forces how a displayed :class:`Demo` renders (see :func:`live_mode`)
DEMOS_ENV = "ITLIN_DEMOS"


def live_mode() -> bool:
    """Whether a displayed :class:`Demo` renders live (``ipywidgets``) rather than as static frames.

    ``$ITLIN_DEMOS`` decides when set: ``live`` (``python -m itlin.book.live`` sets it) or
    ``static`` (the book's build sets it). Otherwise a demo is live when a widget frontend is
    connected to this kernel: JupyterLab, Notebook 7 and other ipywidgets 8 frontends open the
    widget control channel when they attach, while papermill, nbclient and a plain Python never do.
    """
    value = os.environ.get(DEMOS_ENV, "").strip().lower()
    if value in ("live", "static"):
        return value == "live"
    if value:
        raise ValueError(f"${DEMOS_ENV} is 'live' or 'static' (or unset), got {value!r}.")
    try:
        from ipywidgets import Widget
    except ImportError:  # pragma: no cover - ipywidgets comes with the book's extra
        return False
    return getattr(Widget, "_control_comm", None) is not None


def format_value(v) -> str:
    """A short label for a knob value: ``math.inf`` -> ``"∞"``, ``0.003`` -> ``"0.003"``.

    >>> format_value(math.inf), format_value(0.003), format_value(True)
    ('∞', '0.003', 'True')
    """
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float) and math.isinf(v):
        return "∞" if v > 0 else "-∞"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _key_part(v):
    """A hashable, float-tolerant form of a knob value (so 1 and 1.0, inf and 'inf' agree)."""
    if isinstance(v, str) and v.strip().lower() in ("inf", "+inf", "infinity"):
        return ("num", math.inf)
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return ("num", float(v))
    return ("other", repr(v))


@dataclass(frozen=True)
class Knob:
    """One control of a demo.

    ``name`` is the keyword the demo's function receives; ``values`` the settings it steps
    through in the built book (one frame each); ``default`` the setting shown first (default: the
    first value); ``label`` the name shown beside the slider (default: ``name`` with spaces);
    ``labels`` the text shown for each value (default :func:`format_value`); ``live`` the values
    offered in Jupyter, where each setting is computed on demand (default: ``values``; it must
    contain ``default``), e.g. a finer grid than the book can afford to pre-render.

    >>> Knob("K", [1, 10, math.inf], default=10).labels
    ('1', '10', '∞')
    """

    name: str
    values: Sequence[Any]
    default: Any = None
    label: Optional[str] = None
    labels: Optional[Sequence[str]] = None
    live: Optional[Sequence[Any]] = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"a knob's name is the keyword its function receives: a Python identifier, got {self.name!r}.")
        values = tuple(self.values)
        if not values:
            raise ValueError(f"knob {self.name!r} has no values.")
        _unique(self.name, values)
        labels = tuple(format_value(v) for v in values) if self.labels is None else tuple(map(str, self.labels))
        if len(labels) != len(values):
            raise ValueError(f"knob {self.name!r}: {len(labels)} labels for {len(values)} values.")
        default = values[0] if self.default is None else self.default
        if _index(values, default) is None:
            raise ValueError(f"knob {self.name!r}: default {default!r} is not one of its values {list(values)}.")
        live = values if self.live is None else tuple(self.live)
        _unique(self.name, live)
        if _index(live, default) is None:
            raise ValueError(f"knob {self.name!r}: its live values {list(live)} lack the default {default!r}.")
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "labels", labels)
        object.__setattr__(self, "default", default)
        object.__setattr__(self, "live", live)
        object.__setattr__(self, "label", self.label or self.name.replace("_", " "))

    def label_of(self, value) -> str:
        i = _index(self.values, value)
        return self.labels[i] if i is not None else format_value(value)


def _index(values, value) -> Optional[int]:
    k = _key_part(value)
    return next((i for i, v in enumerate(values) if _key_part(v) == k), None)


def _unique(name, values):
    if len({_key_part(v) for v in values}) != len(values):
        raise ValueError(f"knob {name!r} has repeated values: {list(values)}.")


class View(NamedTuple):
    """What a demo shows for one setting: a matplotlib ``figure`` (or PNG bytes), a ``table``
    (a list of rows, each ``{column: text}``; the columns of the first row are shown) and a line
    of ``text`` above them. Any of them may be left out."""

    figure: Any = None
    table: Optional[Sequence[dict]] = None
    text: str = ""


def figure_to_png(fig, *, dpi: Optional[float] = None, close: bool = True, palette: bool = True) -> bytes:
    """PNG bytes of a matplotlib figure (closed afterwards unless ``close=False``).

    ``palette=True`` stores it with an adaptive 256-colour palette (via Pillow), which makes plots
    about three times smaller at no visible cost; a static demo embeds every frame in its page, so
    their size is the page's size.
    """
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    if close:
        import matplotlib.pyplot as plt

        plt.close(fig)
    return _palette(buf.getvalue()) if palette else buf.getvalue()


def _palette(data: bytes) -> bytes:
    """PNG bytes stored with an adaptive 256-colour palette, when that is smaller."""
    from PIL import Image

    img = Image.open(io.BytesIO(data)).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    out = io.BytesIO()
    img.save(out, format="PNG", optimize=True)
    return out.getvalue() if out.tell() < len(data) else data


def _png_width(data: bytes) -> int:
    """Width in pixels from a PNG's IHDR chunk."""
    return int.from_bytes(data[16:20], "big")


def _table_html(rows) -> str:
    if not rows:
        return ""
    cols = list(rows[0])
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(r.get(c, '')))}</td>" for c in cols) + "</tr>"
                   for r in rows)
    return f'<table class="itlin-demo-table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


class _Rendered(NamedTuple):
    png: Optional[bytes]
    table: str
    text: str


@dataclass
class Demo:
    """A demo declared once (see the module's docstring).

    Args:
      knobs: the controls, a :class:`Knob` each (or a single one).
      compute: ``compute(**values) -> figure | View | data``, one keyword per knob.
      draw: ``draw(data) -> figure | View`` when ``compute`` returns data (default: none).
      title: a heading inside the demo's box.
      dpi: resolution of figures; frames drawn at 200 dpi are shown at half their pixel width,
        sharp on HiDPI screens.
      max_frames: the most settings the static version renders (its page carries every one).

    Results are cached by setting, for both versions.
    """

    knobs: Sequence[Knob]
    compute: Callable[..., Any]
    draw: Optional[Callable[[Any], Any]] = None
    title: str = ""
    dpi: float = 200
    max_frames: int = 64
    _cache: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        knobs = [self.knobs] if isinstance(self.knobs, Knob) else list(self.knobs)
        if not knobs or not all(isinstance(k, Knob) for k in knobs):
            raise TypeError("a demo's knobs are a Knob or a non-empty list of Knob.")
        if len({k.name for k in knobs}) != len(knobs):
            raise ValueError(f"two knobs share a name: {[k.name for k in knobs]}.")
        if not callable(self.compute) or (self.draw is not None and not callable(self.draw)):
            raise TypeError("a demo's compute (and draw, if given) are functions.")
        self.knobs = tuple(knobs)
        n = math.prod(len(k.values) for k in self.knobs)
        if n > self.max_frames:
            raise ValueError(f"the demo's grid has {n} settings, more than max_frames={self.max_frames} that its page "
                             "would carry: give its knobs fewer values (offer more as Knob(live=...)).")

    # ------------------------------------------------------------------ computing
    @property
    def default(self) -> dict:
        return {k.name: k.default for k in self.knobs}

    def grid(self) -> list:
        """Every setting of the static version, as ``{name: value}`` (the first knob slowest)."""
        return [dict(zip([k.name for k in self.knobs], vals)) for vals in itertools.product(*[k.values for k in self.knobs])]

    def _key(self, values) -> tuple:
        return tuple(_key_part(values[k.name]) for k in self.knobs)

    def view(self, **values) -> View:
        """What the demo shows at ``values`` (the defaults for knobs left out), cached."""
        unknown = set(values) - {k.name for k in self.knobs}
        if unknown:
            raise TypeError(f"no knob named {', '.join(sorted(unknown))}; knobs: {', '.join(k.name for k in self.knobs)}.")
        values = {**self.default, **values}
        return self._rendered(values, self._key(values))[0]

    def _rendered(self, values, key):
        if key not in self._cache:
            out = self.compute(**values)
            if self.draw is not None:
                out = self.draw(out)
            v = out if isinstance(out, View) else View(figure=out)
            fig = v.figure
            # no palette here: it costs about half a second a frame, worth it only for the page
            # weight of static frames (:meth:`static` applies it), not for a live update
            png = (figure_to_png(fig, dpi=self.dpi, palette=False) if hasattr(fig, "savefig")
                   else (bytes(fig) if fig is not None else None))
            if png is not None and not png.startswith(b"\x89PNG"):
                raise ValueError("a demo's figure is a matplotlib figure or PNG bytes.")
            self._cache[key] = (View(png, v.table, v.text), _Rendered(png, _table_html(v.table), html.escape(v.text or "")))
        return self._cache[key]

    def _label(self, values) -> str:
        return ", ".join(f"{k.label} = {k.label_of(values[k.name])}" for k in self.knobs)

    # ------------------------------------------------------------------ static
    def static(self, *, html_only: bool = False):
        """Every setting of the grid rendered into one self-contained HTML snippet (see the
        module's docstring): an ``IPython.display.HTML``, or the string with ``html_only``."""
        uid = "itlin-demo-" + uuid.uuid4().hex[:12]
        initial = tuple(_index(k.values, k.default) for k in self.knobs)
        parts = [_CSS, f'<div class="itlin-static-demo" id="{uid}">']
        if self.title:
            parts.append(f'<div class="itlin-demo-title">{html.escape(self.title)}</div>')
        parts.append('<div class="itlin-demo-controls">')
        for i, k in enumerate(self.knobs):
            parts.append(f'<label>{html.escape(k.label)} <input type="range" min="0" max="{len(k.values) - 1}" step="1" '
                         f'value="{initial[i]}" data-knob="{i}" aria-label="{html.escape(k.label, quote=True)}">'
                         f'<output data-knob="{i}">{html.escape(k.labels[initial[i]])}</output></label>')
        parts.append("</div>")
        for idx in itertools.product(*[range(len(k.values)) for k in self.knobs]):
            values = {k.name: k.values[i] for k, i in zip(self.knobs, idx)}
            _, r = self._rendered(values, self._key(values))
            shown = "block" if idx == initial else "none"
            inner = f'<p class="itlin-demo-text">{r.text}</p>' if r.text else ""
            if r.png is not None:
                width = _png_width(r.png) / (self.dpi / 100)
                src = "data:image/png;base64," + base64.b64encode(_palette(r.png)).decode("ascii")
                alt = html.escape(r.text or self._label(values), quote=True)
                inner += f'<img style="width:{width:.0f}px" alt="{alt}" src="{src}">'
            inner += r.table
            parts.append(f'<div class="itlin-demo-frame" data-key="{"-".join(map(str, idx))}" '
                         f'style="display:{shown}">{inner}</div>')
        labels = json.dumps([list(k.labels) for k in self.knobs], ensure_ascii=False)
        parts.append(f"<script>{_JS % {'id': json.dumps(uid), 'labels': labels}}</script></div>")
        text = "\n".join(parts)
        if html_only:
            return text
        from IPython.display import HTML

        return HTML(text)

    # ------------------------------------------------------------------ live
    def live(self):
        """The ``ipywidgets`` version: an ``ipywidgets.VBox`` with a slider per knob (over its
        ``live`` values, acting when released), a status line, the figure, the table and the
        text. It draws the default setting when built. Its ``.controls`` are ``{name: slider}``,
        ``.image`` the figure's ``Image``, ``.status`` the status line and ``.update()`` redraws
        for the sliders' values."""
        import ipywidgets as W

        controls = {}
        for k in self.knobs:
            options = [(k.label_of(v), v) for v in k.live]
            controls[k.name] = W.SelectionSlider(options=options, value=k.live[_index(k.live, k.default)],
                                                 description=k.label, continuous_update=False,
                                                 style={"description_width": "initial"}, layout=W.Layout(width="24em"))
        status, text, table = W.HTML(), W.HTML(), W.HTML()
        image = W.Image(format="png", layout=W.Layout(max_width="100%"))

        def update(change=None):
            values = {name: c.value for name, c in controls.items()}
            key = self._key(values)
            label = html.escape(self._label(values))
            start = time.perf_counter()
            if key not in self._cache:
                status.value = f"<b>⏳ computing {label} …</b>"  # shown while it computes
            try:
                _, r = self._rendered(values, key)
            except Exception as err:  # keep the demo alive; say what went wrong
                status.value = f"<b>{label}: {html.escape(type(err).__name__)}: {html.escape(str(err))}</b>"
                return
            image.value = r.png or b""
            image.layout.display = None if r.png else "none"
            text.value, table.value = r.text, r.table
            took = time.perf_counter() - start
            status.value = label + (f" <i>({took:.1f} s)</i>" if took >= 1 else "")

        for c in controls.values():
            c.observe(update, names="value")
        update()
        head = [W.HTML(f"<b>{html.escape(self.title)}</b>")] if self.title else []
        box = W.VBox(head + [W.HBox(list(controls.values()), layout=W.Layout(flex_flow="row wrap")), status, text,
                             image, table])
        box.controls, box.image, box.status, box.table, box.update = controls, image, status, table, update
        return box

    def _ipython_display_(self):
        from IPython.display import display

        display(self.live() if live_mode() else self.static())


_CSS = """<style>
.itlin-static-demo{border:1px solid #d0d7de;border-radius:6px;padding:.6em .8em;margin:1em 0;
  font-family:var(--pst-font-family-base,system-ui,sans-serif);font-size:.92em;overflow-x:auto}
.itlin-static-demo .itlin-demo-title{font-weight:600;margin-bottom:.3em}
.itlin-static-demo .itlin-demo-controls{display:flex;flex-wrap:wrap;gap:.4em 1.6em;align-items:center}
.itlin-static-demo .itlin-demo-controls label{display:flex;align-items:center;gap:.5em;white-space:nowrap}
.itlin-static-demo input[type=range]{width:11em;margin:0}
.itlin-static-demo output{display:inline-block;min-width:3.5em;font-weight:600;font-variant-numeric:tabular-nums}
.itlin-static-demo .itlin-demo-text{margin:.4em 0;color:#333}
.itlin-static-demo img{max-width:100%;height:auto;display:block}
.itlin-static-demo table.itlin-demo-table{font-size:.88em;margin-top:.5em;border-collapse:collapse}
.itlin-static-demo table.itlin-demo-table td,.itlin-static-demo table.itlin-demo-table th{padding:.15em .5em;
  border-bottom:1px solid #eee;text-align:left;vertical-align:top}
</style>"""

_JS = """(function(){
  var root = document.getElementById(%(id)s);
  if (!root) return;
  var labels = %(labels)s;
  var inputs = root.querySelectorAll("input[type=range][data-knob]");
  var outputs = root.querySelectorAll("output[data-knob]");
  var frames = root.querySelectorAll("div.itlin-demo-frame");
  function show(){
    var idx = [];
    for (var i = 0; i < inputs.length; i++){
      idx.push(parseInt(inputs[i].value, 10));
      outputs[i].textContent = labels[i][idx[i]];
    }
    var key = idx.join("-");
    for (var j = 0; j < frames.length; j++){
      frames[j].style.display = (frames[j].getAttribute("data-key") === key) ? "block" : "none";
    }
  }
  for (var i = 0; i < inputs.length; i++){ inputs[i].addEventListener("input", show); }
  show();
})();"""
