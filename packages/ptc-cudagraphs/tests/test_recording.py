from __future__ import annotations

import torch

from ptc_cudagraphs.recording import input_aliases, view_of_input


def test_input_aliases_finds_views_of_buffers() -> None:
    buf = torch.randn(4, 4)
    outs = [buf[1:], buf * 2, 3]
    assert input_aliases(outs, {0: buf}) == {0: 0}


def test_view_of_input_follows_the_users_offset() -> None:
    buf = torch.randn(4, 4)
    user_base = torch.randn(5, 4)
    user = user_base[1:]
    view = view_of_input(buf[1:, ::2], buf, user)
    torch.testing.assert_close(view, user[1:, ::2])
    assert view.data_ptr() == user[1:, ::2].data_ptr()
