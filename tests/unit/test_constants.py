"""proto.constants and proto.errors: values pinned against the installed DAT 2.0 C headers."""

from __future__ import annotations

import inspect
import pickle
import re
import shutil
import subprocess
from enum import IntEnum, IntFlag
from pathlib import Path

import pytest

from proto import constants as C
from proto import errors as E
from proto.constants import (
    DatReturnSubtype,
    DatReturnType,
    MemPriv,
    ServiceType,
    dat_error,
    get_subtype,
    get_type,
    is_error,
)

DAT_INCLUDE = Path("/usr/include/dat2")
U64 = (1 << 64) - 1
MISSING_HEADERS = (
    "DAT 2.0 headers or gcc missing; libdapl-dev not installed: apt-get install libdapl-dev"
)

# --- Python name -> C name -------------------------------------------------------------------

EnumClass = type[IntEnum] | type[IntFlag]

# Per class: (C prefix, C suffix) around the member name, and the C enum tag (None: #defines).
RULES: dict[EnumClass, tuple[str, str, str | None]] = {
    C.DatReturnType: ("DAT_", "", "dat_return_type"),
    C.DatReturnSubtype: ("DAT_", "", "dat_return_subtype"),
    C.Boolean: ("DAT_", "", "dat_boolean"),
    C.HaLb: ("DAT_HA_LB_", "", None),
    C.CompletionFlags: ("DAT_COMPLETION_", "_FLAG", "dat_completion_flags"),
    C.Dtos: ("DAT_DTO_", "", "dat_dtos"),
    C.Qos: ("DAT_QOS_", "", "dat_qos"),
    C.ConnectFlags: ("DAT_CONNECT_", "_FLAG", "dat_connect_flags"),
    C.CloseFlags: ("DAT_CLOSE_", "_FLAG", "dat_close_flags"),
    C.EvdFlags: ("DAT_EVD_", "_FLAG", "dat_evd_flags"),
    C.PspFlags: ("DAT_PSP_", "_FLAG", "dat_psp_flags"),
    C.MemPriv: ("DAT_MEM_PRIV_", "_FLAG", "dat_mem_priv_flags"),
    C.VaType: ("DAT_VA_TYPE_", "", "dat_va_type"),
    C.RmrScope: ("DAT_RMR_SCOPE_", "", "dat_rmr_scope"),
    C.RmrParamMask: ("DAT_RMR_FIELD_", "", "dat_rmr_param_mask"),
    C.IovOwnership: ("DAT_IOV_", "", "dat_iov_ownership"),
    C.EpCreatorForPsp: ("DAT_PSP_CREATES_EP_", "", "dat_ep_creator_for_psp"),
    C.Extension: ("DAT_EXTENSION_", "", "dat_extension"),
    C.IaAttrMask: ("DAT_IA_FIELD_", "", None),
    C.ServiceType: ("DAT_SERVICE_TYPE_", "", "dat_service_type"),
    C.EpState: ("DAT_EP_STATE_", "", "dat_ep_state"),
    C.EpParamMask: ("DAT_EP_FIELD_", "", None),
    C.SrqState: ("DAT_SRQ_STATE_", "", "dat_srq_state"),
    C.SrqParamMask: ("DAT_SRQ_FIELD_", "", "dat_srq_param_mask"),
    C.PzParamMask: ("DAT_PZ_FIELD_", "", "dat_pz_param_mask"),
    C.PspParamMask: ("DAT_PSP_FIELD_", "", "dat_psp_param_mask"),
    C.RspParamMask: ("DAT_RSP_FIELD_", "", "dat_rsp_param_mask"),
    C.CspParamMask: ("DAT_CSP_FIELD_", "", "dat_csp_param_mask"),
    C.CrParamMask: ("DAT_CR_FIELD_", "", "dat_cr_param_mask"),
    C.DtoCompletionStatus: ("DAT_", "", "dat_dto_completion_status"),
    C.IaAsyncErrorReason: ("DAT_IA_", "", "ia_async_error_reason"),
    C.EpAsyncErrorReason: ("DAT_EP_", "", "ep_async_error_reason"),
    C.EvdAsyncErrorReason: ("DAT_EVD_", "", "evd_async_error_reason"),
    C.SrqAsyncErrorReason: ("DAT_SRQ_", "", "srq_async_error_reason"),
    C.LmrAsyncErrorReason: ("DAT_LMR_", "", "lmr_async_error_reason"),
    C.RmrAsyncErrorReason: ("DAT_RMR_", "", "rmr_async_error_reason"),
    C.PzAsyncErrorReason: ("DAT_PZ_", "", "pz_async_error_reason"),
    C.EventNumber: ("DAT_", "", "dat_event_number"),
    C.MemType: ("DAT_MEM_TYPE_", "", "dat_mem_type"),
    C.HandleType: ("DAT_HANDLE_TYPE_", "", "dat_handle_type"),
    C.EvdState: ("DAT_EVD_STATE_", "", "dat_evd_state"),
    C.EvdParamMask: ("DAT_EVD_FIELD_", "", "dat_evd_param_mask"),
    C.LmrParamMask: ("DAT_LMR_FIELD_", "", "dat_lmr_param_mask"),
    C.ProxyType: ("DAT_PROXY_TYPE_", "", "dat_proxy_type"),
    C.CnoParamMask: ("DAT_CNO_FIELD_", "", "dat_cno_param_mask"),
    C.PzSupport: ("DAT_PZ_", "", "dat_pz_support"),
    C.ProviderAttrMask: ("DAT_PROVIDER_FIELD_", "", None),
    C.HaRelationship: ("DAT_HA_", "", "dat_ha_relationship"),
    C.IbExtType: ("DAT_IB_", "", None),  # dat_ib_extensions.h: every member in IB_EXTENSION
}

