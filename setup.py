"""The C parts of the Python client and the daemon, each the fast path of one Python caller:
client/_ringpost.c (the client's common post: client/posting.py), client/_ringtake.c (runs of
its common completions: ClientCore.refill), fabricd/_plaintake.c (runs of the common WQE read
and checked, its walk in fabricd/plaintake_walk.h: Initiator.post_plain,
Target.post_recv_plain; and ShmMapper.fence's full barrier), fabricd/_landing.c (where a
batch of RDMA Writes lands: remote_access.write_targets and stored_writes),
fabricd/_receives.c (where the Sends of a batch land: Target._sends),
fabricd/_lanes.c (the lone Writes, ACKs and RDMA Read requests and answers at a read's head:
fabricd/nic/lane.py and Responder.serve; what each reads first in fabricd/lanes_head.h, a key's
grant in fabricd/lanes_grant.h; the extensions of fabricd/ share fabricd/pyu64.h),
proto/_scatter.c (a payload copied into its sink's views: codec.FrameReader), proto/_rows.c
(completion rows into an event queue, the Write list of a WRITES header: events.write_rows,
batch.encode_write_rows) and proto/_pack.c (headers of unsigned ints: codec.encode_ints and
encode_framed; the packing in proto/pack_u64.h, which _lanes.c shares). Everything else is
in pyproject.toml; their layout header is the C provider's.

And the daemon's data path compiled from its typed Python by mypyc (the modules of
proto/native.py: NATIVE), with each source's sha256 written beside them once they are built
(proto/native.sums: in the source tree for an editable install, in the wheel otherwise), so
a source edited since runs interpreted rather than stale (proto.native.steer).
DATFABRIC_INTERPRETED=1 at build time skips it."""

import json
import os
import runpy
from pathlib import Path
from types import SimpleNamespace

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# proto/native.py read by its path: before the install, the package is not importable
native = SimpleNamespace(**runpy.run_path(str(Path(__file__).parent / "proto" / "native.py")))
FLAGS = ["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror"]
SUMS: dict[str, str] = {}  # the NATIVE sources' sha256 as mypyc read them


def compiled() -> list[Extension]:
    """The NATIVE modules as mypyc extensions (none with DATFABRIC_INTERPRETED set)."""
    if os.environ.get(native.ENV):
        return []
    from mypyc.build import mypycify  # a build requirement (pyproject.toml)

    SUMS.update(native.sums())
    return list(mypycify([str(native.source(m).relative_to(native.ROOT)) for m in native.NATIVE]))


class BuildExt(build_ext):
    """Writes the sums beside proto's built modules once the build has succeeded: a build
    that fails, or compiles nothing, leaves none, and the sources run."""

    def run(self) -> None:
        at = Path(self.get_ext_fullpath("proto.native")).with_name(native.SUMS.name)
        at.unlink(missing_ok=True)
        super().run()
        if SUMS:
            at.write_text(json.dumps(SUMS, indent=1, sort_keys=True) + "\n")


setup(
    cmdclass={"build_ext": BuildExt},
    ext_modules=compiled()
    + [
        Extension(
            name,
            [source],
            depends=["provider/df-abi.h", *headers],
            include_dirs=["provider"],
            libraries=libraries,
            extra_compile_args=FLAGS,
        )
        for name, source, headers, libraries in [
            ("client._ringpost", "client/_ringpost.c", [], []),
            ("client._ringtake", "client/_ringtake.c", [], []),
            (
                "fabricd._plaintake",
                "fabricd/_plaintake.c",
                ["fabricd/plaintake_walk.h", "fabricd/pyu64.h"],
                [],
            ),
            ("fabricd._landing", "fabricd/_landing.c", ["fabricd/pyu64.h"], []),
            ("fabricd._receives", "fabricd/_receives.c", ["fabricd/pyu64.h"], []),
            (
                "fabricd._lanes",
                "fabricd/_lanes.c",
                [
                    "fabricd/pyu64.h",
                    "fabricd/lanes_head.h",
                    "fabricd/lanes_grant.h",
                    "proto/pack_u64.h",
                ],
                ["msgpackc"],  # libmsgpack-dev: msgpack_unpack_next
            ),
            ("proto._scatter", "proto/_scatter.c", [], []),
            ("proto._rows", "proto/_rows.c", [], []),
            # msgpack-c's pack.h alone: no library
            ("proto._pack", "proto/_pack.c", ["proto/pack_u64.h"], []),
        ]
    ],
)
