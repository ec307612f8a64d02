"""The kernel cache: memory, then disk (atomic, content-hashed), then compile."""
import os
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kiln
from kiln.te import get_op
from kiln.runtime import cache

PROBE = textwrap.dedent("""
    import json, sys, numpy as np, kiln
    from kiln.runtime import cache
    shapes = [(37 + int(k), 5) for k in sys.argv[1].split(",")]
    for s in shapes:
        x = np.arange(np.prod(s), dtype="float32").reshape(s)
        assert np.allclose(kiln.build("exp", [s])(x / 100), np.exp(x / 100), rtol=1e-5)
    print(json.dumps({"compiled": cache.stats.compiled, "disk_hits": cache.stats.disk_hits,
                      "corrupt": cache.stats.corrupt}))
""")


def probe(cache_dir, which="0", **env):
    res = subprocess.run([sys.executable, "-c", PROBE, which], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "KILN_CACHE_DIR": str(cache_dir), **env})
    assert res.returncode == 0, res.stderr
    import json
    return json.loads(res.stdout.strip().splitlines()[-1])


def entries(cache_dir):
    return sorted((cache_dir / "kernels").glob("*.so"))


def test_a_second_process_reuses_the_disk_cache(tmp_path):
    assert probe(tmp_path)["compiled"] == 1
    again = probe(tmp_path)
    assert again["compiled"] == 0 and again["disk_hits"] == 1
    assert stat.S_IMODE((tmp_path / "kernels").stat().st_mode) == 0o700


def test_a_kernel_built_for_other_threads_is_not_served(tmp_path):
    # the template defaults read the thread count (row blocks, cols_first): it is part of the key
    assert probe(tmp_path, KILN_NUM_THREADS="1")["compiled"] == 1
    assert probe(tmp_path, KILN_NUM_THREADS="2")["compiled"] == 1
    assert probe(tmp_path, KILN_NUM_THREADS="1")["disk_hits"] == 1 and len(entries(tmp_path)) == 2


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_a_damaged_entry_is_detected_and_rebuilt(tmp_path, damage):
    probe(tmp_path)
    (entry,) = entries(tmp_path)
    data = entry.read_bytes()
    entry.write_bytes(data[: len(data) // 2] if damage == "truncate" else b"\0" * len(data))
    (tmp_path / "kernels" / "notes.txt").write_text("a foreign file is ignored")
    res = probe(tmp_path)
    assert res["corrupt"] == 1 and res["compiled"] == 1
    assert probe(tmp_path)["compiled"] == 0  # the rebuilt entry is valid


def test_concurrent_writers_leave_only_valid_entries(tmp_path):
    cmd = [sys.executable, "-c", PROBE, "0,1,2,3,4,5"]
    env = {**os.environ, "KILN_CACHE_DIR": str(tmp_path)}
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(3)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()
    for entry in entries(tmp_path):
        import hashlib
        assert hashlib.sha256(entry.read_bytes()).hexdigest()[:32] == entry.name.split(".")[1]
    assert not list((tmp_path / "kernels").glob(".*")), "temporary files left behind"
    assert probe(tmp_path, "0,1,2,3,4,5")["compiled"] == 0


def test_disk_cache_can_be_turned_off(tmp_path):
    # a KILN_CACHE_DIR that is a file is refused (tests/test_config.py), not silently ignored
    assert probe(tmp_path, KILN_DISK_CACHE="0")["compiled"] == 1
    assert entries(tmp_path) == []


def test_memory_cache_returns_the_same_kernel_and_keys_cover_the_signature():
    first = kiln.build("add", [(3, 4), (4,)])
    compiled = cache.stats.compiled
    assert kiln.build("add", [(3, 4), (4,)]) is first and cache.stats.compiled == compiled

    def key(op="add", shapes=((3, 4), (4,)), dtypes="float32", attrs=None, target="llvm -mcpu=x", config="{}"):
        return cache.key_of(get_op(op).check(shapes, dtypes, attrs), target, config)

    variants = [key(), key("subtract"), key(shapes=((3, 5), (5,))), key(dtypes="float64"),
                key(target="llvm -mcpu=y"), key(config='{"vector":1}'),
                key("sum", ((3, 4),), attrs={"axis": 0}), key("sum", ((3, 4),), attrs={"axis": 1})]
    assert len(set(variants)) == len(variants)
    assert key() == key(shapes=[[3, 4], [4]], dtypes=["float32", "float32"])  # the same workload, spelled otherwise


def test_a_kernel_library_is_linked_by_ld_and_anything_else_by_tvms_default(tmp_path):
    """``runtime.link``: object files link with ``ld`` alone (a kernel using
    libm declares it); a C++ source, which ``ld`` cannot take, goes through
    TVM's compiler driver."""
    import ctypes

    import tvm
    from tvm import te

    from kiln.runtime.link import link_shared

    a = te.placeholder((4,), "float64", name="a")
    executable = tvm.compile(te.create_prim_func([a, te.compute((4,), lambda i: te.exp(a[i]))]),
                             target=kiln.cpu().tvm)
    executable.export_library(str(tmp_path / "k.so"), fcompile=link_shared)
    x = np.arange(4.0)
    y = tvm.runtime.tensor(np.zeros(4), tvm.cpu())
    tvm.runtime.load_module(str(tmp_path / "k.so"))["main"](tvm.runtime.tensor(x, tvm.cpu()), y)
    np.testing.assert_allclose(y.numpy(), np.exp(x))
    assert b"libm.so" in (tmp_path / "k.so").read_bytes()  # the library names what it needs
    source = tmp_path / "f.cc"
    source.write_text('extern "C" int forty_two(void) { return 42; }\n')
    link_shared(str(tmp_path / "f.so"), [str(source)])
    assert ctypes.CDLL(str(tmp_path / "f.so")).forty_two() == 42
