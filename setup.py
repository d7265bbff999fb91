"""Build hook: ship the ContactNets recording inside the wheel (everything else is in ``pyproject.toml``).

The recording stays where the repository keeps it, ``data/contactnets/`` beside its licence and
README. A build (``pip install .``, ``pip wheel .``, an sdist) maps the data package
``diffmjx.sysid.recordings`` onto that folder, so an installed ``diffmjx`` carries the three files
and :func:`diffmjx.sysid.load_tosses` finds them with ``importlib.resources``; an editable install
reads the folder in place.
"""

from setuptools import setup
from setuptools.command.build_py import build_py

RECORDINGS = "diffmjx.sysid.recordings"
FOLDER = "data/contactnets"
FILES = ["contactnets_cube_tosses.npz", "LICENSE", "README.md"]


class BuildPy(build_py):
    """``build_py`` with the recording's data package added (setuptools' ``packages.find`` sees only
    folders inside the package tree)."""

    def finalize_options(self) -> None:
        super().finalize_options()
        self.packages = [*(self.packages or []), RECORDINGS]
        self.package_dir = {**(self.package_dir or {}), RECORDINGS: FOLDER}
        self.package_data = {**(self.package_data or {}), RECORDINGS: FILES}


setup(cmdclass={"build_py": BuildPy})
