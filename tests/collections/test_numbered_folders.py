"""``numbered_folders`` (each table folder of a block around its first decimal number) in C
and in Python, against the regular expression that defines it: random folders of ASCII
and Unicode decimal digits, digits that are not decimal, NULs, and characters of every
str width."""

from __future__ import annotations

import random
from typing import Any

import pytest

from tests.support.numbered import expected
from tests.support.twins import CORE as _core
from tests.support.twins import twins

IMPLEMENTATIONS = twins("numbered_folders")

# ASCII digits and letters, "/", NUL, decimal digits of other scripts (Arabic-Indic,
# fullwidth, a mathematical digit beyond the BMP), digits that are not decimal (superscript
# two), and characters of each str width (Latin-1, BMP, astral).
ALPHABET = [
    *"0123456789012345abc/",
    "\x00",
    "\u0663",
    "\uff11",
    "\U0001d7ce",
    "\u00b2",
    "\u00e9",
    "\u4e2d",
    "\U0001f600",
]


def random_folder(rng: random.Random) -> str:
    if rng.random() < 0.3:  # a key's object folder, as a save names them
        return f"state/item/{rng.randrange(10 ** rng.randint(1, 20))}/{rng.choice(['b', 'v'])}"
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 12)))


@pytest.mark.parametrize("numbered_folders", IMPLEMENTATIONS)
def test_numbered_folders_match_their_definition(numbered_folders: Any) -> None:
    rng = random.Random(7)
    folders = [random_folder(rng) for _ in range(20_000)]
    folders += [
        "",
        "0",
        "00",
        "007",
        "x0",
        "x0y",
        "a/123456789012345678/b",  # 18 digits: numbered
        "a/1234567890123456789/b",  # 19: not
        "a/12\u0663/b",  # ASCII digits then another decimal digit: not
        "a/\u06631/b",  # the first decimal digit is not ASCII: not
        "a/\u00b21/b",  # a superscript two is no decimal digit: the prefix holds it
        "s/12/t/34",  # the first number only
        "state/item/5\x00/v",
        "\U0001f600/3/\u00e9",
    ]
    found = numbered_folders(folders)
    assert found == [expected(f) for f in folders]
    assert all(type(t) is str and type(n) is int for t, n in filter(None, found))


@pytest.mark.parametrize("numbered_folders", IMPLEMENTATIONS)
def test_numbered_folders_take_any_sequence_and_refuse_what_is_not_a_str(
    numbered_folders: Any,
) -> None:
    assert numbered_folders(("a/1/b",)) == [("a/\x00/b", 1)]
    assert numbered_folders([]) == []
    with pytest.raises(TypeError):
        numbered_folders(["a/1/b", b"a/2/b"])
    with pytest.raises(TypeError):
        numbered_folders(None)


@pytest.mark.skipif(_core is None, reason="the C extension was not built")
def test_consecutive_folders_of_one_template_share_its_str() -> None:
    found = _core.numbered_folders(["state/item/1/v", "state/item/22/v", "x/3", "x/4"])
    assert found == [
        ("state/item/\x00/v", 1),
        ("state/item/\x00/v", 22),
        ("x/\x00", 3),
        ("x/\x00", 4),
    ]
    assert found[0][0] is found[1][0] and found[2][0] is found[3][0]
