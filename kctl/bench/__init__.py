"""Benchmarks: each prints its figures and rewrites its own section of docs/benchmarks.md.

Product code never imports this package; it imports the product.
"""
