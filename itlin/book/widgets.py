"""Interactive demos for the book: a static HTML/JS version and a live ipywidgets version.

A demo is a grid of settings (one slider per parameter) and a picture per setting.

* :func:`static_demo` needs no kernel: every picture is computed beforehand and embedded in a
  self-contained HTML snippet (base64 PNG frames, ``<input type="range">`` sliders and a few
  lines of JavaScript that show the frame of the current slider positions). It is what the built
  book shows. Without JavaScript the snippet still shows its initial frame.
* :func:`live_demo` builds the same controls with ``ipywidgets`` for local Jupyter: moving a
  slider calls ``run(**values)`` (itlin code that trains) and ``draw(result)`` (a figure, shown
  in an ``Image`` widget).

Both take their sliders as ``{name: values}`` or a list of :class:`Slider` (with labels for the
values, e.g. ``"∞"`` for ``math.inf``).
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

__all__ = ["Slider", "figure_to_png", "format_value", "live_demo", "static_demo"]


def format_value(v) -> str:
    """A short label for a slider value: ``math.inf`` -> ``"∞"``, ``0.003`` -> ``"0.003"``."""
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float) and math.isinf(v):
        return "∞" if v > 0 else "-∞"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


@dataclass(frozen=True)
class Slider:
    """One slider: its ``name``, the ``values`` it steps through (in order), optional ``labels``
    (strings shown for the values; default :func:`format_value`) and the ``initial`` value
    (default the first)."""

    name: str
    values: Sequence[Any]
    labels: Optional[Sequence[str]] = None
    initial: Any = None

    def __post_init__(self):
        values = tuple(self.values)
        if not values:
            raise ValueError(f"slider {self.name!r} has no values.")
        if len(set(map(_key_part, values))) != len(values):
            raise ValueError(f"slider {self.name!r} has repeated values: {list(values)}.")
        labels = tuple(format_value(v) for v in values) if self.labels is None else tuple(map(str, self.labels))
        if len(labels) != len(values):
            raise ValueError(f"slider {self.name!r}: {len(labels)} labels for {len(values)} values.")
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "labels", labels)
        if self.initial is not None and self.index(self.initial) is None:
            raise ValueError(f"slider {self.name!r}: initial value {self.initial!r} is not one of {list(values)}.")

    def index(self, value) -> Optional[int]:
        """Position of ``value`` among the values (``None`` if absent); floats compare by value."""
        k = _key_part(value)
        for i, v in enumerate(self.values):
            if _key_part(v) == k:
                return i
        return None

    @property
    def initial_index(self) -> int:
        return 0 if self.initial is None else self.index(self.initial)


def _key_part(v):
    """A hashable, float-tolerant form of a slider value (so 1 and 1.0, inf and 'inf' agree)."""
    if isinstance(v, str) and v.strip().lower() in ("inf", "+inf", "infinity"):
        return ("num", math.inf)
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return ("num", float(v))
    return ("other", repr(v))


def _as_sliders(sliders) -> list:
    if isinstance(sliders, Slider):
        return [sliders]
    if isinstance(sliders, Mapping):
        return [s if isinstance(s, Slider) else Slider(name, s) for name, s in sliders.items()]
    out = list(sliders)
    if not out or not all(isinstance(s, Slider) for s in out):
        raise TypeError("sliders must be {name: values} or a non-empty list of Slider.")
    return out


def figure_to_png(fig, *, dpi: Optional[float] = None, close: bool = True, palette: bool = True) -> bytes:
    """PNG bytes of a matplotlib figure (closed afterwards unless ``close=False``).

    ``palette=True`` stores it with an adaptive 256-colour palette (via Pillow when available),
    which makes plots about three times smaller at no visible cost; frames of a static demo are
    embedded in the page, so their size is the page's size.
    """
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    if close:
        import matplotlib.pyplot as plt

        plt.close(fig)
    data = buf.getvalue()
    if palette:
        try:
            from PIL import Image
        except ImportError:  # pragma: no cover - Pillow comes with matplotlib
            return data
        img = Image.open(io.BytesIO(data)).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
        out = io.BytesIO()
        img.save(out, format="PNG", optimize=True)
        if out.tell() < len(data):
            data = out.getvalue()
    return data


def _frame_src(frame, dpi) -> str:
    """A data URI (or URL) for one frame: a matplotlib figure, PNG bytes, an SVG string or a URI."""
    if hasattr(frame, "savefig"):
        frame = figure_to_png(frame, dpi=dpi)
    if isinstance(frame, (bytes, bytearray)):
        data = bytes(frame)
        if data.startswith(b"\x89PNG"):
            return "data:image/png;base64," + base64.b64encode(data).decode("ascii")
        if data.lstrip().startswith(b"<svg") or data.lstrip().startswith(b"<?xml"):
            return "data:image/svg+xml;base64," + base64.b64encode(data).decode("ascii")
        raise ValueError("frame bytes must be a PNG or an SVG image.")
    if isinstance(frame, str):
        s = frame.lstrip()
        if s.startswith("<svg") or s.startswith("<?xml"):
            return "data:image/svg+xml;base64," + base64.b64encode(s.encode("utf-8")).decode("ascii")
        if s.startswith("data:image/"):
            return s
        raise ValueError("a frame given as text must be an SVG document or a data:image/ URI.")
    raise TypeError(f"a frame must be a matplotlib figure, PNG/SVG bytes, SVG text or a data URI, got {type(frame).__name__}.")


def _normalise_key(key, n_sliders):
    if not isinstance(key, tuple):
        key = (key,)
    if len(key) != n_sliders:
        raise ValueError(f"frame key {key!r} has {len(key)} entries for {n_sliders} sliders.")
    return tuple(_key_part(k) for k in key)


_CSS = """
<style>
.itlin-static-demo{border:1px solid #d0d7de;border-radius:6px;padding:.6em .8em;margin:1em 0;
  font-family:var(--pst-font-family-base,system-ui,sans-serif);font-size:.92em}
