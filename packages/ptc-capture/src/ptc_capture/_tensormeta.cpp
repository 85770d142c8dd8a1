// Tensor guards in C++: one call compares a tensor's type, dtype, device, requires_grad, sizes
// and strides with what a trace assumed, reading them from the TensorImpl without building the
// Python objects (torch.Size, tuples, torch.device) that the same checks cost in Python.
//
// Built by ptc_capture.tensormeta against the installed torch's c10 headers; the file name of the
// built module carries a digest of this source and of torch's version, so a module is never loaded
// into a torch it was not built for.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <c10/core/TensorImpl.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>

#include <cstdint>

namespace {

PyObject* cdata_name = nullptr;

c10::TensorImpl* impl_of(PyObject* tensor) {
  // Tensor._cdata is the TensorImpl's address: the one documented way from a Python tensor to it.
  PyObject* address = PyObject_GetAttr(tensor, cdata_name);
  if (address == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  void* impl = PyLong_AsVoidPtr(address);
  Py_DECREF(address);
  if (impl == nullptr) {
    PyErr_Clear();
  }
  return static_cast<c10::TensorImpl*>(impl);
}

// spec: int64 words [scalar type, device type, device index, requires_grad, ndim, sizes..., strides...]
bool matches(c10::TensorImpl* impl, const int64_t* spec, Py_ssize_t words) {
  if (words < 5 || words != 5 + 2 * spec[4]) {
    return false;
  }
  if (static_cast<int64_t>(impl->dtype().toScalarType()) != spec[0]) {
    return false;
  }
  const c10::Device device = impl->device();
  if (static_cast<int64_t>(device.type()) != spec[1] || static_cast<int64_t>(device.index()) != spec[2]) {
    return false;
  }
  if (static_cast<int64_t>(impl->requires_grad()) != spec[3]) {
    return false;
  }
  // Sparse and symbolic-size tensors have no plain sizes and strides to compare; a nested
  // tensor's sizes() throws, which the caller reports as a mismatch.
  if (impl->layout() != c10::kStrided || impl->has_symbolic_sizes_strides()) {
    return false;
  }
  const int64_t ndim = spec[4];
  if (impl->dim() != ndim) {
    return false;
  }
  const auto sizes = impl->sizes();
  const auto strides = impl->strides();
  for (int64_t d = 0; d < ndim; ++d) {
    if (sizes[d] != spec[5 + d] || strides[d] != spec[5 + ndim + d]) {
      return false;
    }
  }
  return true;
}

// check(tensor, expected_type, spec[, ids]) -> bool; a match appends id(tensor) to the list ids
// (what the guard's distinctness check compares), saving the guard function a line per tensor.
PyObject* check(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if ((nargs != 3 && nargs != 4) || !PyBytes_Check(args[2]) || (nargs == 4 && !PyList_Check(args[3]))) {
    PyErr_SetString(PyExc_TypeError, "check(tensor, expected_type, spec: bytes[, ids: list])");
    return nullptr;
  }
  if (reinterpret_cast<PyObject*>(Py_TYPE(args[0])) != args[1]) {
    Py_RETURN_FALSE;
  }
  c10::TensorImpl* impl = impl_of(args[0]);
  if (impl == nullptr) {
    Py_RETURN_FALSE;
  }
  bool ok = false;
  try {
    ok = matches(impl, reinterpret_cast<const int64_t*>(PyBytes_AS_STRING(args[2])),
                 PyBytes_GET_SIZE(args[2]) / static_cast<Py_ssize_t>(sizeof(int64_t)));
  } catch (...) {
    // A tensor whose metadata cannot be read this way is not the tensor the trace saw.
    ok = false;
  }
  if (!ok) {
    Py_RETURN_FALSE;
  }
  if (nargs == 4) {
    PyObject* id = PyLong_FromVoidPtr(args[0]);  // the value builtins.id gives
    if (id == nullptr) {
      return nullptr;
    }
    const int failed = PyList_Append(args[3], id);
    Py_DECREF(id);
    if (failed != 0) {
      return nullptr;
    }
  }
  Py_RETURN_TRUE;
}

// codes(dtype, device) -> (scalar type, device type, device index): the words a spec starts with.
PyObject* codes(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "codes(dtype, device)");
    return nullptr;
  }
  // The caller passes a torch.dtype and a torch.device (tensormeta.spec checks with isinstance).
  const auto* dtype = reinterpret_cast<const THPDtype*>(args[0]);
  const auto* device = reinterpret_cast<const THPDevice*>(args[1]);
  return Py_BuildValue("(LLL)", static_cast<long long>(dtype->scalar_type),
                       static_cast<long long>(device->device.type()),
                       static_cast<long long>(device->device.index()));
}

PyMethodDef methods[] = {
    {"check", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(check)), METH_FASTCALL,
     "check(tensor, expected_type, spec[, ids]) -> bool: the tensor has exactly this type and the spec's metadata "
     "(and, when it has, its id is appended to the list ids)."},
    {"codes", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(codes)), METH_FASTCALL,
     "codes(dtype, device) -> (scalar type, device type, device index) as the spec encodes them."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tensormeta", "Tensor guards read from the TensorImpl.", -1, methods,
                      nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__tensormeta() {
  cdata_name = PyUnicode_InternFromString("_cdata");
  if (cdata_name == nullptr) {
    return nullptr;
  }
  return PyModule_Create(&module);
}
