"""ptc-spec: the contract every ptc package speaks (op sets, dialects, metadata, graph files)."""

from .builder import GraphBuilder
from .config import Config, config_from_env
from .device_meta import norm_statistics_dtype, on_meta_device, run_meta, running_statistics_dtype
from .dialects import DIALECT_KEY, check, dialect_of, known_dialects, offending_nodes, require_dialect, set_dialect
from .dispatch_mode import DispatchMode
from .errors import (
    BoundaryError,
    DataDependentError,
    DialectError,
    PtcSpecError,
    SerializationError,
    TraceError,
    UnbackedSizeError,
    UnsupportedDialectError,
)
from .events import EventChannel, TimedStep
from .fallback import FALLBACK_KEY, fallback_problem, is_fallback, mark_fallback
from .meta import META_KEY, SymSize, TensorMeta, contiguous_strides, dynamic_meta, size_symbol
from .meta_rules import PlainMetaMode
from .opset import CATEGORIES, LATEST_CORE, OPSETS, OpEntry, OpSet, opset, overload_name
from .serialize import FORMAT, decode_value, dumps, encode_value, graph_fingerprint, load, loads, roundtrip, save
from .shapes import SHAPE_ENV_KEY, SymbolEnv, record_shape_env, shape_env_of, symbol_values
from .sym_exprs import Term, integer_valued, term_source, term_value, to_term
from .symnode import SymNode, expr_of, symbolic
from .targets import allow_target, is_allowed_target, resolve_target, target_name
from .tracer import TracedTensor, Tracer, finish, symbolic_dispatch, trace
from .value_ranges import ValueRange

__version__ = "0.1.0"


def node_meta(node: object) -> object:
    """Return ``node.meta[META_KEY]``, raising a clear KeyError when the node has none."""
    meta = getattr(node, "meta", {})
    if META_KEY not in meta:
        raise KeyError(f"node {getattr(node, 'name', node)} has no {META_KEY!r} metadata; trace or build it with ptc_spec")
    return meta[META_KEY]


__all__ = [
    "CATEGORIES",
    "DIALECT_KEY",
    "EventChannel",
    "FALLBACK_KEY",
    "FORMAT",
    "LATEST_CORE",
    "META_KEY",
    "OPSETS",
    "BoundaryError",
    "Config",
    "DataDependentError",
    "DialectError",
    "DispatchMode",
    "GraphBuilder",
    "OpEntry",
    "OpSet",
    "PlainMetaMode",
    "PtcSpecError",
    "SHAPE_ENV_KEY",
    "SerializationError",
    "SymbolEnv",
    "SymNode",
    "SymSize",
    "TensorMeta",
    "TimedStep",
    "Term",
    "TraceError",
    "TracedTensor",
    "Tracer",
    "UnbackedSizeError",
    "UnsupportedDialectError",
    "ValueRange",
    "allow_target",
    "check",
    "config_from_env",
    "contiguous_strides",
    "decode_value",
    "dialect_of",
    "dumps",
    "dynamic_meta",
    "encode_value",
    "graph_fingerprint",
    "expr_of",
    "fallback_problem",
    "integer_valued",
    "finish",
    "known_dialects",
    "load",
    "is_allowed_target",
    "is_fallback",
    "loads",
    "mark_fallback",
    "node_meta",
    "norm_statistics_dtype",
    "on_meta_device",
    "offending_nodes",
    "opset",
    "overload_name",
    "record_shape_env",
    "require_dialect",
    "resolve_target",
    "roundtrip",
    "run_meta",
    "running_statistics_dtype",
    "save",
    "set_dialect",
    "shape_env_of",
    "size_symbol",
    "integer_valued",
    "symbol_values",
    "symbolic",
    "symbolic_dispatch",
    "target_name",
    "term_source",
    "term_value",
    "to_term",
    "trace",
]