# Members whose C name does not follow their class's rule.
OVERRIDES: dict[tuple[EnumClass, str], str] = {
    (C.ConnectFlags, "MULTIPATH"): "DAT_CONNECT_MULTIPATH_FLAG",
    (C.CloseFlags, "DEFAULT"): "DAT_CLOSE_DEFAULT",
    (C.EvdFlags, "EXTENSION_BASE"): "DAT_EVD_EXTENSION_BASE",
    (C.MemPriv, "EXTENSION_BASE"): "DAT_MEM_PRIV_EXTENSION_BASE",
    (C.EpAsyncErrorReason, "SRQ_SOFT_HIGH_WATERMARK_EVENT"): "DAT_SRQ_SOFT_HIGH_WATERMARK_EVENT",
}

# Members defined in dat_ib_extensions.h rather than the core headers.
IB_EXTENSION: dict[tuple[EnumClass, str], str] = {
    (C.MemPriv, "REMOTE_ATOMIC"): "DAT_IB_MEM_PRIV_REMOTE_ATOMIC",
    (C.ServiceType, "UD"): "DAT_IB_SERVICE_TYPE_UD",
    (C.EventNumber, "IB_DTO_EVENT"): "DAT_IB_DTO_EVENT",
    **{(C.Dtos, m): f"DAT_IB_DTO_{m[3:]}" for m in C.Dtos.__members__ if m.startswith("IB_")},
    **{(C.IbExtType, m): f"DAT_IB_{m}" for m in C.IbExtType.__members__},
}

# Members with no C constant at all: (class, member) -> reason. Currently every member has one.
NO_C_COUNTERPART: dict[tuple[EnumClass, str], str] = {}

