"""copy.copy and copy.deepcopy in traced code: new values of the trace, one graph, eager's results."""

from __future__ import annotations

import collections
import copy
import dataclasses
import types
import typing

import pytest
import torch
from ptc_capture_testing import CountingBackend, needs_hook

import ptc_capture
from ptc_spec.testing import compare_with_eager

pytestmark = needs_hook


class _Config:
    # A plain configuration object of constants, as a model config: read from the frame.
    def __init__(self, layers=2, prefix="decoder"):
        self.decoder_layers = layers
        self.encoder_layers = layers + 1
        self.prefix = prefix
        self.id2label = {0: "a", 1: "b"}
        self.sizes = [4, 8]


def _text_config(config, x):
    # As transformers' get_text_config(decoder=True): a private copy renamed in place.
    config = copy.deepcopy(config)
    for key in list(config.__dict__):
        if key.startswith(config.prefix):
            value = getattr(config, key)
            delattr(config, key)
            setattr(config, "num_hidden_layers", value)  # noqa: B010  (the builtin, as transformers calls it)
    config.sizes.append(len(config.id2label))
    config.id2label[2] = "c"
    return x * config.num_hidden_layers + sum(config.sizes), hasattr(config, "decoder_layers"), config


class _Holder:
    def __init__(self, weight, items):
        self.weight = weight
        self.items = items


def _copies(x):
    shared = [x, 1]
    holder = _Holder(x * 2, {"a": shared, "b": shared})
    deep = copy.deepcopy(holder)
    shallow = copy.copy(holder)
    deep.weight.add_(1)  # a clone: the original's tensor is untouched
    deep.items["a"].append(2)  # shared references stay shared in the copy, apart from the original
    shallow.items["b"].append(3)  # a shallow copy shares the inner containers
    pair = copy.deepcopy((x, [x]))
    return (holder.weight, deep.weight, len(deep.items["b"]), len(shared), deep.items["a"] is deep.items["b"],
            shallow.items is holder.items, pair[0] is pair[1][0], copy.copy([x])[0] is x, copy.deepcopy({"k": (1, 2)}))


def test_copy_and_deepcopy_of_values_made_in_the_trace_follow_the_copy_module():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(_copies)
    compare_with_eager(compiled, _copies, torch.randn(3))
    assert backend.count == 1


class _Custom:
    def __init__(self):
        self.value = 1

    def __deepcopy__(self, memo):
        return self


def _deepcopy_custom(x):
    return x + copy.deepcopy(_Custom()).value


def _deepcopy_grad(x):
    return copy.deepcopy(x) * 2


@pytest.mark.parametrize(
    ("fn", "arg", "reason"),
    [
        (_deepcopy_custom, torch.randn(3), "copy.deepcopy of a _Custom object, whose class customizes copying"),
        (_deepcopy_grad, torch.randn(3, requires_grad=True), "copy.deepcopy of a tensor that requires grad"),
    ],
    ids=["custom_deepcopy", "requires_grad"],
)
def test_copies_the_trace_cannot_model_break_naming_the_copy_and_run_as_eager(fn, arg, reason):
    explained = ptc_capture.explain(fn)(arg)
    (record,) = explained.break_reasons
    assert reason in record.reason
    assert fn.__name__ in str(record.stack[-1])
    compare_with_eager(ptc_capture.optimize(CountingBackend())(fn), fn, arg)


def _check_int(name, value, args):
    if not isinstance(value, int):
        raise TypeError(name)


def _check_union(name, value, args):
    if not any(isinstance(value, a) for a in args):
        raise TypeError(name)


# As huggingface_hub's strict dataclasses: validators picked by the annotation's origin, in a
# table keyed by typing's special forms.
_VALIDATORS = {typing.Union: _check_union, types.UnionType: _check_union, int: _check_int}


def _validator(field):
    def validate(value):
        expected = field.type
        check = _VALIDATORS.get(typing.get_origin(expected)) or _VALIDATORS.get(expected)
        if check is not None:
            check(field.name, value, typing.get_args(expected))

    return validate


@dataclasses.dataclass
class _StrictConfig:
    # As transformers' PretrainedConfig: names mapped through attribute_map on every read,
    # stores validated by the field's annotation.
    hidden_size: int = 8
    decoder_layers: int | None = 2
    scale: typing.Optional[float] = 0.5  # noqa: UP045  (typing's alias, another annotation type than `|`)

    attribute_map = {"num_hidden_layers": "decoder_layers"}

    def __getattribute__(self, key):
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)

    def __setattr__(self, name, value):
        for validate in type(self).validators.get(name, []):
            validate(value)
        object.__setattr__(self, name, value)


_StrictConfig.validators = {f.name: [_validator(f)] for f in dataclasses.fields(_StrictConfig)}


def _decoder_view(config, x):
    config = copy.deepcopy(config)
    layers = config.num_hidden_layers
    del config.hidden_size
    config.decoder_layers = layers * 3
    config.scale = 2.0
    return x * config.num_hidden_layers * config.scale, hasattr(config, "hidden_size"), config


def _with_layers(make, layers):
    config = make()
    config.decoder_layers = layers
    return config


@pytest.mark.parametrize(("fn", "make"), [(_text_config, _Config), (_decoder_view, _StrictConfig)], ids=["plain", "strict"])
def test_deepcopy_of_a_config_from_the_frame_is_a_new_object_in_one_graph(fn, make):
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(fn)
    config = make()
    out, has, copied = compiled(config, torch.ones(3))
    expected, expected_has, expected_copy = fn(make(), torch.ones(3))
    torch.testing.assert_close(out, expected)
    assert (has, type(copied), copied.__dict__) == (expected_has, type(expected_copy), expected_copy.__dict__)
    # The original is untouched, and every call makes its own copy (containers included), as in eager.
    assert config.__dict__ == make().__dict__
    again = compiled(config, torch.ones(3))[2]
    assert again is not copied
    assert all(again.__dict__[k] is not v for k, v in copied.__dict__.items() if isinstance(v, (list, dict)))
    assert backend.count == 1
    # The copied values are guarded: another config is read anew.
    out = compiled(_with_layers(make, 5), torch.ones(3))[0]
    torch.testing.assert_close(out, fn(_with_layers(make, 5), torch.ones(3))[0])
    assert backend.count == 2


class _Record(collections.OrderedDict):
    # A dict subclass whose copy (OrderedDict.__reduce__) carries both its items and attributes.
    def __init__(self, a=None, b=None):
        # The copy module calls _Record() (OrderedDict.__reduce__), so this runs with no arguments.
        self.note = "init"
        if a is not None:
            self["a"] = a
            self["b"] = b

    def __copy__(self):
        made = _Record(self["a"], self["b"])
        made.note = "shallow"
        return made


def _record_copies(x):
    record = _Record(x, [x])
    record.note = "made"
    deep = copy.deepcopy(record)
    shallow = copy.copy(record)
    deep["b"].append(1)
    return deep["a"] is x, deep.note, len(record["b"]), shallow.note, shallow["b"] is record["b"], type(deep), list(deep)


def test_copies_of_a_dict_subclass_keep_items_and_attributes_and_its_own_copy_hook():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(_record_copies)
    compare_with_eager(compiled, _record_copies, torch.randn(2))
    assert backend.count == 1
