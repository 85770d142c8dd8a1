"""The data of op set ``core/2``: what it adds to ``core/1``. Never edit a published row.

core/2 also admits *fallbacks* (see ``fallback.py``): a node marked as one may call any
functional aten overload with a meta kernel, and the backend runs it as the eager kernel.
"""

from __future__ import annotations

CORE2_ADDITIONS: tuple[tuple[str, str, str], ...] = (
    ("aten._scaled_dot_product_cudnn_attention.default", "extern", "fused attention, cuDNN kernel"),
    ("aten._scaled_dot_product_cudnn_attention_backward.default", "extern", "its backward"),
    (
        "aten._scaled_dot_product_fused_attention_overrideable.default",
        "extern",
        "fused attention of an out-of-tree backend (e.g. XPU)",
    ),
    ("aten._scaled_dot_product_fused_attention_overrideable_backward.default", "extern", "its backward"),
    ("aten._efficient_attention_forward.default", "extern", "memory-efficient attention with variable lengths"),
    ("aten._efficient_attention_backward.default", "extern", "its backward"),
    ("aten._flash_attention_forward.default", "extern", "flash attention with variable lengths"),
    ("aten._flash_attention_backward.default", "extern", "its backward"),
)
"""Rows core/2 adds to core/1, as (qualified overload name, category, note)."""
