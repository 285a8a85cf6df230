"""Table names in a block: each name as its folder and last path component (interned per
block), folders that differ by one decimal number as a template and the numbers, and user
names made safe as one path component.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import accumulate, compress
from operator import itemgetter, not_
from typing import Any, cast
from urllib.parse import quote

import xxhash

from objectspace.collections import numbered_folders, table_heads
from objectspace.storage.blocks.columns import _deltas, _read_uvarints, _uvarints
from objectspace.tables import TableChanges

__all__ = ["block_heads", "path_component"]

_FIRST = itemgetter(0)
_SECOND = itemgetter(1)


def path_component(name: str) -> str:
    """A user name as one path component: percent-encoded, dots too (no ``..``); a long
    one is cut and made unique by a hash of the whole name (file systems cap a component
    at 255 bytes)."""
    encoded = quote(name, safe="").replace(".", "%2E")
    if len(encoded) > 96:
        encoded = f"{encoded[:80]}-{xxhash.xxh64_hexdigest(name.encode('utf-8'))}"
    return encoded


def block_heads(changes: Mapping[str, TableChanges]) -> list[str]:
    """The table folders of a block (each once, in first-seen order)."""
    return table_heads(list(changes))[0]


_PLAIN: tuple[()] = ()  # a folder that is not numbered


def _name_templates(folders: Sequence[str]) -> tuple[list[int], list[str], list[list[Any]]] | None:
    """Folders that differ by their first decimal number only (a key's objects with integer
    keys: ``state/item/17/buf``, ``state/item/203/buf``) as templates: the new order of
    ``folders`` (the others first, as they were, then each template's folders by number),
    the other folders' names, and per template ``[prefix NUL suffix, numbers]``, the numbers
    delta-encoded as unsigned LEB128 varints. ``None`` when no two folders share a
    template. The numbers cost a byte or two each where the names cost what zstd makes of
    their digits and the repeated text."""
    # Each folder as (template, number), or () when it is plain: the template is ``prefix
    # NUL suffix`` around its first decimal number, if that number has no leading zero (so
    # that the number between the template's parts is the folder) and the folder has no
    # NUL. One C pass (or its pure-Python twin).
    found = numbered_folders(folders)
    # The common cases in C-level passes: the numbered folders share one template (a
    # key's objects in every key with an integer key), with or without plain ones beside
    # them (the key group's own: its index, its timers).
    is_numbered = list(map(bool, found)) if _PLAIN in found else None
    pairs = cast(
        "list[tuple[str, int]]",
        found if is_numbered is None else list(compress(found, is_numbered)),
    )
    templates = set(map(_FIRST, pairs))
    if len(templates) == 1 and len(pairs) > 1:
        numbers: list[int] = list(map(_SECOND, pairs))
        ranked = sorted(range(len(numbers)), key=numbers.__getitem__)
        one = [[templates.pop(), _uvarints(_deltas(sorted(numbers)))]]
        if is_numbered is None:
            return ranked, [], one
        where = list(compress(range(len(found)), is_numbered))
        order = list(compress(range(len(found)), map(not_, is_numbered)))
        others = [folders[i] for i in order]
        order.extend(map(where.__getitem__, ranked))
        return order, others, one
    groups: dict[str, dict[int, int]] = {}  # template -> number -> index in folders
    for i, numbered in enumerate(found):
        if numbered:
            members = groups.get(numbered[0])
            if members is None:
                groups[numbered[0]] = {numbered[1]: i}
            else:
                members[numbered[1]] = i
    shared = {template: members for template, members in groups.items() if len(members) > 1}
    if not shared:
        return None
    if len(shared) == len(groups):
        order = [i for i, numbered in enumerate(found) if not numbered]
    else:
        order = [i for i, numbered in enumerate(found) if not numbered or numbered[0] not in shared]
    others = [folders[i] for i in order]
    column: list[list[Any]] = []
    for template, members in shared.items():
        numbers = sorted(members)
        order.extend(map(members.__getitem__, numbers))
        column.append([template, _uvarints(_deltas(numbers))])
    return order, others, column


def _from_templates(templated: list[list[Any]]) -> list[str]:
    """The folders that :func:`_name_templates` wrote as ``[prefix NUL suffix, numbers]``."""
    folders: list[str] = []
    for template, numbers in templated:
        prefix, _, suffix = template.partition("\x00")
        folders.extend([f"{prefix}{n}{suffix}" for n in accumulate(_read_uvarints(numbers))])
    return folders
