"""The bench's order of sides per round (bench/scenarios.py: round_order): over as many
rounds as sides, each side goes first once and, for an even count, follows every other
side exactly once; two sides alternate."""

from __future__ import annotations

import pytest

from bench.scenarios import round_order


@pytest.mark.parametrize("count", [2, 4, 6])
def test_each_side_goes_first_once_and_follows_every_other_once(count: int) -> None:
    sides = [f"s{index}" for index in range(count)]
    rows = [round_order(sides, r) for r in range(count)]
    assert all(sorted(row) == sides for row in rows)
    assert sorted(row[0] for row in rows) == sides
    pairs = [(row[i], row[i + 1]) for row in rows for i in range(count - 1)]
    assert len(pairs) == len(set(pairs)) == count * (count - 1)


def test_two_sides_alternate() -> None:
    assert [round_order(["direct", "mlstream"], r) for r in range(3)] == [
        ["direct", "mlstream"], ["mlstream", "direct"], ["direct", "mlstream"]]
