"""Build of the one compiled module: oncelog.protocol._recordwalk (record validation on the
produce path, see its C source). Everything else is declared in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "oncelog.protocol._recordwalk",
            ["src/oncelog/protocol/_recordwalk.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Werror=implicit-function-declaration"],
        )
    ]
)
