// Arrow streams across the Python boundary, through the Arrow PyCapsule
// interface (__arrow_c_stream__), so pyarrow, polars and DuckDB read kv0's
// results without copies and kv0 reads theirs.
#pragma once

#include <nanobind/nanobind.h>

#include "lance/arrow.h"

namespace kv0::python {

// Wraps a stream in a Python object whose __arrow_c_stream__ hands it to one
// consumer (a second call raises).
nanobind::object ExportStream(arrow::OwnedStream stream);

// Takes the stream of any object with __arrow_c_stream__ (a pyarrow Table or
// RecordBatchReader, a polars DataFrame, ...). Raises TypeError otherwise.
arrow::OwnedStream ImportStream(nanobind::handle source);

void BindArrow(nanobind::module_& m);

// Streams as the argument and result of a call that runs without the GIL
// (gil_free.h): imported before the call, exported after it.
struct StreamArg {
  arrow::OwnedStream stream;
};
struct StreamResult {
  arrow::OwnedStream stream;
};

}  // namespace kv0::python

namespace nanobind::detail {

template <>
struct type_caster<kv0::python::StreamArg> {
  NB_TYPE_CASTER(kv0::python::StreamArg, const_name("object"))

  bool from_python(handle src, uint32_t, cleanup_list*) noexcept {
    try {
      value.stream = kv0::python::ImportStream(src);
      return true;
    } catch (python_error&) {
      return false;  // not a stream: nanobind raises TypeError
    } catch (const std::exception&) {
      return false;
    }
  }
  static handle from_cpp(const kv0::python::StreamArg&, rv_policy, cleanup_list*) noexcept {
    return handle();
  }
};

template <>
struct type_caster<kv0::python::StreamResult> {
  NB_TYPE_CASTER(kv0::python::StreamResult, const_name("ArrowStream"))

  bool from_python(handle, uint32_t, cleanup_list*) noexcept { return false; }
  static handle from_cpp(kv0::python::StreamResult&& v, rv_policy, cleanup_list*) noexcept {
    try {
      return kv0::python::ExportStream(std::move(v.stream)).release();
    } catch (python_error& e) {
      e.restore();
      return handle();
    } catch (const std::exception& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
      return handle();
    }
  }
};

}  // namespace nanobind::detail
