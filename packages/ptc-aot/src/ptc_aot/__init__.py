"""ptc-aot: functional aten forward/backward graphs traced ahead of time, min-cut partitioning, runtime wrapper."""

from . import events
from .api import AotFunction, Compiler, aot, compile_program
from .config import PARTITIONS, Config, JointRewrite, config_from_env
from .errors import CorruptProgramError, DoubleBackwardError, PartitionError, PtcAotError, UnsupportedMutationError
from .functionalize import FunctionalGraph, functionalize
from .partition import Partition, partition
from .program_cache import ProgramCache
from .runtime import CompiledProgram
from .tracing import OutputPlan, TracedProgram, trace_program

__version__ = "0.1.0"

__all__ = [
    "PARTITIONS",
    "AotFunction",
    "CompiledProgram",
    "Compiler",
    "Config",
    "CorruptProgramError",
    "DoubleBackwardError",
    "FunctionalGraph",
    "JointRewrite",
    "OutputPlan",
    "Partition",
    "PartitionError",
    "ProgramCache",
    "PtcAotError",
    "TracedProgram",
    "UnsupportedMutationError",
    "aot",
    "compile_program",
    "config_from_env",
    "events",
    "functionalize",
    "partition",
    "trace_program",
]
