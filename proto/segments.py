"""Names of the shared-memory segments consumers and daemons agree on."""

from __future__ import annotations

import hashlib
from typing import Final

SEGMENT_PREFIX: Final = "datfabric-"
"""Every segment of the fabric: ``datfabric-<IA name>-a<n>`` for a chunk of an IA's arena,
``-wq<ep>`` and ``-eq<evd>`` for its queues (memfd names; nothing is a file)."""

OWN_MEMORY: Final = ""
"""The segment of a VIRTUAL lmr_create that names the calling process's own memory."""

SHARED_PREFIX: Final = "datfabric-shared-"
"""Segments of DAT_MEM_TYPE_SHARED_VIRTUAL memory, one per cookie, node-wide."""


def shared_segment_name(cookie: bytes) -> str:
    """The segment a DAT_LMR_COOKIE names: a digest of all 40 bytes (never a C string)."""
    return SHARED_PREFIX + hashlib.sha256(cookie).hexdigest()[:40]