# Module-level constants: Python name -> C name.
PLAIN: dict[str, str] = {
    name: "DAT_" + name
    for name in (
        "VERSION_MAJOR",
        "VERSION_MINOR",
        "THREADSAFE",
        "NAME_MAX_LENGTH",
        "TIMEOUT_INFINITE",
        "OPTIMAL_ALIGNMENT",
        "LMR_COOKIE_SIZE",
        "EVD_ASYNC_EXISTS",
        "EVD_OUT_OF_SCOPE",
        "WATERMARK_INFINITE",
        "HW_DEFAULT",
        "VALUE_UNKNOWN",
        "SRQ_LW_DEFAULT",
        "OPEN_EXTENSION_BASE",
        "CLOSE_EXTENSION_BASE",
    )
} | {
    name: name
    for name in (
        "DAT_CLASS_ERROR",
        "DAT_CLASS_WARNING",
        "DAT_CLASS_SUCCESS",
        "DAT_TYPE_MASK",
        "DAT_SUBTYPE_MASK",
        "DAT_SUCCESS",
    )
}
PLAIN_IB_EXTENSION: dict[str, str] = {"IB_EXTENSION_VERSION": "DAT_IB_EXTENSION_VERSION"}

# C enumerators / #defines deliberately not mirrored in Python: C name -> reason.
NOT_MIRRORED: dict[str, str] = {
    "DAT_IB_EXTENSION": "dat.h's switch for the IB extension header, not a value",
    "DAT_IA_FIELD_IA_MAX_DTO_PER_OP": "aliases DAT_IA_FIELD_IA_MAX_DTO_PER_EP_IN, which no header "
    "defines",
}


def c_name(cls: EnumClass, member: str) -> str:
    """The C constant a Python enum member mirrors."""
    key = (cls, member)
    if key in IB_EXTENSION:
        return IB_EXTENSION[key]
    if key in OVERRIDES:
        return OVERRIDES[key]
    prefix, suffix, _ = RULES[cls]
    return f"{prefix}{member}{suffix}"


def python_to_c() -> dict[str, tuple[str, int]]:
    """label -> (C name, Python value) for every enum member (aliases included) and constant."""
    out: dict[str, tuple[str, int]] = {}
    for cls in RULES:
        for member, value in cls.__members__.items():
            if (cls, member) in NO_C_COUNTERPART:
                continue
            out[f"{cls.__name__}.{member}"] = (c_name(cls, member), int(value))
    for name, cname in (PLAIN | PLAIN_IB_EXTENSION).items():
        out[name] = (cname, int(getattr(C, name)))
    return out


# --- Static checks of the tables (no compiler needed) ----------------------------------------


def test_every_enum_class_has_a_rule() -> None:
    classes = {
        obj
        for obj in vars(C).values()
        if inspect.isclass(obj)
        and issubclass(obj, (IntEnum, IntFlag))
        and obj.__module__ == C.__name__
    }
    assert classes == set(RULES)


def test_tables_name_real_members() -> None:
    for cls, member in [*OVERRIDES, *IB_EXTENSION, *NO_C_COUNTERPART]:
        assert member in cls.__members__, (cls, member)


# --- Header-derived checks -------------------------------------------------------------------

HEADERS = ("dat_error.h", "dat.h", "udat.h", "dat_registry.h")


def _header_text() -> str:
    text = "\n".join((DAT_INCLUDE / h).read_text(errors="replace") for h in HEADERS)
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"^\s*#\s*(if|ifdef|ifndef|endif|else)\b.*$", "", text, flags=re.M)


def _header_enums() -> dict[str, list[str]]:
    """C enum tag -> enumerator names, parsed from the headers (DAT_EXTENSIONS assumed on)."""
    enums: dict[str, list[str]] = {}
    for tag, body in re.findall(r"\benum\s+(\w+)\s*\{(.*?)\}", _header_text(), flags=re.S):
        names = [m.group(1) for item in body.split(",") if (m := re.match(r"\s*(\w+)", item))]
        enums[tag] = names
    return enums


@pytest.mark.skipif(not (DAT_INCLUDE / "dat.h").exists(), reason=MISSING_HEADERS)
def test_python_mirrors_every_header_constant() -> None:
    """Each enumerator (and each mask #define) of the headers has a Python member."""
    mirrored = {cname for cname, _ in python_to_c().values()}
    enums = _header_enums()
    text = _header_text()
    missing: list[str] = []
    for cls, (prefix, _, tag) in RULES.items():
        if tag is not None:
            assert tag in enums, f"enum {tag} not found in the headers"
            expected = enums[tag]
        else:
            expected = re.findall(rf"^\s*#\s*define\s+({prefix}\w+)\s", text, flags=re.M)
        missing += [f"{cls.__name__}: {n}" for n in expected if n not in mirrored]
    missing = [m for m in missing if m.split(": ")[1] not in NOT_MIRRORED]
    assert not missing


