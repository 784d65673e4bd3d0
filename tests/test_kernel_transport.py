"""The book's kernels encrypt their transport (book/book_extras.py), so a build log carries no
"Kernel is running over TCP without encryption" line per chapter."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BOOK = Path(__file__).resolve().parents[1] / "book"
SCRIPT = textwrap.dedent("""
    import sys, nbformat
    from nbclient import NotebookClient
    sys.path.insert(0, {book!r})
    if sys.argv[1] == "on":
        import book_extras
        assert book_extras.encrypt_kernel_transport()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("6 * 7")])
    NotebookClient(nb, kernel_name="python3", timeout=120).execute()
    print("result", nb.cells[0].outputs[0]["data"]["text/plain"])
""")


def _run(mode):
    return subprocess.run([sys.executable, "-c", SCRIPT.format(book=str(BOOK)), mode], capture_output=True,
                          text=True, timeout=300)


def test_the_kernel_transport_is_encrypted_and_the_warning_gone():
    zmq = pytest.importorskip("zmq")
    if not zmq.has("curve"):
        pytest.skip("pyzmq without CurveZMQ")
    plain, encrypted = _run("off"), _run("on")
    assert plain.returncode == 0 and encrypted.returncode == 0, encrypted.stderr[-2000:]
    assert "result 42" in plain.stdout and "result 42" in encrypted.stdout  # the kernel still runs the cell
    assert "without encryption" in plain.stderr          # what every chapter of a build printed
    assert "without encryption" not in encrypted.stderr
