"""provider/df-abi.h says what docs/host-interface.md and proto/ say, number for number."""

from __future__ import annotations

import re

from proto import eventq, hostif, workq
from proto.frames import MAX_HEADER_LEN, MAX_PROTOCOL_VERSION, MIN_PROTOCOL_VERSION, FrameType
from tools.datconf import ROOT

HEADER = (ROOT / "provider" / "df-abi.h").read_text()


def define(name: str) -> int:
    found = re.search(rf"^#define {name} \(?([0-9a-fx]+)u?\b", HEADER, re.M)
    assert found, f"{name} is not a plain #define in df-abi.h"
    return int(found.group(1), 0)


def enumerator(name: str) -> int:
    found = re.search(rf"\b{name} = (0x[0-9a-f]+|\d+)", HEADER)
    assert found, f"{name} is not an enumerator of df-abi.h"
    return int(found.group(1), 0)


def test_ring_constants() -> None:
    assert define("DF_HOSTIF_VERSION") == hostif.HOSTIF_VERSION
    assert define("DF_RING_MAGIC") == hostif.MAGIC
    assert define("DF_LINE") == hostif.LINE
    assert define("DF_WQ_ENTRIES") == workq.WQ_ENTRIES
    assert define("DF_WQ_ENTRY_SIZE") == workq.WQ_ENTRY_SIZE
    assert define("DF_EQ_ENTRY_SIZE") == eventq.EQ_ENTRY_SIZE
    assert define("DF_ASYNC_EVD") == hostif.ASYNC_EVD
    assert define("DF_EQE_NOTIFIES") == eventq.NOTIFIES
    assert define("DF_EQE_SRQ_RECEIVE") == eventq.SRQ_RECEIVE
    full_wqe = hostif.WQE.size + define("DF_WQE_MAX_SEGMENTS") * hostif.SEGMENT.size
    assert full_wqe <= workq.WQ_ENTRY_SIZE
    assert define("DF_STAGE_BYTES") == hostif.STAGE_BYTES
    assert define("DF_WQE_STAGED") == hostif.STAGED
    for kind in hostif.RingKind:
        assert enumerator(f"DF_RING_{kind.name}") == kind
    for op in hostif.Opcode:
        assert enumerator(f"DF_OP_{op.name}") == op


def test_words_sit_where_the_daemon_reads_them() -> None:
    # cons_words[i] is at 132 + 4 i, prod_words[i] at 68 + 4 i (struct df_ring_hdr)
    for name, offset in (("DONE", 4), ("STATE", 8), ("HEARD", 12), ("POLL", 16), ("BOUND", 20)):
        assert 132 + 4 * enumerator(f"DF_WQ_{name}") == hostif.CONSUMER_LINE + offset
    assert 68 + 4 * enumerator("DF_EQ_OVERFLOW") == eventq.EqWord.OVERFLOW
    assert 68 + 4 * enumerator("DF_EQ_NOTIFIED") == eventq.EqWord.NOTIFIED
    assert 132 + 4 * enumerator("DF_EQ_ARM") == eventq.EqWord.ARM
    assert 132 + 4 * enumerator("DF_EQ_WANT") == eventq.EqWord.WANT


def test_frames_and_versions() -> None:
    assert MIN_PROTOCOL_VERSION <= define("DF_PROTOCOL_VERSION") <= MAX_PROTOCOL_VERSION
    assert define("DF_MAX_HEADER_LEN") == MAX_HEADER_LEN
    for name in ("HELLO", "ERROR", "CALL", "REPLY", "NOTIFY", "DOORBELL"):
        assert enumerator(f"DF_FRAME_{name}") == FrameType[name]


def test_the_pages_work_queue_table_is_the_layout() -> None:
    page = (ROOT / "docs" / "host-interface.md").read_text()
    assert f"| `STAGE_OFFSET` | {workq.STAGE_OFFSET:,} |" in page
    assert f"| `STAGE_BYTES` | {hostif.STAGE_BYTES:,} |" in page
    assert f"| segment size | {workq.WQ_SEGMENT_BYTES:,} |" in page
    assert f"# The host interface (version {hostif.HOSTIF_VERSION})" in page
