#include "errors.h"

#include "kv0/error.h"

namespace nb = nanobind;

namespace kv0::python {
namespace {

const char* PythonName(Code code) {
  switch (code) {
    case Code::kNotFound:
      return "NotFound";
    case Code::kNotSupported:
      return "NotSupported";
    case Code::kInvalidArgument:
      return "InvalidArgument";
    case Code::kCorruption:
      return "Corruption";
    case Code::kIOError:
      return "StoreIOError";
    case Code::kConflict:
      return "Conflict";
    case Code::kBusy:
      return "Busy";
  }
  return "Error";
}

}  // namespace

void RegisterErrors(nb::module_&) {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      nb::object errors = nb::module_::import_("kv0.errors");
      nb::object type = errors.attr(PythonName(e.code()));
      PyErr_SetString(type.ptr(), e.what());
    }
  });
}

}  // namespace kv0::python
