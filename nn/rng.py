"""One seeded family of random generators for everything random in training:
initializers, dropout masks, data transforms and DataLoader shuffling.
``kiln.manual_seed(seed)`` reseeds all of them, as ``torch.manual_seed`` does.

Draws made in the calling thread (initializers, dropout, a loader's order for
an epoch) come from one global generator, in program order. Batches are
assembled on the engine's threads, two at a time, so a loader draws one seed
per epoch in the calling thread and gives each batch its own generator made
from that seed and the batch's index: a transform then draws the same values
whichever thread assembles its batch, and the calling thread's stream does
not depend on when the engine ran the transforms.
"""
from __future__ import annotations

import contextlib
import numbers
import threading
from typing import Iterator

import numpy as np

from . import record

from ..errors import AttrError

_local = threading.local()
_global = np.random.default_rng(0)


def manual_seed(seed: int) -> None:
    """Reseed initializers, dropout, transforms and DataLoader shuffling together.

    Parameters
    ----------
    seed : int
        A non-negative integer.
    """
    global _global
    if not isinstance(seed, numbers.Integral) or isinstance(seed, bool) or seed < 0:
        raise AttrError(f"got {seed!r}, expected a non-negative integer", where="manual_seed", arg="seed")
    _global = np.random.default_rng(int(seed))


def generator() -> np.random.Generator:
    """The generator a random draw uses here: the batch's own while a
    DataLoader assembles a batch, else the global one (which a compiled
    function cannot draw from: its draws would be fixed when traced)."""
    own = getattr(_local, "generator", None)
    if own is None and record._active is not None:
        record._active.host_random()
    return own or _global


def draw_seed(gen: np.random.Generator | None = None) -> int:
    """A seed for a new generator, drawn from ``gen`` (default: ``generator()``)."""
    return int((gen or generator()).integers(1 << 63))


@contextlib.contextmanager
def using(gen: np.random.Generator) -> Iterator[np.random.Generator]:
    """Make ``gen`` this thread's generator for the duration of the block."""
    before = getattr(_local, "generator", None)
    _local.generator = gen
    try:
        yield gen
    finally:
        _local.generator = before
