// Calls that run without the GIL, and the values they take and return.
//
// Lance's log callback (module.cc) takes the GIL on Lance's runtime threads.
// A thread that holds the GIL while it waits on Lance, on a kv0 lock (held by
// a thread that waits on Lance) or on the runtime deadlocks with it as soon
// as Lance logs. So every binding that can wait on any of them is declared
// with kReleaseGil, nanobind's call guard: the GIL is released for the whole
// call, and no method can forget to. The body of such a call must not touch
// a Python object; its arguments and results cross as C++ values, converted
// by the casters below while the GIL is held (arguments before the call,
// results after it). kv0.DB's hot calls are CPython fast calls instead
// (fast_call.h); they release the GIL by hand around any call that may wait.
#pragma once

#include <nanobind/nanobind.h>

#include <string>
#include <string_view>
#include <vector>

namespace kv0::python {

inline constexpr nanobind::call_guard<nanobind::gil_scoped_release> kReleaseGil{};

// A bytes argument, borrowed for the call: the call's arguments keep the
// object alive, and bytes are immutable. str is refused, so code does not
// silently store text in some encoding.
struct BytesArg {
  std::string_view view;
};

// A list of bytes, copied: another thread could empty the list while the
// call runs without the GIL.
struct BytesList {
  std::vector<std::string> items;
};

// A result returned as bytes.
struct BytesResult {
  std::string data;
};

// A result returned as bytes, borrowed from memory that stays as it is
// until the conversion right after the call (an iterator's current entry).
struct BytesView {
  std::string_view view;
};

}  // namespace kv0::python

namespace nanobind::detail {

template <>
struct type_caster<kv0::python::BytesArg> {
  NB_TYPE_CASTER(kv0::python::BytesArg, const_name("bytes"))

  bool from_python(handle src, uint32_t, cleanup_list*) noexcept {
    if (!PyBytes_Check(src.ptr())) return false;
    value.view = {PyBytes_AS_STRING(src.ptr()), static_cast<size_t>(PyBytes_GET_SIZE(src.ptr()))};
    return true;
  }
  static handle from_cpp(const kv0::python::BytesArg& v, rv_policy, cleanup_list*) noexcept {
    return PyBytes_FromStringAndSize(v.view.data(), static_cast<Py_ssize_t>(v.view.size()));
  }
};

template <>
struct type_caster<kv0::python::BytesList> {
  NB_TYPE_CASTER(kv0::python::BytesList, const_name("list[bytes]"))

  bool from_python(handle src, uint32_t, cleanup_list*) noexcept {
    if (!PyList_Check(src.ptr())) return false;
    Py_ssize_t n = PyList_GET_SIZE(src.ptr());
    value.items.clear();
    value.items.reserve(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject* item = PyList_GET_ITEM(src.ptr(), i);
      if (!PyBytes_Check(item)) return false;
      value.items.emplace_back(PyBytes_AS_STRING(item),
                               static_cast<size_t>(PyBytes_GET_SIZE(item)));
    }
    return true;
  }
  static handle from_cpp(const kv0::python::BytesList& v, rv_policy, cleanup_list*) noexcept {
    PyObject* list = PyList_New(static_cast<Py_ssize_t>(v.items.size()));
    if (list == nullptr) return nullptr;
    for (size_t i = 0; i < v.items.size(); ++i) {
      PyObject* b =
          PyBytes_FromStringAndSize(v.items[i].data(), static_cast<Py_ssize_t>(v.items[i].size()));
      if (b == nullptr) {
        Py_DECREF(list);
        return nullptr;
      }
      PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i), b);
    }
    return list;
  }
};

template <>
struct type_caster<kv0::python::BytesResult> {
  NB_TYPE_CASTER(kv0::python::BytesResult, const_name("bytes"))

  bool from_python(handle, uint32_t, cleanup_list*) noexcept { return false; }
  static handle from_cpp(const kv0::python::BytesResult& v, rv_policy, cleanup_list*) noexcept {
    return PyBytes_FromStringAndSize(v.data.data(), static_cast<Py_ssize_t>(v.data.size()));
  }
};

template <>
struct type_caster<kv0::python::BytesView> {
  NB_TYPE_CASTER(kv0::python::BytesView, const_name("bytes"))

  bool from_python(handle, uint32_t, cleanup_list*) noexcept { return false; }
  static handle from_cpp(const kv0::python::BytesView& v, rv_policy, cleanup_list*) noexcept {
    return PyBytes_FromStringAndSize(v.view.data(), static_cast<Py_ssize_t>(v.view.size()));
  }
};

}  // namespace nanobind::detail
