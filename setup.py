"""The C part of the Python client, client/_ringpost.c (its common post: client/posting.py);
everything else is in pyproject.toml. Its layout header is the C provider's."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "client._ringpost",
            ["client/_ringpost.c"],
            depends=["provider/df-abi.h"],
            include_dirs=["provider"],
            extra_compile_args=["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror"],
        )
    ]
)
