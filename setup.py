"""The C parts of the Python client and the daemon: client/_ringpost.c (the client's common
post: client/posting.py), fabricd/_plaintake.c (the daemon's intake of the common WQE:
Initiator.post_plain) and fabricd/_landing.c (where a batch of RDMA Writes lands:
remote_access.write_targets), and proto/_scatter.c (a payload copied into its sink's views:
codec.FrameReader); everything else is in pyproject.toml. Their layout header is the C
provider's."""

from setuptools import Extension, setup

FLAGS = ["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror"]

setup(
    ext_modules=[
        Extension(
            name,
            [source],
            depends=["provider/df-abi.h"],
            include_dirs=["provider"],
            extra_compile_args=FLAGS,
        )
        for name, source in [
            ("client._ringpost", "client/_ringpost.c"),
            ("fabricd._plaintake", "fabricd/_plaintake.c"),
            ("fabricd._landing", "fabricd/_landing.c"),
            ("proto._scatter", "proto/_scatter.c"),
        ]
    ]
)
