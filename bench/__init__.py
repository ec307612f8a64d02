"""Benchmarks as library code: kiln against references measured in the same
run, at their full speed, synchronized, interleaved, with the spread.

- ``op.compare_op``: one op's kernel against its numpy reference (``kiln bench OP``);
- ``suites``: the cpu, train and inference suites (``kiln bench --suite``);
- ``machine``: the header every result carries (CPU, ISA, FMA peak, triad, BLAS);
- ``reference``: numpy/OpenBLAS in a child process without the OpenBLAS pins;
- ``timing``: warm-up until stable, interleaved samples, spread; samplers of
  a Python call, a kiln kernel and a module compiled by hand (exported here);
- ``report``: text, Markdown, JSON and the bar chart of ratios.
"""
from .timing import calls_sampler, compare, kernel_sampler, module_sampler

__all__ = ["calls_sampler", "compare", "kernel_sampler", "module_sampler"]
