"""Dinic's max flow: known small networks."""

from __future__ import annotations

from ptc_aot.maxflow import INF, FlowNetwork


def test_classic_network_has_the_known_max_flow_and_cut() -> None:
    # CLRS figure 26.1: max flow 23.
    net = FlowNetwork(6)
    for u, v, c in [(0, 1, 16), (0, 2, 13), (1, 3, 12), (2, 1, 4), (2, 4, 14), (3, 2, 9), (3, 5, 20), (4, 3, 7), (4, 5, 4)]:
        net.add_edge(u, v, c)
    value, source_side = net.min_cut(0, 5)
    assert value == 23
    assert source_side == {0, 1, 2, 4}


def test_infinite_edges_are_never_cut() -> None:
    net = FlowNetwork(4)
    net.add_edge(0, 1, INF)
    net.add_edge(1, 2, 5)
    net.add_edge(1, 3, 2)
    net.add_edge(3, 2, INF)
    value, source_side = net.min_cut(0, 2)
    assert value == 7
    assert source_side == {0, 1}


def test_long_chain_does_not_hit_the_recursion_limit() -> None:
    n = 5000
    net = FlowNetwork(n)
    for i in range(n - 1):
        net.add_edge(i, i + 1, 3 if i == n // 2 else 10)
    value, _ = net.min_cut(0, n - 1)
    assert value == 3
