"""Builds the optional C extension ``objectspace.collections._core``; the metadata is in pyproject.toml.

``optional=True``: without a C compiler the package still installs, and the pure-Python
classes of ``objectspace.collections._pycore`` are used instead.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("objectspace.collections._core", ["src/objectspace/collections/_core.c"], optional=True),
    ],
)
