"""itlin: iterative linearisation, damped Gauss-Newton and linearised networks in JAX."""

__version__ = "0.1.0"
