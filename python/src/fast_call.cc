#include "fast_call.h"

#include <cstring>

#include "errors.h"

namespace nb = nanobind;

namespace kv0::python {
namespace {

const char* TypeName(PyObject* o) { return Py_TYPE(o)->tp_name; }

PyObject* BuiltinType(nb::exception_type type) {
  switch (type) {
    case nb::exception_type::stop_iteration:
      return PyExc_StopIteration;
    case nb::exception_type::index_error:
      return PyExc_IndexError;
    case nb::exception_type::key_error:
      return PyExc_KeyError;
    case nb::exception_type::value_error:
      return PyExc_ValueError;
    case nb::exception_type::type_error:
      return PyExc_TypeError;
    case nb::exception_type::buffer_error:
      return PyExc_BufferError;
    case nb::exception_type::import_error:
      return PyExc_ImportError;
    case nb::exception_type::attribute_error:
      return PyExc_AttributeError;
    default:
      return PyExc_RuntimeError;
  }
}

}  // namespace

bool ToBytes(PyObject* o, const char* what, Bytes* out) {
  if (PyBytes_Check(o)) {
    out->view = {PyBytes_AS_STRING(o), static_cast<size_t>(PyBytes_GET_SIZE(o))};
    return true;
  }
  if (PyByteArray_Check(o)) {
    out->copy.assign(PyByteArray_AS_STRING(o), static_cast<size_t>(PyByteArray_GET_SIZE(o)));
    out->view = out->copy;
    return true;
  }
  if (PyMemoryView_Check(o)) {
    Py_buffer view;
    if (PyObject_GetBuffer(o, &view, PyBUF_CONTIG_RO) != 0) return false;
    out->copy.assign(static_cast<const char*>(view.buf), static_cast<size_t>(view.len));
    PyBuffer_Release(&view);
    out->view = out->copy;
    return true;
  }
  PyErr_Format(PyExc_TypeError, "%s must be bytes, not %s", what, TypeName(o));
  return false;
}

bool CheckFamily(PyObject* family) {
  if (family == nullptr || family == Py_None) return true;
  // Rare: the family object is compared in Python, as aimrocks does.
  try {
    nb::module_::import_("kv0.db").attr("_check_family")(nb::handle(family));
    return true;
  } catch (nb::python_error& e) {
    e.restore();
    return false;
  }
}

bool ToKey(PyObject* o, Bytes* out) {
  if (PyBytes_Check(o)) return ToBytes(o, "key", out);
  if (PyTuple_Check(o)) {
    if (PyTuple_GET_SIZE(o) != 2) {
      PyErr_SetString(PyExc_TypeError, "a key tuple is (column_family, key)");
      return false;
    }
    return CheckFamily(PyTuple_GET_ITEM(o, 0)) && ToBytes(PyTuple_GET_ITEM(o, 1), "key", out);
  }
  return ToBytes(o, "key", out);
}

Params::Params(const char* fn, std::initializer_list<const char*> names) : fn_(fn), names_(names) {
  for (const char* name : names_) {
    PyObject* s = PyUnicode_InternFromString(name);
    if (s == nullptr) throw nb::python_error();
    interned_.push_back(s);
  }
}

size_t Params::Find(PyObject* keyword) const {
  for (size_t i = 0; i < interned_.size(); ++i) {
    if (interned_[i] == keyword) return i;
  }
  // A keyword built at run time (f(**{name: v})) is not interned.
  for (size_t i = 0; i < interned_.size(); ++i) {
    if (PyUnicode_Compare(interned_[i], keyword) == 0) return i;
  }
  return size();
}

bool BindArgs(const Params& params, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
              size_t required, PyObject** out, bool ignore_extra) {
  const size_t n = params.size();
  for (size_t i = 0; i < n; ++i) out[i] = nullptr;
  if (static_cast<size_t>(nargs) > n && !ignore_extra) {
    PyErr_Format(PyExc_TypeError, "%s() takes at most %zu arguments (%zd given)", params.fn(), n,
                 nargs);
    return false;
  }
  for (Py_ssize_t i = 0; i < nargs && static_cast<size_t>(i) < n; ++i) out[i] = args[i];
  if (kwnames != nullptr) {
    Py_ssize_t nkw = PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t k = 0; k < nkw; ++k) {
      PyObject* keyword = PyTuple_GET_ITEM(kwnames, k);
      size_t i = params.Find(keyword);
      if (i == n) {
        if (ignore_extra) continue;
        PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", params.fn(),
                     keyword);
        return false;
      }
      if (out[i] != nullptr) {
        PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", params.fn(),
                     params.name(i));
        return false;
      }
      out[i] = args[nargs + k];
    }
  }
  for (size_t i = 0; i < required; ++i) {
    if (out[i] == nullptr) {
      PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", params.fn(),
                   params.name(i));
      return false;
    }
  }
  return true;
}

int Flag(PyObject* o) { return o == nullptr ? 0 : PyObject_IsTrue(o); }

PyObject* Raise(Code code, const std::string& message) noexcept {
  SetError(Error(code, message));
  return nullptr;
}

PyObject* RaiseCurrent() noexcept {
  try {
    throw;
  } catch (const Error& e) {
    SetError(e);
  } catch (nb::python_error& e) {
    e.restore();
  } catch (const nb::builtin_exception& e) {
    // nb::type_error and its kind, thrown by the conversions the fast calls
    // share with nanobind's bindings.
    PyErr_SetString(BuiltinType(e.type()), e.what());
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "unknown C++ exception");
  }
  return nullptr;
}

}  // namespace kv0::python
