"""ONNX's own backend node tests through kiln's ONNX frontend, and through
TVM's Relax frontend on the same cases.

A case is *claimed* when every op type of its model is one kiln converts
(``kiln.frontend.supported_onnx_ops()``). Each claimed case is imported with
``from_onnx``, called on each of its data sets and classified:

- ``pass``: every output has the expected shape and dtype, floats within
  rtol 1e-4 / atol 1e-5 (NaNs where expected), other dtypes exactly;
- ``fail``: wrong values (the reason gives the max error) or shape/dtype;
- ``refused``: a ``FrontendError`` or other ``KilnError`` (the reason is its
  message: an unsupported dtype, an attribute kiln refuses...);
- ``crash``: any other exception, or the case ran out of time: a bug.

Cases are grouped by the op type under test, read from the test's name
(``test_reduce_sum_keepdims`` -> ReduceSum) or else the model's first
non-Constant node. Each case runs in a worker process, so a hang or a
segfault costs that case only.

Run: ``python benchmarks/onnx_node_tests.py [--tvm] [--op Conv] [-k REGEX]
[-n N] [--out table.md] [--json cases.json]``.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import re
import sys
import time
import warnings
from collections import Counter, defaultdict

import numpy as np

RTOL, ATOL = 1e-4, 1e-5
STATUSES = ("pass", "refused", "fail", "crash")


#: test-name prefixes that abbreviate their op type
ALIASES = {"batchnorm": "BatchNormalization", "instancenorm": "InstanceNormalization",
           "mvn": "MeanVarianceNormalization", "nllloss": "NegativeLogLikelihoodLoss",
           "sce": "SoftmaxCrossEntropyLoss", "greaterequal": "GreaterOrEqual", "lessequal": "LessOrEqual"}


def _op_names() -> dict:
    """Normalised name (lower case, no underscores) -> ONNX op type, for every schema and alias."""
    from onnx import defs
    return {s.name.lower(): s.name for s in defs.get_all_schemas_with_history()} | ALIASES


def op_under_test(case, names: dict) -> str:
    """The op type a node test is about: the longest op name its test name starts with."""
    stem = case.name.removeprefix("test_").replace("_", "").lower()
    matches = [key for key in names if stem.startswith(key)]
    if matches:
        return names[max(matches, key=len)]
    ops = [n.op_type for n in case.model.graph.node if n.op_type != "Constant"]
    return ops[0] if ops else "Constant"


def claimed_cases(op_filter=None, pattern=None, per_op=None) -> list:
    """(op type, case) for each node test whose ops kiln all converts, filtered."""
    from onnx.backend.test.case.node import collect_testcases

    from kiln.frontend import supported_onnx_ops
    supported = set(supported_onnx_ops())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the generators' own overflow warnings
        cases = collect_testcases()
    names, out, counts = _op_names(), [], Counter()
    for case in sorted(cases, key=lambda c: c.name):
        nodes = case.model.graph.node if case.model is not None else None
        if not nodes or any(n.domain not in ("", "ai.onnx") or n.op_type not in supported for n in nodes):
            continue
        op = op_under_test(case, names)
        if op_filter and op not in op_filter or pattern and not re.search(pattern, case.name):
            continue
        if per_op is not None and counts[op] >= per_op:
            continue
        counts[op] += 1
        out.append((op, case))
    return out


def data_arrays(data_sets) -> list:
    """The data sets as numpy arrays (a few cases keep theirs as TensorProtos)."""
    from onnx import TensorProto, numpy_helper

    def array(v):
        return numpy_helper.to_array(v) if isinstance(v, TensorProto) else np.asarray(v)
    return [([array(v) for v in inputs], [array(v) for v in outputs]) for inputs, outputs in data_sets]


def compare(got, want) -> str | None:
    """None when ``got`` matches ``want``, else what differs."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, expected {want.dtype}"
    if want.dtype.kind not in "fc":
        wrong = int(np.sum(got != want))
        return f"{wrong} of {want.size} values differ" if wrong else None
    close = np.isclose(got, want, rtol=RTOL, atol=ATOL, equal_nan=True)
    if close.all():
        return None
    both = ~close & ~np.isnan(got) & ~np.isnan(want)
    error = float(np.max(np.abs(got[both] - want[both]))) if both.any() else float("nan")
    return f"max error {error:.3g} ({int((~close).sum())} of {want.size} values off)"


def _check(outputs, expected) -> tuple:
    if len(outputs) != len(expected):
        return "fail", f"{len(outputs)} outputs, expected {len(expected)}"
    for k, (got, want) in enumerate(zip(outputs, expected)):
        problem = compare(got, want)
        if problem:
            return "fail", f"output {k}: {problem}"
    return "pass", ""


def run_kiln(model, data_sets) -> tuple:
    """(status, reason) of one case through kiln."""
    from kiln.errors import KilnError
    from kiln.frontend import from_onnx
    try:
        imported = from_onnx(model)
        for inputs, expected in data_sets:
            result = imported(*inputs)
            results = list(result.values()) if isinstance(result, dict) else [result]
            status = _check([r.numpy() for r in results], expected)
            if status[0] != "pass":
                return status
        return "pass", ""
    except KilnError as e:
        cause = e.__cause__
        kind = f"[{type(cause).__name__}] " if isinstance(cause, KilnError) and type(cause) is not type(e) else ""
        return "refused", f"{kind}{e}"[:400]
    except Exception as e:
        return "crash", f"{type(e).__name__}: {e}"[:400]