def _compile_and_run(tmp_path: Path, entries: dict[str, tuple[str, int]], ib: bool) -> str:
    lines = [
        "#include <stdio.h>",
        "#include <sys/socket.h>",
        "#include <netinet/in.h>",
        "#include <dat2/udat.h>",
        "#include <dat2/dat_registry.h>",
    ]
    if ib:
        lines.append("#include <dat2/dat_ib_extensions.h>")
    lines.append("int main(void) {")
    for label, (cname, _) in entries.items():
        lines.append(f'    printf("%s %llu\\n", "{label}", (unsigned long long)({cname}));')
    lines += ["    return 0;", "}"]
    src = tmp_path / "pin.c"
    exe = tmp_path / "pin"
    src.write_text("\n".join(lines) + "\n")
    gcc = shutil.which("gcc")
    assert gcc is not None
    build = subprocess.run(
        [gcc, "-std=gnu11", "-o", str(exe), str(src)], capture_output=True, text=True
    )
    if build.returncode != 0:
        raise RuntimeError(build.stderr)
    return subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout


@pytest.mark.skipif(
    not (DAT_INCLUDE / "dat.h").exists() or shutil.which("gcc") is None, reason=MISSING_HEADERS
)
def test_values_match_c_headers(tmp_path: Path) -> None:
    entries = python_to_c()
    try:
        out = _compile_and_run(tmp_path, entries, ib=True)
    except RuntimeError:
        # dat_ib_extensions.h did not compile here: its members cannot be pinned.
        ib_labels = {f"{cls.__name__}.{m}" for cls, m in IB_EXTENSION} | set(PLAIN_IB_EXTENSION)
        entries = {k: v for k, v in entries.items() if k not in ib_labels}
        out = _compile_and_run(tmp_path, entries, ib=False)
    c_values = {label: int(v) for label, v in (line.split() for line in out.splitlines())}
    assert set(c_values) == set(entries)
    wrong = {
        label: (cname, hex(py & U64), hex(c_values[label]))
        for label, (cname, py) in entries.items()
        if py & U64 != c_values[label]
    }
    assert not wrong


# --- DAT_RETURN helpers ----------------------------------------------------------------------


def test_reference_examples() -> None:
    bad_ep = dat_error(DatReturnType.INVALID_HANDLE, DatReturnSubtype.INVALID_HANDLE_EP)
    assert bad_ep == 0x8005000C
    assert dat_error(DatReturnType.QUEUE_EMPTY, DatReturnSubtype.NO_SUBTYPE) == 0x800D0000
    assert get_type(bad_ep) is DatReturnType.INVALID_HANDLE
    assert get_subtype(bad_ep) is DatReturnSubtype.INVALID_HANDLE_EP
    assert is_error(bad_ep)
    assert not is_error(C.DAT_SUCCESS)
    assert is_error(DatReturnType.INVALID_STATE)  # dapl's bare type without the class bit


def test_get_type_rejects_unknown_type() -> None:
    with pytest.raises(ValueError):
        get_type(0x80500000)
    with pytest.raises(ValueError):
        get_subtype(0x8006FFFF)


def test_header_facts() -> None:
    assert int(DatReturnType.NOT_IMPLEMENTED) == 0x3FFF0000
    assert DatReturnType["NAME_NOT_FOUND"] is DatReturnType.PROVIDER_NOT_FOUND
    assert int(DatReturnSubtype.INVALID_HANDLE_CSP) == 26
    assert MemPriv.ALL == MemPriv.READ | MemPriv.WRITE
    assert int(MemPriv.REMOTE_ATOMIC) == 0x40
    assert int(ServiceType.UD) == 1


