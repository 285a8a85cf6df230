"""What ``numbered_folders`` gives for one folder, from the regular expression that defines
it (tests of the C and Python twins and of the block encoder's name templates use it)."""

from __future__ import annotations

import re

__all__ = ["DEFINITION", "expected"]

# The definition: the first decimal number (no leading zero, at most 18 digits) between a
# prefix and a suffix of characters that are not decimal digits; a NUL anywhere: none.
DEFINITION = re.compile(r"(\D*)(0|[1-9][0-9]{0,17})(\D.*)?\Z", re.DOTALL)


def expected(folder: str) -> tuple[str, int] | tuple[()]:
    """``folder`` as (``prefix NUL suffix``, its number), or ``()`` when it has none."""
    match = None if "\x00" in folder else DEFINITION.match(folder)
    if match is None:
        return ()
    return f"{match[1]}\x00{match[3] or ''}", int(match[2])
