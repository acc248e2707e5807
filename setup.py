"""The one compiled module: `inboxd.services._words` (the search index's word set, in C). It is
optional: without a C compiler the build goes on without it, and `services/filters.py` hands the
index every word instead (docs/performance.md, "The search index's words"). Everything else about
the package is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "inboxd.services._words",
            sources=["src/inboxd/services/_words.c"],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]
)
