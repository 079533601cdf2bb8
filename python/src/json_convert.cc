#include "json_convert.h"

#include <string>
#include <utility>

namespace nb = nanobind;

namespace kv0::python {
namespace {

// A value that has no JSON form. Thrown from the depth of the structure and
// extended with the key or index of each level it passes on the way out, so
// the message says where the value sits; a converted value costs nothing.
struct Unconvertible {
  bool overflow = false;  // an int out of range, not a wrong type
  std::string message;
  std::string path;
};

// Enters one level of nesting under Python's recursion limit: a list that
// contains itself raises RecursionError instead of overflowing the stack.
class DepthGuard {
 public:
  DepthGuard() {
    if (Py_EnterRecursiveCall(" while converting a Python object to JSON") != 0) {
      throw nb::python_error();
    }
  }
  ~DepthGuard() { Py_LeaveRecursiveCall(); }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;
};

std::string TypeName(PyObject* obj) { return nb::type_name(nb::handle(obj).type()).c_str(); }

std::string Utf8(PyObject* str) {
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(str, &size);
  if (data == nullptr) throw nb::python_error();  // a lone surrogate
  return std::string(data, static_cast<size_t>(size));
}

nlohmann::json Convert(PyObject* obj) {
  if (obj == Py_None) return nullptr;
  // bool before int: bool is a subclass of int.
  if (PyBool_Check(obj)) return obj == Py_True;
  if (PyLong_Check(obj)) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow == 0) {
      if (v == -1 && PyErr_Occurred()) throw nb::python_error();
      return static_cast<int64_t>(v);
    }
    if (overflow > 0) {
      unsigned long long u = PyLong_AsUnsignedLongLong(obj);
      if (!(u == static_cast<unsigned long long>(-1) && PyErr_Occurred())) {
        return static_cast<uint64_t>(u);
      }
      PyErr_Clear();
    }
    throw Unconvertible{true, "an int outside [-2**63, 2**64) has no JSON form in kv0", ""};
  }
  if (PyFloat_Check(obj)) {
    double v = PyFloat_AsDouble(obj);
    if (v == -1.0 && PyErr_Occurred()) throw nb::python_error();
    return v;
  }
  if (PyUnicode_Check(obj)) return Utf8(obj);
  if (PyDict_Check(obj)) {
    DepthGuard depth;
    nlohmann::json out = nlohmann::json::object();
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(obj, &pos, &key, &value)) {
      if (!PyUnicode_Check(key)) {
        throw Unconvertible{false, "dict keys must be str, not " + TypeName(key), ""};
      }
      std::string k = Utf8(key);
      // Borrowed references: hold them while converting, as a conversion may
      // run Python code (a str subclass) that changes the dict.
      nb::object hold = nb::borrow(value);
      try {
        out[k] = Convert(value);
      } catch (Unconvertible& e) {
        nb::str key_repr = nb::repr(nb::handle(key));
        e.path = std::string("[") + key_repr.c_str() + "]" + e.path;
        throw;
      }
    }
    return out;
  }
  bool is_list = PyList_Check(obj);
  if (is_list || PyTuple_Check(obj)) {
    DepthGuard depth;
    nlohmann::json out = nlohmann::json::array();
    Py_ssize_t n = is_list ? PyList_Size(obj) : PyTuple_Size(obj);
    for (Py_ssize_t i = 0; i < n; ++i) {
      // A list may shrink while an item converts; re-read its size.
      if (is_list && i >= PyList_Size(obj)) break;
      nb::object item = nb::borrow(is_list ? PyList_GetItem(obj, i) : PyTuple_GetItem(obj, i));
      try {
        out.push_back(Convert(item.ptr()));
      } catch (Unconvertible& e) {
        e.path = "[" + std::to_string(i) + "]" + e.path;
        throw;
      }
    }
    return out;
  }
  throw Unconvertible{false,
                      "cannot convert " + TypeName(obj) +
                          " to JSON (expected dict, list, tuple, str, int, float, bool or None)",
                      ""};
}

}  // namespace

nlohmann::json ToJson(nb::handle obj) {
  try {
    return Convert(obj.ptr());
  } catch (const Unconvertible& e) {
    std::string message = e.path.empty() ? e.message : e.message + " at " + e.path;
    PyErr_SetString(e.overflow ? PyExc_OverflowError : PyExc_TypeError, message.c_str());
    throw nb::python_error();
  }
}

nb::object FromJson(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
    case nlohmann::json::value_t::discarded:
      return nb::none();
    case nlohmann::json::value_t::boolean:
      return nb::bool_(j.get<bool>());
    case nlohmann::json::value_t::number_integer:
      return nb::int_(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      return nb::int_(j.get<uint64_t>());
    case nlohmann::json::value_t::number_float:
      return nb::float_(j.get<double>());
    case nlohmann::json::value_t::string: {
      const std::string& s = j.get_ref<const std::string&>();
      return nb::str(s.data(), s.size());
    }
    case nlohmann::json::value_t::array: {
      nb::list out;
      for (const auto& item : j) out.append(FromJson(item));
      return out;
    }
    case nlohmann::json::value_t::object: {
      nb::dict out;
      for (auto it = j.begin(); it != j.end(); ++it) {
        const std::string& key = it.key();
        out[nb::str(key.data(), key.size())] = FromJson(it.value());
      }
      return out;
    }
    case nlohmann::json::value_t::binary: {
      const auto& b = j.get_binary();
      return nb::bytes(b.data(), b.size());
    }
  }
  return nb::none();
}

}  // namespace kv0::python
