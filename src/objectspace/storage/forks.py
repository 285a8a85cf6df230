"""Connections never cross a ``fork``: the child of a process that used a storage opens its own.

A forked child inherits its parent's sockets and SQLite handles (Spark's Python daemon forks
its workers, ``multiprocessing`` forks by default on Linux). Used in the child, a PostgreSQL
connection interleaves with the parent's on one socket, so each reads the other's results;
a SQLite connection must not be used across ``fork`` at all. Every backend that holds
connections registers here; in the child, right after ``fork``, each drops them *without
closing them* (closing would send the server a terminate on the parent's session, or
release the parent's file locks) and reopens lazily on next use. The dropped objects are
kept referenced so that no finalizer ever runs on them in the child.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["ForkAware", "abandon", "on_fork_in_child", "register"]


class ForkAware(Protocol):
    def _after_fork_in_child(self) -> None: ...


_LIVE: weakref.WeakSet[Any] = weakref.WeakSet()
_HOOKS: list[Callable[[], None]] = []
_ABANDONED: list[object] = []


def register(obj: ForkAware) -> None:
    """Call ``obj._after_fork_in_child()`` in every child forked while ``obj`` lives."""
    _LIVE.add(obj)


def on_fork_in_child(hook: Callable[[], None]) -> None:
    """Run ``hook`` in every forked child, before the registered objects are reset."""
    _HOOKS.append(hook)


def abandon(resource: object) -> None:
    """Keep ``resource`` (inherited from the parent) referenced, never used nor closed."""
    _ABANDONED.append(resource)


def _after_fork_in_child() -> None:
    for hook in _HOOKS:
        hook()
    for obj in list(_LIVE):
        obj._after_fork_in_child()


if hasattr(os, "register_at_fork"):  # pragma: no branch - POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)
