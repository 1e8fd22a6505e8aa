"""Behaviour pinned: a grid sample's rows, recorded in float64 before the redesign (tests/pinned_rows.py)."""
import json

import jax
import pytest

import pinned_rows

#: the configurations in four parts, so that the test processes share them
PARTS = [pinned_rows.NAMES[i::4] for i in range(4)]


@pytest.mark.skipif(not jax.config.jax_enable_x64, reason="the rows are pinned in float64")
@pytest.mark.parametrize("names", PARTS, ids=[f"part{i}" for i in range(4)])
def test_grid_sample_rows_are_unchanged(names):
    with open(pinned_rows.PATH) as f:
        want = json.load(f)
    want = {k: v for k, v in want.items() if k.split("|")[0] in names}
    assert len(want) == 8 * len(names)  # eight streams per configuration
    got = pinned_rows.compute_rows(names)
    # 1e-6: a stream whose targets reach ~1e5 has errors ~10 that are differences of two ~1e5 numbers, so a
    # prediction's last-bit difference between CPUs' instruction sets reads as ~1e-7 of its squared error.
    bad = pinned_rows.differences(got, want, rtol=1e-6, atol=1e-12)
    assert not bad, "\n".join(bad[:20])
