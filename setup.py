"""Builds the C extension ``objectspace.collections._core``; the metadata is in pyproject.toml.

The extension is optional by default: without a C compiler the package still installs, and the
pure-Python classes of ``objectspace.collections._pycore`` are used instead. Set
``OBJECTSPACE_REQUIRE_C=1`` in the environment to make a failed compile an install error
(``make test`` does, so that a broken ``_core.c`` cannot pass unnoticed).
"""

import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

REQUIRE_C_ENV = "OBJECTSPACE_REQUIRE_C"
REQUIRE_C = os.environ.get(REQUIRE_C_ENV, "") not in ("", "0")


class BuildExt(build_ext):
    """``build_ext`` that re-raises a failed compile of the extension when it is required."""

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            if REQUIRE_C:
                raise RuntimeError(
                    f"building the C extension {ext.name} failed and {REQUIRE_C_ENV}=1 requires it"
                ) from exc
            raise


setup(
    cmdclass={"build_ext": BuildExt},
    ext_modules=[
        Extension(
            "objectspace.collections._core",
            ["src/objectspace/collections/_core.c"],
            optional=not REQUIRE_C,
        ),
    ],
)
