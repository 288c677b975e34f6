"""bench.compare_table: rounds summed up, each figure's median over the rounds that measured
it, each ratio the median of the rounds' own ratios (ours and UCX's side by side in a round)."""

from __future__ import annotations

import pytest

from bench.compare_table import RATIOS, Row, medians, ratios_line


def _round(k: int, ours: float | None, ucx: float | None) -> Row:
    return Row(64, 100, ours_write_MBps=ours, ucx_put_bw_MBps=ucx, round=k)


def test_the_medians_of_rounds_pair_each_ratio_within_its_round() -> None:
    rounds = [_round(1, 4.0, 8.0), _round(2, 6.0, 4.0), _round(3, 5.0, 20.0)]
    row = medians(rounds)
    assert (row.ours_write_MBps, row.ucx_put_bw_MBps) == (5.0, 8.0)
    assert row.ratio("write_ratio") == 0.5  # of 0.5, 1.5, 0.25; not 5.0 / 8.0
    summary = row.to_json()
    assert summary["median_of"] == 3 and "round" not in summary
    assert summary["write_ratio"] == 0.5 and summary["ours_write_MBps"] == 5.0
    assert rounds[1].to_json()["round"] == 2
    assert set(RATIOS) <= set(summary)


def test_a_round_that_failed_a_run_leaves_it_to_the_others() -> None:
    row = medians([_round(1, None, 8.0), _round(2, 6.0, None), _round(3, 3.0, 6.0)])
    assert (row.ours_write_MBps, row.ucx_put_bw_MBps) == (4.5, 7.0)
    assert row.ratio("write_ratio") == 0.5  # only round 3 measured both
    assert row.ratio("send_ratio") is None
    assert row.cells()[5] == "n/a"  # the send ratio's cell


def test_the_ratios_line_lists_every_round() -> None:
    line = ratios_line(medians([_round(1, 4.0, 8.0), _round(2, None, 4.0)]))
    assert line.startswith("# 64 B, the ratio of each round: write 0.50 n/a; send n/a n/a;")
    assert line.endswith("read n/a n/a")


@pytest.mark.parametrize("name", sorted(RATIOS))
def test_a_single_run_computes_its_ratios_from_its_figures(name: str) -> None:
    ours, ucx = RATIOS[name]
    row = Row(4096, 100)
    setattr(row, ours, 3.0)
    setattr(row, ucx, 12.0)
    assert row.ratio(name) == 0.25 and row.to_json()[name] == 0.25
    assert "round" not in row.to_json() and "median_of" not in row.to_json()
