import os
import sys
import tempfile

# Tests share one throwaway kernel cache, never the user's.
os.environ.setdefault("KILN_CACHE_DIR", tempfile.mkdtemp(prefix="kiln-test-cache-"))
# Three workers, each with TVM's pool of a thread per core, and their subprocesses share two cores: a
# pool's threads spinning at a parallel kernel's barrier then wait out each other's time slices (a
# tutorial ran 3x slower in the suite than alone). Sleeping at once instead changes when a thread
# wakes, not what a kernel computes.
os.environ.setdefault("TVM_THREAD_POOL_SPIN_COUNT", "0")
sys.path.insert(0, os.path.dirname(__file__))

# The longest tests start first (each takes 20-120 s with a cold kernel cache): the workers share them out
# early, so none of them is left running alone at the end while the other workers idle.
LONGEST_FIRST = (
    "test_tutorials.py::test_tutorial_runs[10_",
    "test_bench.py::test_every_suite_gives_valid_json_markdown_and_a_plot",
    "test_tutorials.py::test_tutorial_runs[11_",
    "test_tutorials.py::test_tutorial_runs[08_",
    "test_tutorials.py::test_tutorial_runs[09_",
    "test_autotune_faults.py",
    "test_tutorials.py",
    "test_onnx_node_cases.py",
    "test_language_models.py",
    "test_export_sequence.py",
    "test_cuda.py::test_every_op_case_lowers",
    "test_model_tuning.py",
    "test_compile.py",
)


def _rank(item) -> int:
    path = item.nodeid.rsplit("/", 1)[-1]
    return next((i for i, prefix in enumerate(LONGEST_FIRST) if path.startswith(prefix)), len(LONGEST_FIRST))


def pytest_collection_modifyitems(items):
    items.sort(key=_rank)  # stable: the rest keep their order
