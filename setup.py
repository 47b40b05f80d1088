"""Builds the codec's optional C accelerator; everything else is declared in pyproject.toml.

``optional=True``: where no compiler is available the install still succeeds
and the codec uses its pure-Python path, which gives identical results.
"""

from setuptools import Extension, setup

_SOURCES = [f"airflow_rbak/codec/_speedups{part}.c" for part in ("", "_body", "_frames", "_read", "_write")]

setup(
    ext_modules=[
        Extension("airflow_rbak.codec._speedups", _SOURCES, depends=["airflow_rbak/codec/_speedups.h"], optional=True)
    ]
)
