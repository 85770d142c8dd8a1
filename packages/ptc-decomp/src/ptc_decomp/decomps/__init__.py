"""The decomposition modules; importing this package fills the registry."""

from . import (  # noqa: F401
    activation_grads,
    activations,
    creation,
    indexing,
    losses,
    matmul,
    norm_grads,
    norms,
    padding,
    pointwise,
    pooling,
    random,
    reductions,
    scalars,
    shape_ops,
    softmax,
    upsample,
    views,
)
