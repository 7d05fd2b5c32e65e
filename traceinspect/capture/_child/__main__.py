"""The entry file of the capture child: ``python .../_child/__main__.py CONFIG.json``.

Run by path, without traceinspect on the user's path: this file loads its own directory as a
package under a private name, so the sibling modules' relative imports work here as they do
when traceinspect imports ``traceinspect.capture._child``. Nothing is added to sys.path; the
directory Python put first on it is replaced by the script's own in ``run._run``.
"""

from __future__ import annotations

import importlib
import importlib.util
import pathlib
import sys
import types

# Not "traceinspect...": an installed traceinspect in the user's environment stays untouched.
PACKAGE = "_traceinspect_child"


def _load_package() -> types.ModuleType:
    """This directory as the package ``PACKAGE``, registered before its ``__init__`` runs (as
    the import system does) so that its modules can import one another."""
    here = pathlib.Path(__file__).resolve().parent
    spec = importlib.util.spec_from_file_location(
        PACKAGE, here / "__init__.py", submodule_search_locations=[str(here)]
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {here}")
    package = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = package
    spec.loader.exec_module(package)
    return package


if __name__ == "__main__":
    _load_package()
    importlib.import_module(f"{PACKAGE}.run").main(sys.argv)
