"""Build the API reference from the docstrings: ``python docs/build_api.py [OUT]`` (default docs/api).

Documents every public module of ``diffmjx`` and ``cfd`` with pdoc (Google-style docstrings) and
exits non-zero if pdoc warns about anything (a broken annotation, a bad reference), so CI can
check that the reference builds cleanly.
"""

import os
import pkgutil
import sys
import warnings
from pathlib import Path

os.environ.setdefault("PDOC_ALLOW_EXEC", "1")  # mujoco's renderer probes GLFW in a subprocess on import

import pdoc
import pdoc.render

PACKAGES = ("diffmjx", "cfd")


def modules() -> list[str]:
    """Public modules of :data:`PACKAGES`, parents first; a module pdoc already reaches through its
    package's ``__all__`` is not named twice."""
    out = []
    for name in PACKAGES:
        package = __import__(name)
        out.append(name)
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{name}."):
            parent, _, leaf = info.name.rpartition(".")
            if any(part.startswith("_") for part in info.name.split(".")):
                continue
            if leaf in getattr(sys.modules[parent], "__all__", ()):
                continue
            out.append(info.name)
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out = Path(argv[0]) if argv else Path(__file__).parent / "api"
    pdoc.render.configure(docformat="google")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pdoc.pdoc(*modules(), output_directory=out)
    problems = [w for w in caught if "pdoc" in w.filename]
    for w in problems:
        print(f"pdoc: {w.message}", file=sys.stderr)
    print(f"API reference: {out / 'index.html'} ({len(modules())} modules, {len(problems)} warnings)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
