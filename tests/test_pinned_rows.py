"""Behaviour pinned: a grid sample's rows, recorded in float64 before the redesign (tests/pinned_rows.py)."""
import json

import jax
import pytest

import pinned_rows


@pytest.mark.skipif(not jax.config.jax_enable_x64, reason="the rows are pinned in float64")
def test_grid_sample_rows_are_unchanged():
    with open(pinned_rows.PATH) as f:
        want = json.load(f)
    got = pinned_rows.compute_rows()
    bad = pinned_rows.differences(got, want, rtol=1e-9, atol=1e-12)
    assert not bad, "\n".join(bad[:20])
