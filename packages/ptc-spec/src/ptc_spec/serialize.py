"""Graph files, format ``ptc-graph/1``: one safetensors file, the graph as JSON in its header.

Loading never executes code: the header is parsed as JSON by this module, tensors are read
by safetensors, and every call target resolves through the allow-list in ``targets``.

Values are JSON where JSON is unambiguous (None, bool, int, str, finite floats, lists);
everything else is an object tagged by ``"$"``: tuples, dicts, nodes, dtypes, devices,
memory formats, layouts, slices, Ellipsis, non-finite floats, complex numbers, torch.Size,
sympy expressions and TensorMeta.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import safetensors.torch
import sympy
import torch
import torch.fx

from .dialects import DIALECT_KEY, _validate_name
from .errors import BoundaryError, PtcSpecError, SerializationError
from .meta import META_KEY, TensorMeta
from .targets import is_allowed_method, resolve_target, target_name

FORMAT = "ptc-graph/1"
_HEADER_KEY = "ptc-graph"
_MAX_HEADER = 256 * 1024 * 1024
_NODE_OPS = ("placeholder", "get_attr", "call_function", "call_method", "output")

_MEMORY_FORMATS = {
    "contiguous_format": torch.contiguous_format,
    "channels_last": torch.channels_last,
    "channels_last_3d": torch.channels_last_3d,
    "preserve_format": torch.preserve_format,
}
_LAYOUTS = {"strided": torch.strided, "sparse_coo": torch.sparse_coo}
_SYMPY_FUNCS: dict[str, Callable[..., sympy.Expr]] = {
    "Add": sympy.Add,
    "Mul": sympy.Mul,
    "Pow": sympy.Pow,
    "Mod": sympy.Mod,
    "floor": sympy.floor,
    "ceiling": sympy.ceiling,
    "Max": sympy.Max,
    "Min": sympy.Min,
    "Abs": sympy.Abs,
    "And": sympy.And,
    "Or": sympy.Or,
    "Not": sympy.Not,
}
# Relations are rebuilt unevaluated: a guard such as ``s0 >= 1`` must stay a guard, even
# though sympy would fold it to True for a positive symbol.
_SYMPY_RELATIONS: dict[str, Callable[..., sympy.Basic]] = {
    "Equality": sympy.Eq,
    "Unequality": sympy.Ne,
    "StrictLessThan": sympy.Lt,
    "LessThan": sympy.Le,
    "StrictGreaterThan": sympy.Gt,
    "GreaterThan": sympy.Ge,
}
_SYMBOL_ASSUMPTIONS = ("integer", "positive", "nonnegative")


def _name_of(table: dict[str, Any], value: object) -> str:
    for name, candidate in table.items():
        if candidate == value:
            return name
    raise SerializationError(f"{value!r} has no name in the graph format")


# -- encoding -------------------------------------------------------------------------------
def _encode_sym(expr: sympy.Basic) -> Any:
    if isinstance(expr, sympy.Integer):
        return int(expr)
    if isinstance(expr, sympy.Rational):
        return {"r": [int(expr.p), int(expr.q)]}
    if isinstance(expr, sympy.Float):
        return {"fl": repr(float(expr))}
    if expr is sympy.true or expr is sympy.false:
        return {"b": bool(expr)}
    if isinstance(expr, sympy.Symbol):
        flags = {k: bool(expr.assumptions0[k]) for k in _SYMBOL_ASSUMPTIONS if k in expr.assumptions0}
        return {"s": expr.name, "a": flags}
    name = type(expr).__name__
    if name not in _SYMPY_FUNCS and name not in _SYMPY_RELATIONS:
        raise SerializationError(f"sympy expression {expr} uses {name}, which the graph format cannot store")
    return {"f": name, "a": [_encode_sym(a) for a in expr.args]}


def encode_value(value: Any) -> Any:
    """Encode one argument/metadata value as JSON-compatible data."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$": "float", "v": repr(value)}
    if isinstance(value, torch.fx.Node):
        return {"$": "node", "name": value.name}
    if isinstance(value, torch.Size):
        return {"$": "size", "items": [encode_value(v) for v in value]}
    if isinstance(value, list):
        return [encode_value(v) for v in value]
    if isinstance(value, tuple):
        return {"$": "tuple", "items": [encode_value(v) for v in value]}
    if isinstance(value, dict):
        return {"$": "dict", "items": [[encode_value(k), encode_value(v)] for k, v in value.items()]}
    if isinstance(value, complex):
        return {"$": "complex", "re": encode_value(value.real), "im": encode_value(value.imag)}
    if isinstance(value, torch.dtype):
        return {"$": "dtype", "v": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"$": "device", "v": str(value)}
    if isinstance(value, torch.memory_format):
        return {"$": "memory_format", "v": _name_of(_MEMORY_FORMATS, value)}
    if isinstance(value, torch.layout):
        return {"$": "layout", "v": _name_of(_LAYOUTS, value)}
    if isinstance(value, slice):
        return {"$": "slice", "v": [encode_value(value.start), encode_value(value.stop), encode_value(value.step)]}
    if value is Ellipsis:
        return {"$": "ellipsis"}
    if isinstance(value, sympy.Basic):
        return {"$": "sym", "e": _encode_sym(value)}
    if isinstance(value, TensorMeta):
        return {
            "$": "tensor_meta",
            "shape": [encode_value(s) for s in value.shape],
            "stride": [encode_value(s) for s in value.stride],
            "dtype": encode_value(value.dtype),
            "device": str(value.device),
            "requires_grad": value.requires_grad,
            "storage_offset": encode_value(value.storage_offset),
        }
    raise SerializationError(f"a value of type {type(value).__name__} cannot be stored in a graph file")


