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


def test_fixed_layout_key_holds_static_addresses_and_marks_copies() -> None:
    from ptc_cudagraphs.keys import fixed_layout_key, parameter_positions

    w, x, p = torch.randn(3), torch.randn(2, 3), torch.nn.Parameter(torch.randn(3))
    static = frozenset({1}) | parameter_positions((x, w, p, 4))
    assert static == frozenset({1, 2})
    key = fixed_layout_key((x, w, p, 4), static, lambda t: False)
    assert copied_indices(key) == (0,)
    assert key[1] == ("s", w.data_ptr()) and key[2] == ("s", p.data_ptr())
    # Copied inputs are not told apart (the caller fixes their layout); a pool output is, by address.
    assert fixed_layout_key((torch.randn(2, 3), w, p, 4), static, lambda t: False) == key
    assert copied_indices(fixed_layout_key((x, w, p, 4), static, lambda t: t is x)) == ()
    assert fixed_layout_key((x, w, p, 5), static, lambda t: False) != key
