// The pieces of kv0.DB's hot calls, which are CPython fast calls
// (METH_FASTCALL) rather than nanobind bindings: a call costs one C function
// and no argument-conversion machinery.
//
// Each such call converts its arguments while it holds the GIL, and releases
// the GIL only around work that may wait (gil_free.h says why it must then).
// Every function here returns false (or nullptr) with a Python error set.
#pragma once

#include <nanobind/nanobind.h>

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "kv0/error.h"

namespace kv0::python {

// A key or value argument. bytes are borrowed (immutable, and the caller's
// arguments keep them alive); bytearray and memoryview are copied, since
// another thread may change them once the GIL is released.
struct Bytes {
  std::string_view view;
  std::string copy;

  Bytes() = default;
  Bytes(const Bytes&) = delete;  // `view` may point into `copy`
  Bytes& operator=(const Bytes&) = delete;
};

// A value: bytes, bytearray or memoryview; TypeError names `what` otherwise.
bool ToBytes(PyObject* o, const char* what, Bytes* out);
// A column family argument: absent, None or the default family
// (kv0.db._check_family decides).
bool CheckFamily(PyObject* family);
// A key: as ToBytes, or aimrocks' (column family, key), where the family
// passes CheckFamily.
bool ToKey(PyObject* o, Bytes* out);

// A fast call's name and parameter names. The names are interned once, at
// the first call (under the GIL), so that a keyword, which Python interns
// where the call is written, is matched by pointer rather than by text.
// Declare one as a function-local static.
class Params {
 public:
  Params(const char* fn, std::initializer_list<const char*> names);
  Params(const Params&) = delete;
  Params& operator=(const Params&) = delete;

  const char* fn() const { return fn_; }
  size_t size() const { return names_.size(); }
  const char* name(size_t i) const { return names_[i]; }
  // The index of the parameter named `keyword` (a str), or size().
  size_t Find(PyObject* keyword) const;

 private:
  const char* fn_;
  std::vector<const char*> names_;
  std::vector<PyObject*> interned_;  // never released: they live as long as the module
};

// Binds a call's arguments to `params`, positional ones first: out[i] is
// the argument for parameter i or nullptr when absent. Fewer than
// `required`, too many, or a keyword not in `params` raise TypeError,
// unless `ignore_extra`, which accepts and ignores extra ones (aimrocks'
// get(key, *args, **kwargs)).
bool BindArgs(const Params& params, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
              size_t required, PyObject** out, bool ignore_extra = false);

// The truth of an optional flag argument (absent: false); -1 on error.
int Flag(PyObject* o);

// Raises the kv0.errors class of a kv0::Error, the Python exception of a
// nanobind one (nb::type_error is TypeError), or RuntimeError for any other
// C++ exception, from inside a catch block. Returns nullptr.
PyObject* RaiseCurrent() noexcept;
// Raises kv0.errors.<code> with a message. Returns nullptr.
PyObject* Raise(Code code, const std::string& message) noexcept;

// The C++ object of a nanobind instance, or nullptr with TypeError(message)
// when the instance's __init__ has not run (a subclass that skipped it).
template <class T>
T* ReadyInstance(PyObject* o, const char* message) {
  nanobind::handle h(o);
  if (!nanobind::inst_ready(h)) {
    PyErr_SetString(PyExc_TypeError, message);
    return nullptr;
  }
  return nanobind::inst_ptr<T>(h);
}

// Runs `body` (which returns a new reference or nullptr with an error set)
// and turns any C++ exception it throws into a Python one.
template <class Body>
PyObject* Guarded(Body&& body) noexcept {
  try {
    return body();
  } catch (...) {
    return RaiseCurrent();
  }
}

}  // namespace kv0::python