def _encode_meta(node: torch.fx.Node) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in node.meta.items():
        if key == META_KEY or key.startswith("ptc_"):
            out[key] = encode_value(value)
        elif key == "stack_trace" and isinstance(value, str):
            out[key] = value
    return out


def _encode_target(node: torch.fx.Node) -> str:
    if node.op in ("placeholder", "get_attr", "output"):
        return str(node.target)
    if node.op == "call_method":
        if not isinstance(node.target, str) or not is_allowed_method(node.target):
            raise SerializationError(f"node {node.name} calls method {node.target!r}, which graph files do not allow")
        return node.target
    return target_name(node.target)


def graph_to_json(gm: torch.fx.GraphModule) -> dict[str, Any]:
    """Return the JSON structure of ``gm`` (without tensor data)."""
    nodes = []
    constants: dict[str, Any] = {}
    for node in gm.graph.nodes:
        if node.op not in _NODE_OPS:
            raise SerializationError(
                f"node {node.name} is a {node.op}; graph files hold flat graphs: inline submodules before saving"
            )
        if node.op == "get_attr":
            constants[str(node.target)] = _constant_entry(gm, node)
        nodes.append(
            {
                "name": node.name,
                "op": node.op,
                "target": _encode_target(node),
                "args": encode_value(list(node.args)),
                "kwargs": encode_value(dict(node.kwargs)),
                "meta": _encode_meta(node),
            }
        )
    graph_meta = {k: encode_value(v) for k, v in gm.meta.items() if k.startswith("ptc_")}
    return {
        "format": FORMAT,
        "dialect": gm.meta.get(DIALECT_KEY),
        "torch": torch.__version__.split("+")[0],
        "graph_meta": graph_meta,
        "nodes": nodes,
        "constants": constants,
    }


def _constant_value(gm: torch.fx.GraphModule, target: str) -> torch.Tensor:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    if not isinstance(obj, torch.Tensor):
        raise SerializationError(f"get_attr {target} is a {type(obj).__name__}; graph files store tensor constants only")
    return obj


def _constant_entry(gm: torch.fx.GraphModule, node: torch.fx.Node) -> dict[str, Any]:
    value = _constant_value(gm, str(node.target))
    return {
        "shape": list(value.shape),
        "stride": list(value.stride()),
        "device": str(value.device),
        "parameter": isinstance(value, torch.nn.Parameter),
        "requires_grad": value.requires_grad,
    }


