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
