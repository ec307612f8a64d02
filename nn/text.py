"""Text for character language models: a built-in corpus, a character
vocabulary and next-character datasets.

``pydoc_corpus()`` is the help text of every topic ``help()`` knows
(``pydoc_data.topics``, shipped with every Python: about 465,000 characters
of English and code), so a language model trains with no download.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import DataError
from .data import NDArrayDataset


def pydoc_corpus() -> str:
    """The help texts of ``pydoc_data.topics``, in the order of their names."""
    try:
        from pydoc_data.topics import topics
    except ImportError:  # a Python built without its docs data
        raise DataError("this Python has no pydoc_data.topics; give a text file with --data-file",
                        arg="--dataset") from None
    return "\n".join(topics[name] for name in sorted(topics))


def read_text(path) -> str:
    """A UTF-8 text file, refused clearly when missing, unreadable or not text."""
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"{path} does not exist", arg="--data-file") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})", arg="--data-file") from None
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror}", arg="--data-file") from None


class CharVocab:
    """The characters of a text, sorted: ``encode`` maps text to int32 ids,
    ``decode`` ids back to text. ``chars`` (a string) is all it holds, so a
    checkpoint stores it as is."""

    def __init__(self, chars: str):
        if not chars or len(set(chars)) != len(chars):
            raise DataError(f"got a vocabulary of {len(chars)} characters with repeats or none, expected distinct "
                            "characters", arg="vocab")
        self.chars = chars
        self._index = {c: i for i, c in enumerate(chars)}

    @classmethod
    def of(cls, text: str) -> "CharVocab":
        return cls("".join(sorted(set(text))))

    def __len__(self) -> int:
        return len(self.chars)

    def encode(self, text: str, where: str = "encode") -> np.ndarray:
        unknown = sorted(set(text) - set(self._index))
        if unknown:
            shown = ", ".join(repr(c) for c in unknown[:8]) + (" ..." if len(unknown) > 8 else "")
            raise DataError(f"got characters the model never saw: {shown}; expected text in its vocabulary of "
                            f"{len(self)} characters", arg=where)
        return np.fromiter((self._index[c] for c in text), dtype="int32", count=len(text))

    def decode(self, ids) -> str:
        return "".join(self.chars[int(i)] for i in np.asarray(ids).reshape(-1))


def char_datasets(text: str, seq_len: int, val_fraction: float = 0.1, vocab: CharVocab | None = None):
    """``(train, validation, vocab)``: the text's first ``1 - val_fraction``
    and its last ``val_fraction``, each cut into non-overlapping windows of
    ``seq_len`` characters (x) and the same windows one character later (y),
    as int32 ``NDArrayDataset``s."""
    vocab = vocab or CharVocab.of(text)
    ids = vocab.encode(text, "--data-file")
    cut = int(len(ids) * (1 - val_fraction))
    parts = []
    for name, part in (("training", ids[:cut]), ("validation", ids[cut:])):
        windows = (len(part) - 1) // seq_len
        if windows < 1:
            raise DataError(f"the {name} part of the text has {len(part)} characters, too few for one window of "
                            f"--seq-len {seq_len} (+1); give a longer text or a shorter --seq-len", arg="--seq-len")
        x = part[:windows * seq_len].reshape(windows, seq_len)
        y = part[1:windows * seq_len + 1].reshape(windows, seq_len)
        parts.append(NDArrayDataset(x, y))
    return parts[0], parts[1], vocab