def graph_fingerprint(gm: torch.fx.GraphModule) -> bytes:
    """Bytes that differ whenever ``gm``'s graph file would: its structure and every constant's
    name, dtype, shape and data (for cache keys; SerializationError where no file can be written)."""
    header = graph_to_json(gm)
    parts = [json.dumps(header, sort_keys=True, default=str).encode()]
    for name in sorted(header["constants"]):
        value = _constant_value(gm, name)
        # graph_to_json records neither dtype nor data: the same bytes as another dtype is another constant.
        parts.append(f"|{name}|{value.dtype}|{tuple(value.shape)}|".encode())
        parts.append(value.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return b"".join(parts)


def dumps(gm: torch.fx.GraphModule) -> bytes:
    """Serialize ``gm`` (graph, metadata, dialect, tensor constants) to bytes."""
    header = graph_to_json(gm)
    tensors = {name: _constant_value(gm, name).detach().to("cpu").contiguous().clone() for name in header["constants"]}
    return safetensors.torch.save(tensors, metadata={_HEADER_KEY: json.dumps(header, sort_keys=True)})


def save(gm: torch.fx.GraphModule, path: str | os.PathLike[str]) -> None:
    """Write ``gm`` to ``path`` atomically (a temporary file renamed into place)."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_bytes(dumps(gm))
    os.replace(tmp, target)


# -- decoding -------------------------------------------------------------------------------
def _decode_sym(data: Any) -> sympy.Expr:
    if isinstance(data, int) and not isinstance(data, bool):
        return sympy.Integer(data)
    if isinstance(data, dict):
        if "r" in data:
            p, q = data["r"]
            return sympy.Rational(int(p), int(q))
        if "s" in data:
            flags = {k: bool(v) for k, v in dict(data.get("a", {})).items() if k in _SYMBOL_ASSUMPTIONS}
            return sympy.Symbol(str(data["s"]), **flags)
        if "fl" in data:
            return sympy.Float(float(data["fl"]))
        if "b" in data:
            return sympy.true if data["b"] else sympy.false
        if data.get("f") in _SYMPY_FUNCS:
            return _SYMPY_FUNCS[data["f"]](*[_decode_sym(a) for a in data["a"]])
        if data.get("f") in _SYMPY_RELATIONS:
            lhs, rhs = (_decode_sym(a) for a in data["a"])
            return _SYMPY_RELATIONS[data["f"]](lhs, rhs, evaluate=False)
    raise SerializationError(f"corrupt symbolic expression in graph file: {data!r}")


class _Decoder:
    def __init__(self, nodes: dict[str, torch.fx.Node]) -> None:
        self.nodes = nodes

    def value(self, data: Any) -> Any:
        if data is None or isinstance(data, (bool, int, float, str)):
            return data
        if isinstance(data, list):
            return [self.value(v) for v in data]
        if not isinstance(data, dict) or "$" not in data:
            raise SerializationError(f"corrupt value in graph file: {str(data)[:80]}")
        tag = data["$"]
        handler = getattr(self, f"_tag_{tag}", None)
        if handler is None:
            raise SerializationError(f"unknown value kind {tag!r} in graph file")
        return handler(data)

    def _tag_node(self, d: dict[str, Any]) -> torch.fx.Node:
        try:
            return self.nodes[d["name"]]
        except KeyError:
            raise SerializationError(f"graph file refers to node {d.get('name')!r} before defining it") from None

    def _tag_tuple(self, d: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(self.value(v) for v in d["items"])

    def _tag_size(self, d: dict[str, Any]) -> torch.Size:
        return torch.Size([self.value(v) for v in d["items"]])

    def _tag_dict(self, d: dict[str, Any]) -> dict[Any, Any]:
        return {self.value(k): self.value(v) for k, v in d["items"]}

    def _tag_float(self, d: dict[str, Any]) -> float:
        if d["v"] not in ("nan", "inf", "-inf"):
            raise SerializationError(f"corrupt float {d['v']!r} in graph file")
        return float(d["v"])

    def _tag_complex(self, d: dict[str, Any]) -> complex:
        return complex(self.value(d["re"]), self.value(d["im"]))

    def _tag_dtype(self, d: dict[str, Any]) -> torch.dtype:
        found = getattr(torch, str(d["v"]), None)
        if not isinstance(found, torch.dtype):
            raise SerializationError(f"unknown dtype {d['v']!r} in graph file")
        return found

    def _tag_device(self, d: dict[str, Any]) -> torch.device:
        try:
            return torch.device(str(d["v"]))
        except RuntimeError:
            raise SerializationError(f"unknown device {d['v']!r} in graph file") from None

    def _tag_memory_format(self, d: dict[str, Any]) -> Any:
        return _lookup(_MEMORY_FORMATS, d["v"], "memory format")

    def _tag_layout(self, d: dict[str, Any]) -> Any:
        return _lookup(_LAYOUTS, d["v"], "layout")

    def _tag_slice(self, d: dict[str, Any]) -> slice:
        start, stop, step = (self.value(v) for v in d["v"])
        return slice(start, stop, step)

    def _tag_ellipsis(self, d: dict[str, Any]) -> Any:
        return Ellipsis

    def _tag_sym(self, d: dict[str, Any]) -> sympy.Expr:
        return _decode_sym(d["e"])

    def _tag_tensor_meta(self, d: dict[str, Any]) -> TensorMeta:
        return TensorMeta(
            tuple(self.value(s) for s in d["shape"]),
            tuple(self.value(s) for s in d["stride"]),
            self._tag_dtype(d["dtype"]),
            self._tag_device({"v": d["device"]}),
            bool(d["requires_grad"]),
            self.value(d["storage_offset"]),
        )


def decode_value(data: Any) -> Any:
    """Decode a value ``encode_value`` wrote (one that refers to no graph node)."""
    return _Decoder({}).value(data)


def _lookup(table: dict[str, Any], key: Any, what: str) -> Any:
    try:
        return table[key]
    except (KeyError, TypeError):
        raise SerializationError(f"unknown {what} {key!r} in graph file") from None


def _looks_pickled(data: bytes) -> bool:
    return data[:1] == b"\x80" or data[:4] == b"PK\x03\x04"


def _read_header(data: bytes) -> dict[str, Any]:
    try:
        return _parse_header(data)
    except SerializationError:
        # A safetensors length prefix can also start with 0x80, so the pickle message is only
        # chosen once the data has failed to parse as a graph file.
        if _looks_pickled(data):
            raise SerializationError(
                "this is a pickle or torch.save file, not a ptc-graph file; graph files never contain pickle"
            ) from None
        raise


def _parse_header(data: bytes) -> dict[str, Any]:
    if len(data) < 8:
        raise SerializationError("the graph file is truncated: it is shorter than its 8-byte header length")
    (length,) = struct.unpack("<Q", data[:8])
    if length > _MAX_HEADER or 8 + length > len(data):
        raise SerializationError("the graph file is truncated or corrupt: its header runs past the end of the data")
    try:
        header = json.loads(data[8 : 8 + length])
        graph = json.loads(header["__metadata__"][_HEADER_KEY])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise SerializationError("the data is not a ptc-graph file: its header has no ptc-graph section") from None
    if not isinstance(graph, dict):
        raise SerializationError("the graph file's ptc-graph section is not a JSON object")
    fmt = graph.get("format")
    if fmt != FORMAT:
        raise SerializationError(f"the graph file has format {fmt!r}, but this ptc-spec reads {FORMAT}; upgrade ptc-spec")
    return graph


def _load_constant(name: str, raw: torch.Tensor, entry: dict[str, Any], map_location: str | torch.device | None) -> torch.Tensor:
    device = torch.device(map_location) if map_location is not None else torch.device(entry["device"])
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SerializationError(f"constant {name} lives on {device}, which this machine lacks; pass map_location='cpu'")
    shape, stride = tuple(entry["shape"]), tuple(entry["stride"])
    if tuple(raw.shape) != shape:
        raise SerializationError(f"constant {name} has shape {tuple(raw.shape)} in the file but {shape} in the graph")
    value = torch.empty_strided(shape, stride, dtype=raw.dtype, device=device)
    value.copy_(raw)
    if entry.get("parameter"):
        return torch.nn.Parameter(value, requires_grad=bool(entry.get("requires_grad")))
    return value


def loads(data: bytes, map_location: str | torch.device | None = None) -> torch.fx.GraphModule:
    """Rebuild a GraphModule from bytes made by ``dumps`` (constants onto ``map_location`` if given)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise SerializationError(f"loads takes bytes, not {type(data).__name__}")
    data = bytes(data)
    header = _read_header(data)
    try:
        return _build(header, data, map_location)
    except PtcSpecError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise SerializationError(f"the graph file is corrupt: {type(exc).__name__} while rebuilding the graph") from exc


def _build(header: dict[str, Any], data: bytes, map_location: str | torch.device | None) -> torch.fx.GraphModule:
    dialect = header.get("dialect")
    if dialect is not None:
        _validate_name(dialect)
    try:
        raw = safetensors.torch.load(data)
    except Exception as exc:  # safetensors raises its own error type for any malformed buffer
        raise SerializationError(f"the graph file's tensor data is corrupt: {exc}") from exc
    constants = {}
    for name, entry in header["constants"].items():
        if name not in raw:
            raise SerializationError(f"the graph file lacks the data of constant {name}")
        constants[name] = _load_constant(name, raw[name], entry, map_location)

    graph = torch.fx.Graph()
    nodes: dict[str, torch.fx.Node] = {}
    decoder = _Decoder(nodes)
    for spec in header["nodes"]:
        op = spec["op"]
        if op not in _NODE_OPS:
            raise SerializationError(f"node {spec.get('name')!r} has unknown kind {op!r}")
        args = decoder.value(spec["args"])
        kwargs = decoder.value(spec["kwargs"])
        target: Any
        if op == "call_function":
            target = resolve_target(spec["target"])
        elif op == "call_method":
            if not is_allowed_method(spec["target"]):
                raise SerializationError(f"node {spec['name']} calls method {spec['target']!r}, which graph files do not allow")
            target = spec["target"]
        else:
            target = str(spec["target"])
        if op == "get_attr" and target not in constants:
            raise SerializationError(f"node {spec['name']} reads constant {target!r}, which the file does not hold")
        if op == "output":
            node = graph.output(args[0])
        else:
            node = graph.create_node(op, target, tuple(args), kwargs, name=spec["name"])
        if node.name != spec["name"]:
            raise SerializationError(f"the graph file names node {spec['name']!r} twice")
        for key, value in spec.get("meta", {}).items():
            node.meta[key] = value if key == "stack_trace" else decoder.value(value)
        nodes[node.name] = node
    gm = torch.fx.GraphModule(constants, graph)
    for key, value in header.get("graph_meta", {}).items():
        gm.meta[key] = decoder.value(value)
    if dialect is not None:
        gm.meta[DIALECT_KEY] = dialect
    return gm


def load(path: str | os.PathLike[str], map_location: str | torch.device | None = None) -> torch.fx.GraphModule:
    """Read a graph file written by ``save``."""
    return loads(Path(path).read_bytes(), map_location)


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    # Bit for bit, so that a NaN (a masked op's fill value) equals itself.
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    flat = [t.detach().cpu().contiguous().reshape(-1).view(torch.uint8) for t in (a, b)]
    return torch.equal(flat[0], flat[1])


def roundtrip(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Serialize and reload ``gm``, check that nothing changed, and return the reloaded graph."""
    data = dumps(gm)
    loaded = loads(data)
    before, after = graph_to_json(gm), graph_to_json(loaded)
    for old, new in zip(before["nodes"], after["nodes"]):
        if old != new:
            raise BoundaryError(f"node {old['name']} changed when serialized: {old} became {new}")
    for key in ("dialect", "graph_meta", "constants"):
        if before[key] != after[key]:
            raise BoundaryError(f"the graph's {key} changed when serialized")
    if len(before["nodes"]) != len(after["nodes"]):
        raise BoundaryError(f"the graph had {len(before['nodes'])} nodes but {len(after['nodes'])} after serialization")
    for name in before["constants"]:
        a, b = _constant_value(gm, name), _constant_value(loaded, name)
        if not _same_bits(a, b):
            raise BoundaryError(f"constant {name} changed when serialized")
    return loaded
