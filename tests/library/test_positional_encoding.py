"""Sinusoidal positional encoding (paper section 3.5), checked against the formula by hand."""

from __future__ import annotations

import math

import pytest
import torch

from transformer.core.embeddings import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    sinusoidal_table,
)


@pytest.mark.parametrize(
    ("pos", "dim"), [(0, 0), (0, 1), (1, 0), (1, 1), (7, 4), (50, 9), (99, 62)]
)
def test_known_values(pos, dim):
    d_model = 64
    table = sinusoidal_table(100, d_model)
    i = dim // 2
    angle = pos / 10000 ** (2 * i / d_model)
    expected = math.sin(angle) if dim % 2 == 0 else math.cos(angle)  # sin on even, cos on odd
    assert table[pos, dim].item() == pytest.approx(expected, abs=1e-6)


def test_position_zero_alternates_zero_and_one():
    row = sinusoidal_table(1, 8)[0]
    assert row.tolist() == [0.0, 1.0] * 4


def test_relative_position_is_a_fixed_linear_map():
    """PE(pos + k) = M_k PE(pos) with one M_k for every pos (section 3.5).

    M_k is block-diagonal: on each (sin, cos) pair of frequency ω_i it is the rotation by k·ω_i,
    from sin(a + b) = sin a cos b + cos a sin b and cos(a + b) = cos a cos b − sin a sin b.
    """
    d_model, k = 16, 5
    table = sinusoidal_table(300, d_model).double()
    m_k = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        w = k / 10000 ** (2 * i / d_model)
        m_k[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor(
            [[math.cos(w), math.sin(w)], [-math.sin(w), math.cos(w)]]
        )
    before, after = table[:-k], table[k:]  # (N, d): PE(pos) and PE(pos + k)
    assert torch.allclose(before @ m_k.T, after, atol=1e-5)
    # ... and it is not the identity: a map for another shift does not fit.
    assert not torch.allclose(table[:-1] @ m_k.T, table[1:], atol=1e-2)


def test_encoding_is_a_buffer_not_a_parameter():
    pe = SinusoidalPositionalEncoding(16, 32)
    assert list(pe.parameters()) == []
    assert "table" in dict(pe.named_buffers())
    assert pe(4, offset=3).shape == (4, 16)
    assert torch.equal(pe(4, offset=3), pe.table[3:7])


@pytest.mark.parametrize(
    "module", [SinusoidalPositionalEncoding(8, 10), LearnedPositionalEmbedding(8, 10)]
)
def test_past_max_len_is_a_clear_error(module):
    assert module(10).shape == (10, 8)
    with pytest.raises(ValueError, match=r"longer than max_len=10"):
        module(11)
    with pytest.raises(ValueError, match="max_len"):
        module(2, offset=9)


def test_base_is_a_parameter_of_the_table():
    assert not torch.allclose(sinusoidal_table(10, 8, base=100.0), sinusoidal_table(10, 8))
    with pytest.raises(ValueError):
        sinusoidal_table(10, 7)
