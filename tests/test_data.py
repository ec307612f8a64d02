"""Datasets, the loader, transforms, digits and the MNIST IDX parser."""
import gzip

import numpy as np
import pytest

from kiln.errors import AttrError, DataError
from kiln.nn import data


def test_loader_batches_shuffles_reproducibly_and_drops_last():
    ds = data.NDArrayDataset(np.arange(10, dtype="float32")[:, None], np.arange(10, dtype="int32"))
    batches = list(data.DataLoader(ds, batch_size=4))
    assert [len(b[0]) for b in batches] == [4, 4, 2] and batches[0][0].shape == (4, 1)
    assert len(data.DataLoader(ds, batch_size=4, drop_last=True)) == 2
    a = [b[1].tolist() for b in data.DataLoader(ds, batch_size=10, shuffle=True, seed=3)]
    b = [b[1].tolist() for b in data.DataLoader(ds, batch_size=10, shuffle=True, seed=3)]
    assert a == b and sorted(a[0]) == list(range(10)) and a[0] != list(range(10))
    loader = data.DataLoader(ds, batch_size=10, shuffle=True, seed=3)
    assert next(iter(loader))[1].tolist() != next(iter(loader))[1].tolist()  # a new order each epoch
    with pytest.raises(AttrError):
        data.DataLoader(ds, batch_size=0)


def test_transforms():
    img = np.arange(12, dtype="float32").reshape(2, 3, 2)
    assert np.array_equal(data.RandomFlipHorizontal(p=1.0)(img), img[:, ::-1])
    assert np.array_equal(data.RandomFlipHorizontal(p=0.0)(img), img)
    crop = data.RandomCrop(padding=1, seed=0)(img)
    assert crop.shape == img.shape
    shifted = [data.RandomCrop(padding=2, seed=s)(img) for s in range(20)]
    assert any(not np.array_equal(c, img) for c in shifted)
    ds = data.NDArrayDataset(img[None], np.zeros(1, "int32"), transforms=[data.RandomFlipHorizontal(p=1.0)])
    assert np.array_equal(ds[0][0], img[:, ::-1])


def test_digits_split_is_fixed_disjoint_and_scaled():
    train, test = data.digits("train"), data.digits("test")
    assert (len(train), len(test)) == (1438, 359)
    x, y = train.arrays
    assert x.shape == (1438, 64) and x.dtype == np.float32 and y.dtype == np.int32
    assert 0.0 <= x.min() and x.max() <= 1.0 and set(np.unique(y)) == set(range(10))
    images = data.digits("test", flatten=False).arrays[0]
    assert images.shape == (359, 1, 8, 8)
    assert np.array_equal(data.digits("test").arrays[0], test.arrays[0])
    train_rows = {r.tobytes() for r in x}
    assert sum(r.tobytes() in train_rows for r in test.arrays[0]) < 5  # (the dataset has a few duplicates)


def _idx(magic, dims, payload):
    header = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in dims)
    return header + np.asarray(payload, dtype=np.uint8).tobytes()


def _write_mnist(folder, n=3, gz=False, split="t10k"):
    images = _idx(2051, (n, 28, 28), np.arange(n * 784) % 256)
    labels = _idx(2049, (n,), np.arange(n) % 10)
    for name, blob in ((f"{split}-images-idx3-ubyte", images), (f"{split}-labels-idx1-ubyte", labels)):
        path = folder / (name + (".gz" if gz else ""))
        path.write_bytes(gzip.compress(blob) if gz else blob)


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_reads_raw_and_gzip_idx(tmp_path, gz):
    _write_mnist(tmp_path, gz=gz)
    ds = data.mnist(tmp_path, "test")
    x, y = ds.arrays
    assert x.shape == (3, 784) and x.max() <= 1.0 and y.tolist() == [0, 1, 2]
    assert data.mnist(tmp_path, "test", flatten=False).arrays[0].shape == (3, 1, 28, 28)


@pytest.mark.parametrize("damage,needle", [("magic", "magic number"), ("truncate", "truncated"),
                                           ("trailing", "truncated or padded"), ("count", "labels"),
                                           ("missing", "no t10k-labels")])
def test_mnist_corruptions_are_clear_errors(tmp_path, damage, needle):
    _write_mnist(tmp_path)
    images, labels = tmp_path / "t10k-images-idx3-ubyte", tmp_path / "t10k-labels-idx1-ubyte"
    if damage == "magic":
        images.write_bytes(b"\0\0\0\1" + images.read_bytes()[4:])
    elif damage == "truncate":
        images.write_bytes(images.read_bytes()[:-10])
    elif damage == "trailing":
        labels.write_bytes(labels.read_bytes() + b"\0")
    elif damage == "count":
        labels.write_bytes(_idx(2049, (2,), [0, 1]))
    else:
        labels.unlink()
    with pytest.raises(DataError, match=needle):
        data.mnist(tmp_path, "test")
