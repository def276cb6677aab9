"""Benchmarks that print ratios against a peer measured in the same run.

Run each from the repository root as a module, e.g. ``python -m benchmarks.forward --quick``.
"""