def run_tvm(model, data_sets) -> tuple:
    """(status, reason) of one case through TVM's Relax ONNX frontend, built for llvm and run on the VM."""
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx
    try:
        mod = from_onnx(model, keep_params_in_input=True)
        mod = relax.transform.DecomposeOpsForInference()(mod)
        mod = relax.transform.LegalizeOps()(mod)
        mod, params = relax.frontend.detach_params(mod)
        with tvm.transform.PassContext(opt_level=3):
            vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
        extra = [tvm.runtime.tensor(p) for p in params.get("main", [])]
        for inputs, expected in data_sets:
            result = vm["main"](*[tvm.runtime.tensor(np.asarray(i)) for i in inputs], *extra)
            status = _check(_tvm_arrays(result), expected)
            if status[0] != "pass":
                return status
        return "pass", ""
    except Exception as e:
        message = str(e).strip().splitlines()
        return "crash", f"{type(e).__name__}: {message[-1] if message else ''}"[:400]


def _tvm_arrays(result) -> list:
    """The VM's outputs as arrays: a tensor, a shape (what the frontend makes of ``Shape``),
    a Python scalar, or a tuple of these."""
    import tvm
    if hasattr(result, "numpy"):
        return [result.numpy()]
    if isinstance(result, tvm.runtime.ShapeTuple):
        return [np.asarray(list(result), dtype=np.int64)]
    if isinstance(result, (bool, int, float)):
        return [np.asarray(result)]
    return [array for item in result for array in _tvm_arrays(item)]


def _work(task) -> tuple:
    engine, blob, data_sets, _ = task
    import onnx
    model = onnx.load_from_string(blob)
    start = time.perf_counter()
    status, reason = (run_tvm if engine == "tvm" else run_kiln)(model, data_sets)
    return status, reason, round(time.perf_counter() - start, 3)


def run_all(tasks, jobs: int, timeout: float) -> list:
    """Each (engine, model bytes, data sets, name) task's (status, reason, seconds), in
    worker processes; a task past ``timeout``
    (or whose worker died) is a crash, and the pool is rebuilt for the rest."""
    results = [None] * len(tasks)
    todo = list(range(len(tasks)))
    ctx = multiprocessing.get_context("spawn")
    while todo:
        with ctx.Pool(jobs, maxtasksperchild=200) as pool:
            pending = [(i, pool.apply_async(_work, (tasks[i],))) for i in todo]
            todo = []
            for n, (i, handle) in enumerate(pending):
                try:
                    results[i] = handle.get(timeout)
                except multiprocessing.TimeoutError:
                    results[i] = ("crash", f"no result after {timeout:.0f} s (a hang or a dead worker)", timeout)
                    todo = [j for j, _ in pending[n + 1:]]
                    break
                done = sum(r is not None for r in results)
                print(f"[{done}/{len(tasks)}] {tasks[i][0]} {tasks[i][3]}: {results[i][0]}", file=sys.stderr)
            pool.terminate()
    return results


def markdown(rows, with_tvm: bool) -> str:
    """The table per op type and the totals, then the refusals grouped by reason."""
    by_op = defaultdict(list)
    for row in rows:
        by_op[row["op"]].append(row)
    head = ["op type", "cases", "kiln pass", "refused", "fail", "crash"] + (["TVM pass"] if with_tvm else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def line(label, group):
        counts = Counter(r["kiln"] for r in group)
        cells = [label, len(group)] + [counts[s] for s in STATUSES]
        if with_tvm:
            cells.append(sum(r.get("tvm") == "pass" for r in group))
        return "| " + " | ".join(str(c) for c in cells) + " |"

    lines += [line(op, group) for op, group in sorted(by_op.items())]
    lines.append(line("**total**", rows))
    reasons = Counter(_reason_class(r["kiln_reason"]) for r in rows if r["kiln"] == "refused")
    if reasons:
        lines += ["", "| kiln refused because | cases |", "|---|---|"]
        lines += [f"| {reason} | {n} |" for reason, n in reasons.most_common()]
    return "\n".join(lines) + "\n"


def _reason_class(reason: str) -> str:
    """A refusal's message without its node and value names and its numbers
    (not a dtype's), to group alike ones."""
    text = re.sub(r"^.*?node '[^']*'(, [^:]*)?: ", "", reason)
    text = re.sub(r"(input|output|initializer) '[^']*'", r"\1 '...'", text)
    text = re.sub(r"(?<![a-zA-Z\d.])-?\d+(\.\d+)?(e-?\d+)?", "N", text)
    return text[:160].replace("|", "/")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tvm", action="store_true", help="also run TVM's Relax ONNX frontend on each case")
    parser.add_argument("--op", action="append", help="only this op type under test (repeatable)")
    parser.add_argument("-k", dest="pattern", help="only cases whose name matches this regular expression")
    parser.add_argument("-n", type=int, help="at most N cases per op type")
    parser.add_argument("-j", "--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per case and frontend (default 300)")
    parser.add_argument("--out", help="write the markdown table here (default: print it)")
    parser.add_argument("--json", help="write every case's status and reason here")
    args = parser.parse_args()
    if args.jobs < 1 or args.timeout <= 0 or args.n is not None and args.n < 1:
        parser.error("expected --jobs >= 1, --timeout > 0 and -n >= 1")
    cases = claimed_cases(set(args.op or ()), args.pattern, args.n)
    engines = ["kiln", "tvm"] if args.tvm else ["kiln"]
    tasks = [(engine, case.model.SerializeToString(), data_arrays(case.data_sets), case.name)
             for _, case in cases for engine in engines]
    results = iter(run_all(tasks, args.jobs, args.timeout))
    rows = []
    for op, case in cases:
        row = {"name": case.name, "op": op}
        for engine in engines:
            status, reason, seconds = next(results)
            row.update({engine: status, f"{engine}_reason": reason, f"{engine}_seconds": seconds})
        rows.append(row)
    table = markdown(rows, args.tvm)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table)
    else:
        print(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