.itlin-static-demo .itlin-demo-title{font-weight:600;margin-bottom:.3em}
.itlin-static-demo .itlin-demo-controls{display:flex;flex-wrap:wrap;gap:.4em 1.6em;align-items:center}
.itlin-static-demo .itlin-demo-controls label{display:flex;align-items:center;gap:.5em;white-space:nowrap}
.itlin-static-demo input[type=range]{width:11em;margin:0}
.itlin-static-demo output{display:inline-block;min-width:3.5em;font-weight:600;font-variant-numeric:tabular-nums}
.itlin-static-demo .itlin-demo-caption{margin:.4em 0;min-height:1.4em;color:#333}
.itlin-static-demo .itlin-demo-frames img{max-width:100%;height:auto;display:block}
</style>
"""

_JS = """
(function(){
  var root = document.getElementById(%(id)s);
  if (!root) return;
  var captions = %(captions)s, labels = %(labels)s;
  var inputs = root.querySelectorAll("input[type=range][data-slider]");
  var outputs = root.querySelectorAll("output[data-slider]");
  var imgs = root.querySelectorAll("img[data-key]");
  var caption = root.querySelector(".itlin-demo-caption");
  function show(){
    var idx = [];
    for (var i = 0; i < inputs.length; i++){
      idx.push(parseInt(inputs[i].value, 10));
      outputs[i].textContent = labels[i][idx[i]];
    }
    var key = idx.join("-");
    for (var j = 0; j < imgs.length; j++){
      imgs[j].style.display = (imgs[j].getAttribute("data-key") === key) ? "block" : "none";
    }
    caption.textContent = captions[key] || "";
  }
  for (var i = 0; i < inputs.length; i++){ inputs[i].addEventListener("input", show); }
  show();
})();
"""


def _png_width(data: bytes) -> int:
    """Width in pixels from a PNG's IHDR chunk."""
    return int.from_bytes(data[16:20], "big")


def static_demo(frames: Mapping, sliders, *, captions: Optional[Mapping] = None, title: Optional[str] = None,
                alt: Optional[str] = None, dpi: Optional[float] = None, pixel_ratio: Optional[float] = None,
                html_only: bool = False):
    """A self-contained HTML snippet that shows one precomputed frame per slider setting.

    Args:
      frames: ``{key: frame}``; ``key`` is a tuple with one value per slider (in slider order;
        a bare value when there is one slider) and ``frame`` a matplotlib figure (rendered to
        PNG and closed), PNG or SVG bytes, SVG text, or a ``data:image/...`` URI. Every point
        of the slider grid needs a frame.
      sliders: ``{name: values}`` or a list of :class:`Slider`.
      captions: optional ``{key: text}`` shown above the frame (e.g. the number of feature
        updates of that setting).
      title: optional heading inside the box.
      alt: alternative text of the images (default: the caption or the slider values).
      dpi: resolution for frames given as figures (default: 200, twice the book's 100 dpi,
        so they are sharp on HiDPI screens).
      pixel_ratio: image pixels per CSS pixel of PNG frames, which are then shown at their
        width divided by it (at most the column's width): 2 for frames drawn at dpi 200 from
        figures sized for the book (``figure.dpi`` 100). Default: ``dpi / 100`` for frames
        given as figures, 1 for PNG bytes.
      html_only: return the HTML string instead of an ``IPython.display.HTML``.

    Returns:
      ``IPython.display.HTML`` (or ``str``). The wrapper is ``<div class="itlin-static-demo">``
      with a fresh random id, and its script finds its elements through that id only, so the
      snippet can be shown any number of times on one page.
    """
    sliders = _as_sliders(sliders)
    n = len(sliders)
    given = {}
    for key, frame in frames.items():
        nk = _normalise_key(key, n)
        if nk in given:
            raise ValueError(f"two frames for the same setting {key!r}.")
        given[nk] = (key, frame)
    caption_of = {}
    for key, text in (captions or {}).items():
        caption_of[_normalise_key(key, n)] = str(text)

    import itertools

    grid = list(itertools.product(*[range(len(s.values)) for s in sliders]))
    missing = []
    for idx in grid:
        nk = tuple(_key_part(s.values[i]) for s, i in zip(sliders, idx))
        if nk not in given:
            missing.append(tuple(s.values[i] for s, i in zip(sliders, idx)))
    if missing:
        raise ValueError(f"no frame for {len(missing)} of the {len(grid)} settings, e.g. {missing[0]!r}.")
    extra = set(given) - {tuple(_key_part(s.values[i]) for s, i in zip(sliders, idx)) for idx in grid}
    if extra:
        raise ValueError(f"frames for settings that no slider offers: {[given[k][0] for k in extra][:3]!r}.")

    uid = "itlin-demo-" + uuid.uuid4().hex[:12]
    initial = tuple(s.initial_index for s in sliders)
    parts = [_CSS, f'<div class="itlin-static-demo" id="{uid}">']
    if title:
        parts.append(f'<div class="itlin-demo-title">{html.escape(title)}</div>')
    parts.append('<div class="itlin-demo-controls">')
    for i, s in enumerate(sliders):
        parts.append(
            f'<label>{html.escape(s.name)} <input type="range" min="0" max="{len(s.values) - 1}" step="1" '
            f'value="{initial[i]}" data-slider="{i}" aria-label="{html.escape(s.name, quote=True)}">'
            f'<output data-slider="{i}">{html.escape(s.labels[initial[i]])}</output></label>')
    parts.append("</div>")
    js_captions = {}
    imgs = []
    for idx in grid:
        nk = tuple(_key_part(s.values[i]) for s, i in zip(sliders, idx))
        key_str = "-".join(map(str, idx))
        text = caption_of.get(nk, ", ".join(f"{s.name} = {s.labels[i]}" for s, i in zip(sliders, idx)))
        js_captions[key_str] = text
        frame = given[nk][1]
        ratio = pixel_ratio
        if hasattr(frame, "savefig"):
            frame = figure_to_png(frame, dpi=dpi or 200)
            ratio = ratio or (dpi or 200) / 100
        src = _frame_src(frame, dpi)
        width = ""
        if isinstance(frame, (bytes, bytearray)) and bytes(frame).startswith(b"\x89PNG"):
            width = f"width:{_png_width(bytes(frame)) / (ratio or 1):.0f}px;"
        shown = "block" if idx == initial else "none"
        imgs.append(f'<img data-key="{key_str}" style="display:{shown};{width}" '
                    f'alt="{html.escape(alt or text, quote=True)}" src="{src}">')
    parts.append(f'<div class="itlin-demo-caption">{html.escape(js_captions["-".join(map(str, initial))])}</div>')
    parts.append('<div class="itlin-demo-frames">' + "".join(imgs) + "</div>")
    script = _JS % {"id": json.dumps(uid), "captions": json.dumps(js_captions, ensure_ascii=False),
                    "labels": json.dumps([list(s.labels) for s in sliders], ensure_ascii=False)}
    parts.append(f"<script>{script}</script>")
    parts.append("</div>")
    text = "\n".join(parts)
    if html_only:
        return text
    from IPython.display import HTML

    return HTML(text)


def live_demo(run: Callable[..., Any], draw: Callable[[Any], Any], sliders, *, cache: bool = True,
              description: Optional[str] = None, dpi: float = 100):
    """An ``ipywidgets`` demo for local Jupyter: sliders, a status line and a figure.

    Args:
      run: ``run(**values) -> result`` with one keyword per slider (this is where training
        happens: pass itlin code, e.g. a function calling :func:`itlin.fit`).
      draw: ``draw(result) -> matplotlib figure``.
      sliders: ``{name: values}`` or a list of :class:`Slider`; each becomes an
        ``ipywidgets.SelectionSlider`` that acts when released (``continuous_update=False``).
        Names must be valid keyword names of ``run``.
      cache: keep results, so that returning to a setting is instant.
      description: an optional line of text above the sliders.
      dpi: resolution of the figure.

    Returns:
      an ``ipywidgets.VBox``; display it (the last expression of a cell). The first setting is
      trained and drawn when the demo is built. Its ``.controls`` attribute is
      ``{name: slider}``, ``.image`` the figure's ``ipywidgets.Image`` and ``.update()``
      redraws for the current values.

    The figure is shown as an ``Image`` widget whose value is replaced on every change, rather
    than through ``interactive_output``: that one prints into an ``Output`` widget, and
    executing such a notebook headless (papermill/nbclient, as the book's build does) hung
    intermittently in our runs, with kernel and client both waiting.
    """
    import ipywidgets as W

    sliders = _as_sliders(sliders)
    controls = {}
    for s in sliders:
        if not s.name.isidentifier():
            raise ValueError(f"slider name {s.name!r} must be a Python identifier (it is passed to run as a keyword).")
        controls[s.name] = W.SelectionSlider(options=list(zip(s.labels, s.values)), value=s.values[s.initial_index],
                                             description=s.name, continuous_update=False,
                                             style={"description_width": "initial"},
                                             layout=W.Layout(width="22em"))
    status = W.HTML()
    image = W.Image(format="png", layout=W.Layout(max_width="100%"))
    results: dict = {}

    def update(change=None):
        values = {name: c.value for name, c in controls.items()}
        key = tuple(_key_part(values[s.name]) for s in sliders)
        label = ", ".join(f"{s.name} = {format_value(values[s.name])}" for s in sliders)
        if cache and key in results:
            result = results[key]
        else:
            status.value = f"<i>training ({html.escape(label)}) …</i>"
            try:
                result = run(**values)
            except Exception as err:  # keep the demo alive; say what went wrong
                status.value = f"<b>{html.escape(label)}: {html.escape(type(err).__name__)}: {html.escape(str(err))}</b>"
                return
            if cache:
                results[key] = result
        image.value = figure_to_png(draw(result), dpi=dpi, palette=False)
        status.value = html.escape(label)

    for c in controls.values():
        c.observe(update, names="value")
    update()
    head = [W.HTML(html.escape(description))] if description else []
    box = W.VBox(head + [W.HBox(list(controls.values())), status, image])
    box.controls = controls
    box.results = results
    box.image = image
    box.update = update
    return box
