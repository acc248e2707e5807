"""Compiled alternatives to the Python-bound steps of ingest, measured: `python -m bench.compiled`."""
