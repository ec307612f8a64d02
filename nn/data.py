"""Datasets and loaders (needle's ``data``), numpy at the boundary.

Shuffling and random transforms draw from ``kiln.nn.rng``'s seeded family
(``kiln.manual_seed``) unless given a ``seed`` of their own."""
from __future__ import annotations

import numpy as np

from ..errors import AttrError, DataError, DTypeError
from ..runtime import engine
from . import rng


def check_labels(labels, classes, where: str) -> np.ndarray:
    """Integer class ``labels`` as a numpy array, refused (naming ``where``: the caller) unless
    every one lies in ``[0, classes)``; ``classes`` None (unknown) skips the range."""
    values = np.asarray(labels)
    if values.dtype.kind not in "iu":
        raise DTypeError(f"got labels of dtype {values.dtype}, expected integer class indices", where=where,
                         arg="labels")
    if values.size and classes is not None:
        outside = (values < 0) | (values >= classes)
        if outside.any():
            bad = np.unique(values[outside])
            shown = ", ".join(str(int(v)) for v in bad[:10]) + (f", ... ({len(bad)} values)" if len(bad) > 10 else "")
            count = int(outside.sum())
            raise DataError(f"got labels {shown} ({count} sample{'s' if count != 1 else ''}), expected class "
                            f"indices in [0, {classes}) for {classes} classes", where=where, arg="labels")
    return values


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
            raise AttrError("expected one or more arrays of the same length", where="NDArrayDataset", arg="arrays")
        self.arrays = arrays

    def __len__(self) -> int:
        return len(self.arrays[0])

    def __getitem__(self, i):
        first, *rest = (a[i] for a in self.arrays)
        return (self.apply_transforms(first), *rest)


def _own_generator(seed):
    """A transform's or loader's own generator for an explicit ``seed``; None
    (draw from the seeded family) without one."""
    return None if seed is None else np.random.default_rng(seed)


class RandomFlipHorizontal:
    """Mirror an H x W x C image left-right with probability ``p`` (needle's layout)."""

    def __init__(self, p: float = 0.5, seed=None):
        self.p, self.rng = p, _own_generator(seed)

    def __call__(self, img):
        return img[:, ::-1].copy() if (self.rng or rng.generator()).random() < self.p else img


class RandomCrop:
    """Zero-pad an H x W x C image by ``padding`` and crop it back to H x W at a
    random shift in [-padding, padding] on each axis."""

    def __init__(self, padding: int = 3, seed=None):
        self.padding, self.rng = padding, _own_generator(seed)

    def __call__(self, img):
        p = self.padding
        dy, dx = (self.rng or rng.generator()).integers(-p, p + 1, size=2)
        padded = np.pad(img, ((p, p), (p, p)) + ((0, 0),) * (img.ndim - 2))
        h, w = img.shape[:2]
        return padded[p + dy:p + dy + h, p + dx:p + dx + w].copy()


class DataLoader:
    """Batches of stacked numpy arrays; a new shuffle every epoch, drawn from
    ``seed`` or, without one, from the seeded family (``kiln.manual_seed``)."""

    def __init__(self, dataset, batch_size=1, shuffle=False, drop_last=False, seed=None):
        if not isinstance(batch_size, int) or batch_size < 1:
            raise AttrError(f"got {batch_size!r}, expected an integer >= 1", where="DataLoader", arg="batch_size")
        self.dataset, self.batch_size, self.shuffle, self.drop_last = dataset, batch_size, shuffle, drop_last
        self.rng = _own_generator(seed)

    def __len__(self) -> int:
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self):
        """Batches in order; the next batch is assembled by the dependency
        engine while the current one is used (one batch ahead).

        The epoch's order and the seed of the generator its transforms draw
        from are drawn here, in the calling thread; batches are assembled one
        after the other (they all write ``chain``), so every transform draws
        in batch order whichever engine thread runs it."""
        gen = self.rng or rng.generator()
        order = gen.permutation(len(self.dataset)) if self.shuffle else np.arange(len(self.dataset))
        epoch_gen = np.random.default_rng(rng.draw_seed(gen))
        eng = engine.default()
        slots, batches = [eng.new_var("batch 0"), eng.new_var("batch 1")], [None, None]
        chain = eng.new_var("batch order")

        def assemble(b):
            def run():
                with rng.using(epoch_gen):
                    items = [self.dataset[int(i)] for i in order[b * self.batch_size:(b + 1) * self.batch_size]]
                batches[b % 2] = tuple(np.stack(col) for col in zip(*items))
            return run

        if len(self):
            eng.push(assemble(0), writes=[slots[0], chain], name="assemble batch")
        for b in range(len(self)):
            if b + 1 < len(self):
                eng.push(assemble(b + 1), writes=[slots[(b + 1) % 2], chain], name="assemble batch")
            eng.wait_for_var(slots[b % 2])
            yield batches[b % 2]


