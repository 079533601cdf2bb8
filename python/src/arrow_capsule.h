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

}  // namespace kv0::python
