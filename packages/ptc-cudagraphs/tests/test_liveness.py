from __future__ import annotations

import gc

import pytest
import torch

from ptc_cudagraphs.errors import OverwrittenOutputError
from ptc_cudagraphs.liveness import Liveness
from ptc_cudagraphs.tree import FORWARD, Node


def _node(name: str, index: int) -> Node:
    return Node(function_id=index, name=name, role=FORWARD, key=None, parent=None, index=index)


def test_replay_marks_own_and_later_outputs_only() -> None:
    live = Liveness()
    early, mid, late = _node("early", 0), _node("mid", 1), _node("late", 2)
    outs = {n.name: torch.ones(1) for n in (early, mid, late)}
    for node in (early, mid, late):
        live.hand_out(node, [outs[node.name]])
    assert live.invalidate_from(mid) == 2
    assert not live.is_overwritten(outs["early"])
    assert live.is_overwritten(outs["mid"]) and live.is_overwritten(outs["late"])
    with pytest.raises(OverwrittenOutputError, match="g received an output of late"):
        live.check([outs["late"]], "g")
    live.check([outs["early"]], "g")


def test_dropped_outputs_leave_no_trace() -> None:
    live = Liveness()
    node = _node("f", 0)
    live.hand_out(node, [torch.ones(1)])
    gc.collect()
    assert live.live_count() == 0
    assert live.invalidate_from(node) == 0


def test_views_keep_an_output_alive() -> None:
    live = Liveness()
    node = _node("f", 0)
    out = torch.ones(4)
    live.hand_out(node, [out])
    view = out[1:]
    del out
    gc.collect()
    assert live.invalidate_from(node) == 1
    assert view._base is not None and live.is_overwritten(view._base)


def test_producer_is_known_only_for_live_handed_out_tensors() -> None:
    live = Liveness()
    node = _node("f", 0)
    out = torch.ones(1)
    live.hand_out(node, [out, 3])
    assert live.producer(out) is node
    assert live.producer(torch.ones(1)) is None
