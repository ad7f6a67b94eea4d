"""Compiles the simulator's hot modules with Cython (``goodput/simulator/compiled.py`` lists them and says why).

The build is optional: where no C compiler or Python headers exist, the package installs as pure
Python and behaves the same, only slower.
"""

import runpy
import sys
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

MODULES = runpy.run_path("goodput/simulator/compiled.py")["COMPILED_MODULES"]
DIRECTIVES = {"language_level": 3, "infer_types": True, "annotation_typing": False}


class OptionalBuildExt(build_ext):
    """All or nothing: the compiled modules share their types, so one missing build would break the others."""

    def run(self) -> None:
        inplace = self.inplace  # set by --inplace and by editable installs; the build clears it while compiling
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - no compiler, no Python headers, or a compile error
            # remove the build directory's copies and any older build beside the source (it would be stale)
            for where in {False, inplace}:
                self.inplace = where
                for ext in self.extensions:
                    Path(self.get_ext_fullpath(ext.name)).unlink(missing_ok=True)
            self.inplace = inplace
            print(f"warning: simulator not compiled ({exc}); it runs as pure Python", file=sys.stderr)


extensions = [Extension(m, [m.replace(".", "/") + ".py"]) for m in MODULES]
setup(ext_modules=cythonize(extensions, compiler_directives=DIRECTIVES, quiet=True), cmdclass={"build_ext": OptionalBuildExt})
