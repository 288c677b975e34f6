"""bench.lookups: the run-time look-ups read from mypyc's generated C, and the rule it keeps for
the data path (a window-1 request's compiled steps read no module dictionary but where
``LEFT`` says why)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench import lookups
from proto import native

_C = """
static int helper(void);
tuple_T2OO CPyDef_runs___lone(PyObject *cpy_r_ep) {
    PyObject *cpy_r_r0;
    cpy_r_r0 = CPyStatics[12]; /* 'LENGTH' */
    cpy_r_r1 = CPyDict_GetItem(CPyStatic_runs___globals, cpy_r_r0);
    cpy_r_r2 = CPyStatics[13]; /* 'RDMA_READ' */
    cpy_r_r3 = CPyObject_GetAttr(cpy_r_r1, cpy_r_r2);
    cpy_r_r4 = CPyStatics[14]; /* 'append' */
    PyObject *cpy_r_r5[2] = {cpy_r_r3, cpy_r_ep};
    cpy_r_r6 = (PyObject **)&cpy_r_r5;
    cpy_r_r7 = PyObject_VectorcallMethod(cpy_r_r4, cpy_r_r6, 9223372036854775810ULL, 0);
}

char CPyDef_lane____open(PyObject *cpy_r_link) {
    return ((fabricd___nic___objects___PeerLinkObject *)cpy_r_link)->_authenticated;
}
"""


def test_it_reads_each_functions_dictionary_lookups_attribute_reads_and_method_calls() -> None:
    found = lookups.lookups(_C)
    assert set(found) == {"runs___lone", "lane____open"}
    lone = found["runs___lone"]
    assert (lone.dictionary, lone.attributes, lone.methods) == (
        ["LENGTH"],
        ["RDMA_READ"],
        ["append"],
    )
    assert found["lane____open"] == lookups.Lookups()


def test_the_generated_c_is_the_newest_build(tmp_path: Path) -> None:
    assert lookups.generated(tmp_path) is None
    (tmp_path / "build").mkdir()
    old, new = tmp_path / "build" / "__native_aaaa.c", tmp_path / "build" / "__native_bbbb.c"
    new.write_text("")
    old.write_text("")
    os.utime(new, (2_000_000_000, 2_000_000_000))
    os.utime(old, (1_000_000_000, 1_000_000_000))
    assert lookups.generated(tmp_path) == new


def test_a_window_1_requests_compiled_steps_read_no_module_dictionary() -> None:
    """The rule of README, "Native modules": every step of PATH exists in the build, and
    reads a module's dictionary only where LEFT says why."""
    path = lookups.generated()
    if path is None or native.why_interpreted() is not None:
        pytest.skip("the native modules are not built here, or not from these sources")
    found = lookups.lookups(path.read_text())
    for name in lookups.PATH:
        assert name in found, f"{name} is not compiled: PATH names a step that is gone"
        left = set(found[name].dictionary) - lookups.LEFT.get(name, frozenset())
        assert not left, f"{name} reads {sorted(left)} from a module's dictionary: make it Final"


def test_main_prints_a_line_per_function_of_the_c_it_is_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "__native_x.c"
    source.write_text(_C)
    assert lookups.main(["--source", str(source), "runs___lone", "no_such_function"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "runs___lone: dictionary ['LENGTH'], attributes ['RDMA_READ'], methods ['append']",
        "no_such_function: no such compiled function",
    ]
