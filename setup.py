"""Builds the codec's optional C accelerator; everything else is declared in pyproject.toml.

``optional=True``: where no compiler is available the install still succeeds
and the codec uses its pure-Python path, which gives identical results.
"""

import os

from setuptools import Extension, setup
from setuptools.command.egg_info import egg_info


class EggInfoUnderBuild(egg_info):
    """Metadata under build/, not beside the package: a checkout on ``sys.path`` (the tests' ``PYTHONPATH``) would
    otherwise show importlib.metadata a second airflow-rbak, and Airflow would load its plugin from both."""

    def initialize_options(self) -> None:
        super().initialize_options()
        os.makedirs("build", exist_ok=True)
        self.egg_base = "build"


_SOURCES = [f"airflow_rbak/codec/_speedups{part}.c" for part in ("", "_body", "_frames", "_read", "_write")]
_HEADERS = [f"airflow_rbak/codec/_speedups{part}.h" for part in ("", "_cursor", "_wbuf")]

setup(
    cmdclass={"egg_info": EggInfoUnderBuild},
    ext_modules=[
        Extension("airflow_rbak.codec._speedups", _SOURCES, depends=_HEADERS, optional=True)
    ]
)
