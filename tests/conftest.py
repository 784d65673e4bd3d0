import os

# Progress bars stay quiet in the test suite, and JAX stays on the CPU.
os.environ.setdefault("ITLIN_QUIET", "1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
