"""CUDA graph trees for low-latency replay of PyTorch callables."""

from ptc_cudagraphs.config import Config, config_from_env
from ptc_cudagraphs.errors import (
    CaptureError,
    OverwrittenOutputError,
    PtcCudagraphsError,
)
from ptc_cudagraphs.graphed import CudaGraphed, cudagraphify
from ptc_cudagraphs.reasons import FallbackReason
from ptc_cudagraphs.registry import dump_tree, mark_step_begin, reset, stats
from ptc_cudagraphs.stats import CudagraphStats

__all__ = [
    "CaptureError",
    "Config",
    "CudaGraphed",
    "CudagraphStats",
    "FallbackReason",
    "OverwrittenOutputError",
    "PtcCudagraphsError",
    "config_from_env",
    "cudagraphify",
    "dump_tree",
    "mark_step_begin",
    "reset",
    "stats",
]
