from __future__ import annotations

from ptc_cudagraphs.tree import BACKWARD, FORWARD, Tree, starts_new_generation


def _chain(tree: Tree, *names: str) -> None:
    for i, name in enumerate(names):
        tree.move_to(tree.add_child(i + 1, name, FORWARD, None))


def test_paths_key_children_by_function_and_signature() -> None:
    tree = Tree()
    a = tree.add_child(1, "a", FORWARD, ("k1",))
    assert tree.child(1, ("k1",)) is a
    assert tree.child(1, ("k2",)) is None
    tree.move_to(a)
    b = tree.add_child(2, "b", FORWARD, None)
    assert [n.name for n in b.path()] == ["b", "a"]


def test_generation_rules() -> None:
    tree = Tree()
    _chain(tree, "a", "b")
    rule = {"pending_mark": False, "auto": True, "current": tree.current}
    assert starts_new_generation(**rule, function_id=1, role=FORWARD)  # a again
    assert not starts_new_generation(**rule, function_id=3, role=FORWARD)  # new piece
    assert starts_new_generation(**{**rule, "pending_mark": True}, function_id=3, role=FORWARD)
    assert not starts_new_generation(**{**rule, "auto": False}, function_id=1, role=FORWARD)
    assert not starts_new_generation(pending_mark=False, auto=True, current=tree.root,
                                     function_id=1, role=FORWARD)


def test_forward_after_backward_starts_new_generation_but_backward_does_not() -> None:
    tree = Tree()
    fwd = tree.add_child(1, "fwd", FORWARD, None)
    tree.move_to(fwd)
    assert not starts_new_generation(pending_mark=False, auto=True, current=fwd,
                                     function_id=2, role=BACKWARD)
    bwd = tree.add_child(2, "bwd", BACKWARD, None)
    assert starts_new_generation(pending_mark=False, auto=True, current=bwd,
                                 function_id=1, role=FORWARD)


def test_begin_generation_returns_to_root_and_counts() -> None:
    tree = Tree()
    _chain(tree, "a")
    tree.pending_mark = True
    tree.begin_generation()
    assert tree.current is tree.root and tree.generation == 1 and not tree.pending_mark


def test_remove_and_drop_function_detach_subtrees() -> None:
    tree = Tree()
    _chain(tree, "a", "b", "c")
    removed = tree.drop_function(2)
    assert [n.name for n in removed] == ["b", "c"]
    assert [n.name for n in tree.nodes()] == ["a"]
    assert tree.current.name == "a"


def test_indices_follow_recording_order() -> None:
    tree = Tree()
    a = tree.add_child(1, "a", FORWARD, None)
    b = tree.add_child(2, "b", FORWARD, None)
    tree.assign_index(b)
    tree.assign_index(a)
    assert (b.index, a.index) == (0, 1)
