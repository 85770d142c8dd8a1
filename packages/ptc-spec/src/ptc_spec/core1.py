"""The data of op set ``core/1``: (overload, category, note). Never edit a published row."""

from __future__ import annotations

_UNARY = [
    ("abs", "absolute value"),
    ("neg", "negation"),
    ("exp", "e**x"),
    ("exp2", "2**x"),
    ("expm1", "e**x - 1, accurate near 0"),
    ("log", "natural logarithm"),
    ("log2", "base-2 logarithm"),
    ("log10", "base-10 logarithm"),
    ("log1p", "log(1 + x), accurate near 0"),
    ("sqrt", "square root"),
    ("rsqrt", "1 / sqrt(x)"),
    ("reciprocal", "1 / x"),
    ("sin", "sine"),
    ("cos", "cosine"),
    ("tan", "tangent"),
    ("asin", "arcsine"),
    ("acos", "arccosine"),
    ("atan", "arctangent"),
    ("sinh", "hyperbolic sine"),
    ("cosh", "hyperbolic cosine"),
    ("tanh", "hyperbolic tangent"),
    ("asinh", "inverse hyperbolic sine"),
    ("acosh", "inverse hyperbolic cosine"),
    ("atanh", "inverse hyperbolic tangent"),
    ("sigmoid", "logistic function; kept whole for numerical stability"),
    ("erf", "error function"),
    ("erfc", "complementary error function"),
    ("erfinv", "inverse error function"),
    ("lgamma", "log of the absolute gamma function"),
    ("digamma", "derivative of lgamma"),
    ("floor", "round toward -inf"),
    ("ceil", "round toward +inf"),
    ("round", "round half to even"),
    ("trunc", "round toward zero"),
    ("sign", "-1, 0 or 1 (0 for 0, NaN for NaN)"),
    ("signbit", "true where the sign bit is set"),
    ("bitwise_not", "bitwise not of integers, logical not of bools"),
    ("frac", "x - trunc(x)"),
    ("i0", "modified Bessel function of order 0"),
]

_BINARY = [
    ("add.Tensor", "a + alpha * b; a Python number may stand for b"),
    ("sub.Tensor", "a - alpha * b"),
    ("mul.Tensor", "a * b"),
    ("div.Tensor", "true division"),
    ("div.Tensor_mode", "division with rounding_mode 'trunc' or 'floor'"),
    ("remainder.Tensor", "Python-style modulus (sign of the divisor)"),
    ("fmod.Tensor", "C-style modulus (sign of the dividend)"),
    ("pow.Tensor_Tensor", "elementwise power"),
    ("pow.Tensor_Scalar", "power with a scalar exponent; backends specialise small integers"),
    ("pow.Scalar", "scalar base raised to a tensor"),
    ("maximum.default", "elementwise max, NaN-propagating"),
    ("minimum.default", "elementwise min, NaN-propagating"),
    ("atan2.default", "two-argument arctangent"),
    ("copysign.Tensor", "magnitude of a with the sign of b"),
    ("nextafter.default", "next float after a toward b"),
    ("bitwise_and.Tensor", "bitwise/logical and"),
    ("bitwise_or.Tensor", "bitwise/logical or"),
    ("bitwise_xor.Tensor", "bitwise/logical xor"),
    ("bitwise_left_shift.Tensor", "integer left shift"),
    ("bitwise_right_shift.Tensor", "integer arithmetic right shift"),
    ("fmax.default", "elementwise max, NaN-ignoring"),
    ("fmin.default", "elementwise min, NaN-ignoring"),
    ("hypot.default", "sqrt(a**2 + b**2) without overflow"),
    ("logaddexp.default", "log(exp(a) + exp(b)), stable"),
    ("heaviside.default", "step function with given value at 0"),
    ("nan_to_num.default", "replace NaN and +-inf by finite values"),
]

_COMPARISON = [
    ("eq.Tensor", "a == b"),
    ("ne.Tensor", "a != b"),
    ("lt.Tensor", "a < b"),
    ("le.Tensor", "a <= b"),
    ("gt.Tensor", "a > b"),
    ("ge.Tensor", "a >= b"),
    ("eq.Scalar", "a == number"),
    ("ne.Scalar", "a != number"),
    ("lt.Scalar", "a < number"),
    ("le.Scalar", "a <= number"),
    ("gt.Scalar", "a > number"),
    ("ge.Scalar", "a >= number"),
    ("isnan.default", "true where NaN"),
    ("isinf.default", "true where +-inf"),
]

_LOGICAL = [
    ("logical_not.default", "not, result bool"),
    ("logical_and.default", "and, result bool"),
    ("logical_or.default", "or, result bool"),
    ("logical_xor.default", "xor, result bool"),
    ("where.self", "select by a bool condition; the ternary of the set"),
    ("clamp.default", "clamp to optional scalar bounds"),
    ("clamp.Tensor", "clamp to optional tensor bounds"),
]

_CAST = [
    ("_to_copy.default", "dtype/device/layout conversion into a fresh tensor"),
    ("clone.default", "a fresh copy, optionally in a memory format"),
]

