"""The live demo as a reader uses it: in a Jupyter kernel, driven through the widget protocol.

The test plays the part of JupyterLab. It starts a kernel and runs the chapter's demo cell: with
no widget frontend attached (as under papermill or the book's build) the demo is static HTML.
It then attaches as JupyterLab does (opening the widget control channel), runs the cell again,
collects the widget models the kernel opens (``comm_open``), moves a slider by sending the
same ``comm_msg`` update a browser sends when the slider is released, and waits for the
kernel to push a new PNG into the demo's image widget.
"""

import os
import queue
import re
import time
from pathlib import Path

import pytest

jupyter_client = pytest.importorskip("jupyter_client")

ROOT = Path(__file__).resolve().parents[1]


def _demo_cell_source():
    """The code of the chapter's demo cell, with the chapter's own call."""
    text = (ROOT / "book" / "iterative_linearisation.md").read_text()
    cells = re.findall(r"```\{code-cell\} ipython3\n(.*?)```", text, flags=re.S)
    (cell,) = [c for c in cells if "figures.quintic_demo(" in c]
    return "\n".join(ln for ln in cell.splitlines() if not ln.startswith(":tags:"))


def _drain(kc, until, timeout):
    """Read iopub messages until ``until(msg)`` is true; return every message read."""
    seen, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = kc.get_iopub_msg(timeout=1)
        except queue.Empty:
            continue
        seen.append(msg)
        if until(msg):
            return seen
    raise TimeoutError(f"no matching message within {timeout} s; last: {[m['msg_type'] for m in seen[-5:]]}")


def _run(kc, src, timeout=300):
    msg_id = kc.execute(src)
    msgs = _drain(kc, lambda m: m["parent_header"].get("msg_id") == msg_id
                  and m["msg_type"] == "status" and m["content"]["execution_state"] == "idle", timeout)
    errors = [m["content"] for m in msgs if m["msg_type"] == "error"]
    assert not errors, errors[0]["traceback"][-1] if errors else ""
    return msgs


@pytest.mark.slow
def test_moving_a_slider_in_a_kernel_trains_and_pushes_a_new_image(tmp_path):
    km, kc = jupyter_client.manager.start_new_kernel(kernel_name="python3", cwd=str(ROOT / "book"),
                                                     env={**os.environ, "ITLIN_DEMOS": ""})
    try:
        _run(kc, ("import os; os.environ['ITLIN_RESULTS'] = %r\n"
                  "import itlin.book\nitlin.book.setup()\n"
                  "from itlin.book import runner\nfrom itlin.book.figures import main as figures\n"
                  "live_steps, scale, seed = 50, 'tiny', 0\n"
                  "rec = runner.run('quintic_demo', {'scale': 'tiny', 'Ks': [1, 100], 'learning_rates': [0.01], "
                  "'steps': 40, 'evals': 4, 'kconv_lr': 0.05}, verbose=False)\n") % str(tmp_path / "results"))
        # with no widget frontend attached (papermill, the book's build) the demo is static HTML
        msgs = _run(kc, _demo_cell_source())
        shown = [m["content"]["data"] for m in msgs if m["msg_type"] in ("display_data", "execute_result")]
        assert shown and all("application/vnd.jupyter.widget-view+json" not in d for d in shown)
        assert any('class="itlin-static-demo"' in d.get("text/html", "") for d in shown)
        # attach as JupyterLab does: open the widget control channel; the same cell is now live
        kc.shell_channel.send(kc.session.msg("comm_open", {"comm_id": "control-1", "target_name": "jupyter.widget.control",
                                                           "data": {}}, metadata={"version": "1.0.0"}))
        msgs = _run(kc, _demo_cell_source())
        opened = {m["content"]["comm_id"]: m["content"]["data"]["state"] for m in msgs if m["msg_type"] == "comm_open"}
        sliders = {cid: st for cid, st in opened.items() if st.get("_model_name") == "SelectionSliderModel"}
        images = [cid for cid, st in opened.items() if st.get("_model_name") == "ImageModel"]
        assert len(sliders) == 2 and len(images) == 1, sorted(st.get("_model_name") for st in opened.values())
        (image_id,) = images
        # the demo's view was displayed: the cell's output is the VBox's widget view
        views = [m for m in msgs if m["msg_type"] in ("display_data", "execute_result")
                 and "application/vnd.jupyter.widget-view+json" in m["content"]["data"]]
        assert views
        # move K to a value the record lacks (it is trained live), as the browser does when released
        slider_id, state = next((cid, st) for cid, st in sliders.items() if st["description"] == "K")
        new_index = state["_options_labels"].index("30")
        kc.shell_channel.send(kc.session.msg("comm_msg", {
            "comm_id": slider_id, "data": {"method": "update", "state": {"index": new_index}, "buffer_paths": []}}))

        updates = _drain(kc, lambda m: m["msg_type"] == "comm_msg" and m["content"].get("comm_id") == image_id
                         and m["content"]["data"].get("method") == "update"
                         and ["value"] in m["content"]["data"].get("buffer_paths", []), 300)
        last = updates[-1]
        png = last["buffers"][last["content"]["data"]["buffer_paths"].index(["value"])]
        assert bytes(png).startswith(b"\x89PNG") and len(bytes(png)) > 1000

        def status_of(m):
            st = m["content"].get("data", {}).get("state", {}) if m["msg_type"] == "comm_msg" else {}
            return st.get("value") if isinstance(st.get("value"), str) else None

        # the status line said it was computing the new setting, then names it once drawn
        assert any(status_of(m) and "computing" in status_of(m) and "K = 30" in status_of(m) for m in updates)
        _drain(kc, lambda m: bool(status_of(m)) and "K = 30" in status_of(m) and "computing" not in status_of(m), 60)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
