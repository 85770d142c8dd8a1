"""Bytecode layer: decode code objects to instruction lists, edit, analyse and re-assemble.

Supports CPython 3.11 and 3.12 (3.13 best-effort). Nothing here imports torch.
"""

from ptc_capture.bytecode.analysis import live_locals, live_locals_after, liveness, stack_depth, successors
from ptc_capture.bytecode.builders import (
    create_build_tuple,
    create_call,
    create_call_function,
    create_call_method,
    create_copy,
    create_jump,
    create_load_attr,
    create_load_const,
    create_load_fast,
    create_load_global,
    create_load_method,
    create_push_null,
    create_return_value,
    create_store_fast,
    create_swap,
    prologue_end,
)
from ptc_capture.bytecode.codeobject import assemble, roundtrip, transform
from ptc_capture.bytecode.exceptiontable import (
    ExceptionTableEntry,
    decode_exception_table,
    encode_exception_table,
)
from ptc_capture.bytecode.instructions import (
    ExnHandler,
    Instruction,
    Positions,
    create_instruction,
    decode,
    insert_instructions,
    localsplus_names,
)
from ptc_capture.bytecode.linetable import encode_linetable
from ptc_capture.bytecode.opcodes import PY_VERSION, SUPPORTED

__all__ = [
    "PY_VERSION",
    "SUPPORTED",
    "ExceptionTableEntry",
    "ExnHandler",
    "Instruction",
    "Positions",
    "assemble",
    "create_build_tuple",
    "create_call",
    "create_call_function",
    "create_call_method",
    "create_copy",
    "create_instruction",
    "create_jump",
    "create_load_attr",
    "create_load_const",
    "create_load_fast",
    "create_load_global",
    "create_load_method",
    "create_push_null",
    "create_return_value",
    "create_store_fast",
    "create_swap",
    "decode",
    "decode_exception_table",
    "encode_exception_table",
    "encode_linetable",
    "insert_instructions",
    "live_locals",
    "live_locals_after",
    "liveness",
    "localsplus_names",
    "prologue_end",
    "roundtrip",
    "stack_depth",
    "successors",
    "transform",
]