_REDUCTION = [
    ("sum.dim_IntList", "sum over dims (None: all), optional dtype"),
    ("prod.dim_int", "product over one dim, optional dtype"),
    ("prod.default", "product of all elements"),
    ("amax.default", "max over dims, NaN-propagating"),
    ("amin.default", "min over dims, NaN-propagating"),
    ("argmax.default", "index of the first max over one dim or all"),
    ("argmin.default", "index of the first min over one dim or all"),
    ("any.dims", "true if any element over dims is nonzero"),
    ("all.dims", "true if every element over dims is nonzero"),
]

_SCAN = [
    ("cumsum.default", "inclusive prefix sum along one dim"),
    ("cumprod.default", "inclusive prefix product along one dim"),
    ("sort.default", "sort along one dim: values and indices (stable=False)"),
    ("sort.stable", "sort along one dim with an explicit stable flag"),
    ("topk.default", "k largest or smallest along one dim: values and indices"),
    ("searchsorted.Tensor", "insertion points into a sorted last dim"),
    ("bucketize.Tensor", "bucket index of each value against sorted boundaries"),
]

_VIEW = [
    ("view.default", "reshape without copy; strides must allow it"),
    ("permute.default", "reorder dims"),
    ("expand.default", "broadcast size-1 dims with stride 0"),
    ("squeeze.dims", "drop the given size-1 dims"),
    ("unsqueeze.default", "insert a size-1 dim"),
    ("slice.Tensor", "start:end:step along one dim"),
    ("select.int", "index one position, dropping the dim"),
    ("as_strided.default", "arbitrary strided view; a backend may copy when it cannot alias"),
    ("alias.default", "the same tensor under a new name"),
    ("unfold.default", "sliding windows along one dim as a new last dim"),
    ("cat.default", "concatenate along one dim (copies)"),
    ("constant_pad_nd.default", "pad with a constant (negative pads crop)"),
]

_INDEXING = [
    ("index.Tensor", "advanced indexing with a list of optional index tensors"),
    ("index_put.default", "functional advanced-index assignment, optional accumulate"),
    ("gather.default", "gather along one dim"),
    ("scatter.src", "functional scatter of a tensor along one dim"),
    ("scatter.value", "functional scatter of a scalar along one dim"),
    ("scatter_add.default", "functional scatter-add along one dim"),
    ("scatter_reduce.two", "functional scatter with sum/prod/mean/amax/amin"),
    ("index_select.default", "select whole slices by an index vector"),
    ("slice_scatter.default", "functional write of a slice"),
    ("select_scatter.default", "functional write of a selected position"),
    ("as_strided_scatter.default", "functional write through a strided view"),
]

_CREATION = [
    ("full.default", "a tensor filled with one value"),
    ("empty_strided.default", "uninitialised tensor with explicit strides"),
    ("empty.memory_format", "uninitialised tensor with a memory format"),
    ("arange.start_step", "evenly spaced values start, start+step, ... < end"),
    ("scalar_tensor.default", "a 0-dim tensor from a Python number"),
]

_RANDOM = [
    ("ptc.seed.default", "draw an int64 seed from the device's generator at run time"),
    ("ptc.rand.default", "uniform [0, 1) from an explicit (seed, offset)"),
    ("ptc.randn.default", "standard normal from an explicit (seed, offset)"),
]

_EXTERN = [
    ("mm.default", "matrix product (library call)"),
    ("addmm.default", "beta * bias + alpha * (a @ b) (library call)"),
    ("bmm.default", "batched matrix product (library call)"),
    ("convolution.default", "N-d convolution, transposed or not (library call)"),
    ("convolution_backward.default", "gradients of convolution (library call)"),
    ("_scaled_dot_product_flash_attention.default", "fused attention, CUDA flash kernel"),
    ("_scaled_dot_product_flash_attention_backward.default", "its backward"),
    ("_scaled_dot_product_efficient_attention.default", "fused attention, memory-efficient kernel"),
    ("_scaled_dot_product_efficient_attention_backward.default", "its backward"),
    ("_scaled_dot_product_flash_attention_for_cpu.default", "fused attention on CPU"),
    ("_scaled_dot_product_flash_attention_for_cpu_backward.default", "its backward"),
    ("_cdist_forward.default", "pairwise distances (library call)"),
]

_SYMBOLIC = [
    ("sym_size.int", "one size of a tensor, as a symbolic int"),
    ("sym_stride.int", "one stride of a tensor, as a symbolic int"),
    ("sym_numel.default", "element count, as a symbolic int"),
    ("sym_storage_offset.default", "storage offset, as a symbolic int"),
]


def _rows() -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    for op, note in _UNARY:
        rows.append((f"aten.{op}.default", "pointwise", note))
    groups = [
        (_BINARY, "pointwise"),
        (_COMPARISON, "comparison"),
        (_LOGICAL, "logical"),
        (_CAST, "cast"),
        (_REDUCTION, "reduction"),
        (_SCAN, "scan"),
        (_VIEW, "view"),
        (_INDEXING, "indexing"),
        (_CREATION, "creation"),
        (_RANDOM, "random"),
        (_EXTERN, "extern"),
        (_SYMBOLIC, "symbolic"),
    ]
    for table, category in groups:
        for name, note in table:
            qualified = name if name.startswith("ptc.") else f"aten.{name}"
            rows.append((qualified, category, note))
    return rows


CORE1_TABLE: tuple[tuple[str, str, str], ...] = tuple(_rows())
"""Every row of core/1 as (qualified overload name, category, note)."""
