import os
import sys
import tempfile

# Tests share one throwaway kernel cache, never the user's.
os.environ.setdefault("KILN_CACHE_DIR", tempfile.mkdtemp(prefix="kiln-test-cache-"))
sys.path.insert(0, os.path.dirname(__file__))