# --- errors ----------------------------------------------------------------------------------


def _dat_error_classes() -> list[type[E.DatError]]:
    found: list[type[E.DatError]] = []
    todo = [E.DatError]
    while todo:
        for sub in todo.pop().__subclasses__():
            found.append(sub)
            todo.append(sub)
    return found


def test_one_subclass_per_type() -> None:
    classes = _dat_error_classes()
    by_type: dict[DatReturnType, list[type[E.DatError]]] = {}
    for cls in classes:
        by_type.setdefault(cls.TYPE, []).append(cls)
    expected = {t for t in DatReturnType if t is not DatReturnType.SUCCESS}
    assert set(by_type) == expected
    assert all(len(v) == 1 for v in by_type.values()), by_type
    for t, (cls,) in by_type.items():
        camel = "".join(part.capitalize() for part in t.name.split("_"))
        assert cls.__name__ == "Dat" + camel


SAMPLE_SUBTYPES = (
    DatReturnSubtype.NO_SUBTYPE,
    DatReturnSubtype.INVALID_HANDLE_EP,
    DatReturnSubtype.INVALID_ARG6,
    DatReturnSubtype.INVALID_STATE_EP_NOTREADY,
    DatReturnSubtype.THREAD_SAFETY_NOT_FOUND,
)


@pytest.mark.parametrize("t", [t for t in DatReturnType if t is not DatReturnType.SUCCESS])
def test_error_from_code_round_trips(t: DatReturnType) -> None:
    for s in SAMPLE_SUBTYPES:
        code = dat_error(t, s)
        err = E.error_from_code(code, "msg")
        assert err.type is t
        assert err.subtype is s
        assert err.code == code
        assert err.message == "msg"
        again = pickle.loads(pickle.dumps(err))
        assert type(again) is type(err)
        assert again.code == code


def test_error_from_code_edge_cases() -> None:
    bare = DatReturnType.INVALID_PARAMETER | DatReturnSubtype.INVALID_ARG6
    err = E.error_from_code(bare)
    assert isinstance(err, E.DatInvalidParameter)
    assert err.code == 0x80000000 | bare
    unknown_sub = E.error_from_code(0x8005FFFF)
    assert isinstance(unknown_sub, E.DatInvalidHandle)
    assert unknown_sub.subtype is DatReturnSubtype.NO_SUBTYPE
    assert isinstance(E.error_from_code(0x80500000), E.DatInternalError)
    with pytest.raises(ValueError):
        E.error_from_code(C.DAT_SUCCESS)


def test_str_and_properties() -> None:
    err = E.DatInvalidHandle(DatReturnSubtype.INVALID_HANDLE_EP, "no such EP")
    assert str(err) == "DAT_INVALID_HANDLE(DAT_INVALID_HANDLE_EP): no such EP"
    assert str(E.DatQueueEmpty()) == "DAT_QUEUE_EMPTY(DAT_NO_SUBTYPE)"
    assert err.code == 0x8005000C
    assert E.DatQueueEmpty().code == 0x800D0000
    with pytest.raises(TypeError):
        E.DatError()


def test_dat_strerror() -> None:
    assert E.dat_strerror(0x8005000C) == ("DAT_INVALID_HANDLE", "DAT_INVALID_HANDLE_EP")
    assert E.dat_strerror(0) == ("DAT_SUCCESS", "DAT_NO_SUBTYPE")
    assert E.dat_strerror(0x800A0000) == ("DAT_PROVIDER_NOT_FOUND", "DAT_NO_SUBTYPE")
    with pytest.raises(E.DatInvalidParameter):
        E.dat_strerror(0x80500000)


def test_protocol_errors_are_not_dat_errors() -> None:
    for cls in (E.FrameTooLarge, E.MalformedFrame, E.VersionMismatch, E.UnexpectedFrame):
        assert issubclass(cls, E.ProtocolError)
        assert not issubclass(cls, E.DatError)
    assert not issubclass(E.ProtocolError, E.DatError)
    assert not issubclass(E.DatError, E.ProtocolError)
