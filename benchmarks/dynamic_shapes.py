"""One kernel with a symbolic batch dim against kernels specialized to each
batch size, in one run: time per call at each size, and compile time.

Specialized kernels know every trip count (no tail handling, constant
strides); the symbolic one is compiled once and pads or guards its last
tile. A model's kernel pool specializes the first four shapes of an op at
each layer and then switches to one kernel with the varying dims symbolic
(``kiln/runtime/pool.py``); this measures what that trade costs per call.

Run: ``python benchmarks/dynamic_shapes.py [--sizes 1,7,32,100,256] [--json]``.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

import kiln
from kiln.te import sym

WORKLOADS = {
    "dense 784->512 relu": ("dense", lambda n: [(n, 784), (784, 512), (512,)], {"relu": True}),
    "matmul 512x512": ("matmul", lambda n: [(n, 512), (512, 512)], {}),
    "softmax 1000": ("softmax", lambda n: [(n, 1000)], {}),
    "conv2d 16x32x32->32 3x3": ("conv2d", lambda n: [(n, 16, 32, 32), (32, 16, 3, 3)], {"padding": 1}),
}


def seconds(kernel, arrays) -> float:
    return kernel.time(*arrays, number=3, repeat=5, min_repeat_ms=30)["median"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,7,32,100,256")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    os.environ["KILN_DISK_CACHE"] = "0"  # compile times are measured
    sizes = [int(s) for s in args.sizes.split(",")]
    rng = np.random.default_rng(0)
    rows = []
    for name, (op, shapes_of, attrs) in WORKLOADS.items():
        start = time.perf_counter()
        symbolic = kiln.build(op, shapes_of(sym("n")), attrs=attrs)
        row = {"workload": name, "symbolic_compile_s": time.perf_counter() - start, "sizes": []}
        for n in sizes:
            arrays = [rng.standard_normal(s).astype("float32") for s in shapes_of(n)]
            start = time.perf_counter()
            special = kiln.build(op, shapes_of(n), attrs=attrs)
            compile_s = time.perf_counter() - start
            np.testing.assert_allclose(symbolic(*arrays), special(*arrays), rtol=1e-4, atol=1e-4)
            t_sym, t_spec = seconds(symbolic, arrays), seconds(special, arrays)
            row["sizes"].append({"n": n, "symbolic_us": t_sym * 1e6, "specialized_us": t_spec * 1e6,
                                 "symbolic_vs_specialized": t_spec / t_sym, "specialized_compile_s": compile_s})
        rows.append(row)
    if args.json:
        print(json.dumps(rows))
        return
    print("# time per call: symbolic batch kernel vs one kernel per batch size (ratio > 1: symbolic is faster)")
    for row in rows:
        print(f"{row['workload']} (symbolic compiled once in {row['symbolic_compile_s']:.1f} s)")
        for r in row["sizes"]:
            print(f"  n={r['n']:4d}  symbolic {r['symbolic_us']:9.1f} us  specialized {r['specialized_us']:9.1f} us"
                  f"  ratio {r['symbolic_vs_specialized']:.2f}  (specialized compile {r['specialized_compile_s']:.1f} s)")


if __name__ == "__main__":
    main()