def digits(split="train", flatten=True):
    """scikit-learn's 8x8 digits in [0, 1]: per class, a permutation drawn with
    seed 0 puts its first round(80%) in "train" (1,438 images) and the rest in "test" (359)."""
    from sklearn.datasets import load_digits

    if split not in ("train", "test"):
        raise AttrError(f"got {split!r}, expected 'train' or 'test'", where="dataset 'digits'", arg="split")
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


IDX_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
             "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
IDX_MAGIC = {2051: 3, 2049: 1}  # images: 3 dims (N, rows, cols); labels: 1 dim (N,)


def parse_idx(path) -> np.ndarray:
    """An MNIST IDX file (raw or ``.gz``) as a uint8 array; the magic number,
    the dims and the payload size are all checked."""
    import gzip
    from pathlib import Path

    path = Path(path)
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError) as exc:
        raise DataError(f"cannot read {path}: {exc}", where="dataset 'mnist'", arg="path") from exc
    if len(raw) < 8:
        raise DataError(f"{path} is {len(raw)} bytes, too short for an IDX header", where="dataset 'mnist'", arg="path")
    magic = int.from_bytes(raw[:4], "big")
    if magic not in IDX_MAGIC:
        raise DataError(f"{path} has magic number {magic}, expected 2051 (images) or 2049 (labels)",
                        where="dataset 'mnist'", arg="path")
    ndim = IDX_MAGIC[magic]
    header = 4 + 4 * ndim
    dims = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    expected = header + int(np.prod(dims))
    if len(raw) != expected:
        raise DataError(f"{path} holds {len(raw)} bytes, its header {dims} says {expected}: truncated or padded",
                        where="dataset 'mnist'", arg="path")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)


def mnist(data_dir, split="train", flatten=True):
    """MNIST from local IDX files (``train-images-idx3-ubyte[.gz]`` and friends):
    images in [0, 1] float32 (N, 784) or (N, 1, 28, 28), labels int32."""
    from pathlib import Path

    if split not in IDX_FILES:
        raise AttrError(f"got {split!r}, expected 'train' or 'test'", where="dataset 'mnist'", arg="split")
    if data_dir is None:
        raise DataError("needs --data-dir, a folder with the MNIST IDX files", where="dataset 'mnist'", arg="data_dir")
    found = []
    for name in IDX_FILES[split]:
        candidates = [Path(data_dir) / name, Path(data_dir) / (name + ".gz")]
        path = next((c for c in candidates if c.is_file()), None)
        if path is None:
            raise DataError(f"no {name} or {name}.gz in {data_dir}", where="dataset 'mnist'", arg="data_dir")
        found.append(parse_idx(path))
    images, labels = found
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
        raise DataError(f"{len(images)} images but {len(labels)} labels", where="dataset 'mnist'", arg="data_dir")
    x = images.astype("float32") / 255.0
    x = x.reshape(len(x), -1) if flatten else x[:, None]
    return NDArrayDataset(x, labels.astype("int32"))
