"""What a bad handle argument of a call gives: DAT_INVALID_HANDLE with the subtype of the
handle's kind (the schema annotations of proto.calls and proto.srq_calls)."""

from __future__ import annotations

from typing import Final

from proto.constants import DatReturnSubtype as Sub
from proto.errors import DatInvalidHandle
from proto.schema import Bad

HANDLE_EP: Final = Bad(DatInvalidHandle, Sub.INVALID_HANDLE_EP)
HANDLE_LMR: Final = Bad(DatInvalidHandle, Sub.INVALID_HANDLE_LMR)
HANDLE_RMR: Final = Bad(DatInvalidHandle, Sub.INVALID_HANDLE_RMR)
HANDLE_PZ: Final = Bad(DatInvalidHandle, Sub.INVALID_HANDLE_PZ)
HANDLE_PSP: Final = Bad(DatInvalidHandle, Sub.INVALID_HANDLE_PSP)
HANDLE_RSP: Final = Bad(DatInvalidHandle, Sub.INVALID_HANDLE_RSP)
HANDLE_CR: Final = Bad(DatInvalidHandle, Sub.INVALID_HANDLE_CR)
HANDLE_SRQ: Final = Bad(DatInvalidHandle, Sub.INVALID_HANDLE_SRQ)
EVD_CR: Final = Bad(DatInvalidHandle, Sub.INVALID_HANDLE_EVD_CR)
EVD_RECV: Final = Bad(DatInvalidHandle, Sub.INVALID_HANDLE_EVD_RECV)
EVD_REQUEST: Final = Bad(DatInvalidHandle, Sub.INVALID_HANDLE_EVD_REQUEST)
EVD_CONN: Final = Bad(DatInvalidHandle, Sub.INVALID_HANDLE_EVD_CONN)
