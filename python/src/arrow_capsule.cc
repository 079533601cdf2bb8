#include "arrow_capsule.h"

#include <cstdlib>
#include <stdexcept>

namespace nb = nanobind;

namespace kv0::python {
namespace {

constexpr const char* kStreamCapsule = "arrow_array_stream";

// Releases a stream capsule that no consumer took.
void ReleaseCapsule(PyObject* capsule) {
  auto* stream = static_cast<ArrowArrayStream*>(PyCapsule_GetPointer(capsule, kStreamCapsule));
  if (stream == nullptr) {
    PyErr_Clear();
    return;
  }
  if (stream->release != nullptr) stream->release(stream);
  std::free(stream);
}

// A one-shot stream handed out through __arrow_c_stream__.
class ArrowStream {
 public:
  explicit ArrowStream(arrow::OwnedStream stream) : stream_(std::move(stream)) {}

  nb::object Capsule(nb::handle requested_schema) {
    if (!requested_schema.is_none()) {
      throw nb::type_error("kv0 streams do not convert to a requested schema");
    }
    if (!stream_) throw std::runtime_error("this Arrow stream was already consumed");
    auto* raw = static_cast<ArrowArrayStream*>(std::malloc(sizeof(ArrowArrayStream)));
    if (raw == nullptr) throw std::bad_alloc();
    *raw = stream_.release();
    PyObject* capsule = PyCapsule_New(raw, kStreamCapsule, ReleaseCapsule);
    if (capsule == nullptr) {
      raw->release(raw);
      std::free(raw);
      throw nb::python_error();
    }
    return nb::steal(capsule);
  }

 private:
  arrow::OwnedStream stream_;
};

}  // namespace

nb::object ExportStream(arrow::OwnedStream stream) {
  return nb::cast(ArrowStream(std::move(stream)));
}

arrow::OwnedStream ImportStream(nb::handle source) {
  if (!nb::hasattr(source, "__arrow_c_stream__")) {
    throw nb::type_error("expected an object with __arrow_c_stream__ (pyarrow, polars, ...)");
  }
  nb::object capsule = source.attr("__arrow_c_stream__")();
  auto* raw = static_cast<ArrowArrayStream*>(PyCapsule_GetPointer(capsule.ptr(), kStreamCapsule));
  if (raw == nullptr) throw nb::python_error();
  // Owned takes the struct and marks the capsule's copy released, so the
  // capsule's destructor leaves it alone.
  return arrow::OwnedStream(raw);
}

void BindArrow(nb::module_& m) {
  nb::class_<ArrowStream>(m, "ArrowStream",
                          "A stream of Arrow record batches, read once through "
                          "__arrow_c_stream__ (pyarrow.RecordBatchReader.from_stream, "
                          "polars.from_arrow, duckdb, ...).")
      .def("__arrow_c_stream__", &ArrowStream::Capsule, nb::arg("requested_schema") = nb::none());
}

}  // namespace kv0::python
