"""Build the docs site: ``python docs/build_site.py [OUT]`` (default ``site/``, git-ignored).

The pages are docs/*.md rendered by MkDocs (``mkdocs.yml``: a guide and reports, the measured
tables written by ``docs/build_tables.py``), and the API reference from the docstrings
(``docs/build_api.py``, pdoc) goes under ``OUT/api/``. Exits non-zero on any MkDocs warning (a
broken link or anchor, a page missing from the docs) or pdoc warning, so a test can keep the site
building cleanly. Open ``OUT/index.html``.
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs"))

import build_api  # noqa: E402  (docs/ is not a package)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out = (Path(argv[0]) if argv else ROOT / "site").resolve()
    pages = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",  # not --quiet: MkDocs then stops counting warnings and strict lets them pass
            "-f",
            str(ROOT / "mkdocs.yml"),
            "-d",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if pages.returncode:
        print(pages.stdout + pages.stderr, file=sys.stderr)
        print("docs site: MkDocs failed (warnings are errors)", file=sys.stderr)
        return 1
    if build_api.main([str(out / "api")]):
        return 1
    print(f"docs site: {out / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
