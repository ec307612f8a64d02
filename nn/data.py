"""Datasets and loaders (needle's ``data``), numpy at the boundary."""
from __future__ import annotations

import numpy as np

from ..errors import AttrError


class Dataset:
    """Items are tuples of numpy arrays; ``transforms`` apply to the first."""

    def __init__(self, transforms=None):
        self.transforms = list(transforms or [])

    def apply_transforms(self, x):
        for t in self.transforms:
            x = t(x)
        return x

    def __len__(self) -> int:
        raise NotImplementedError

    def __getitem__(self, i):
        raise NotImplementedError


class NDArrayDataset(Dataset):
    def __init__(self, *arrays, transforms=None):
        super().__init__(transforms)
        if not arrays or any(len(a) != len(arrays[0]) for a in arrays):
            raise AttrError("expected one or more arrays of the same length", op="NDArrayDataset", arg="arrays")
        self.arrays = arrays

    def __len__(self) -> int:
        return len(self.arrays[0])

    def __getitem__(self, i):
        first, *rest = (a[i] for a in self.arrays)
        return (self.apply_transforms(first), *rest)


class DataLoader:
    def __init__(self, dataset, batch_size=1, shuffle=False, drop_last=False, seed=None):
        if not isinstance(batch_size, int) or batch_size < 1:
            raise AttrError(f"got {batch_size!r}, expected an integer >= 1", op="DataLoader", arg="batch_size")
        self.dataset, self.batch_size, self.shuffle, self.drop_last = dataset, batch_size, shuffle, drop_last
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self):
        order = self.rng.permutation(len(self.dataset)) if self.shuffle else np.arange(len(self.dataset))
        for b in range(len(self)):
            items = [self.dataset[int(i)] for i in order[b * self.batch_size:(b + 1) * self.batch_size]]
            yield tuple(np.stack(col) for col in zip(*items))


def digits(split="train", flatten=True):
    """scikit-learn's 8x8 digits in [0, 1]: per class, a permutation drawn with
    seed 0 puts its first 80% in "train" (1,437 images) and the rest in "test" (360)."""
    from sklearn.datasets import load_digits

    if split not in ("train", "test"):
        raise AttrError(f"got {split!r}, expected 'train' or 'test'", op="digits", arg="split")
    raw = load_digits()
    images = (raw.images / 16.0).astype("float32")
    labels = raw.target.astype("int32")
    rng = np.random.default_rng(0)
    chosen = []
    for c in range(10):
        idx = rng.permutation(np.flatnonzero(labels == c))
        cut = int(round(0.8 * len(idx)))
        chosen.append(idx[:cut] if split == "train" else idx[cut:])
    idx = np.sort(np.concatenate(chosen))
    x = images[idx].reshape(len(idx), -1) if flatten else images[idx][:, None]
    return NDArrayDataset(x, labels[idx])
