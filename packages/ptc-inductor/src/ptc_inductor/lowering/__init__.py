"""Lowering from core-dialect FX graphs to loop IR; importing the submodules fills the table."""

from . import creation, extern, indexing_ops, matmul, pointwise, reductions, views
from .graph import GraphOutput, LoweredGraph, lower_graph
from .registry import EXTERN_OPS, LOWERINGS, register_lowering

__all__ = [
    "EXTERN_OPS",
    "LOWERINGS",
    "GraphOutput",
    "LoweredGraph",
    "creation",
    "extern",
    "indexing_ops",
    "lower_graph",
    "matmul",
    "pointwise",
    "reductions",
    "register_lowering",
    "views",
]
