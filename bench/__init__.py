"""Benchmarks and measurement scripts: `make bench` and the studies whose JSON lands in results/."""
import os

# before any bench module imports jax: XLA's false SIGILL alarms for cached programs stay off, as in train/__init__.py
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
