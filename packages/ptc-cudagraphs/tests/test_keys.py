from __future__ import annotations

import torch

from ptc_cudagraphs.keys import copied_indices, input_key


def test_static_inputs_key_on_address_copied_on_layout() -> None:
    w, x = torch.randn(3), torch.randn(2, 3)
    key, devices = input_key((x, w, 4), frozenset({1}), lambda t: False)
    assert copied_indices(key) == (0,)
    assert key[1][1] == w.data_ptr()  # type: ignore[index]
    other, _ = input_key((torch.randn(2, 3), w.clone(), 4), frozenset({1}), lambda t: False)
    assert other[0] == key[0] and other[1] != key[1] and other[2] == key[2]
    assert devices == frozenset({torch.device("cpu")})


def test_layout_and_values_change_the_key() -> None:
    x = torch.randn(2, 3)
    base, _ = input_key((x, 1), frozenset(), lambda t: False)
    assert input_key((x.t(), 1), frozenset(), lambda t: False)[0] != base
    assert input_key((x, 2), frozenset(), lambda t: False)[0] != base
    assert input_key((x.double(), 1), frozenset(), lambda t: False)[0] != base


def test_pool_outputs_are_keyed_by_address() -> None:
    x = torch.randn(2)
    key, _ = input_key((x,), frozenset(), lambda t: t is x)
    assert copied_indices(key) == ()
