"""The op case table: every module in this folder defines ``CASES``, a list of
``helpers.Case``; together they must cover every registered op."""
import importlib
import pkgutil

CASES = []
for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    CASES.extend(importlib.import_module(f"{__name__}.{_info.name}").CASES)
