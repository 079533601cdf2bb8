#include "errors.h"

#include "kv0/error.h"

namespace nb = nanobind;

namespace kv0::python {
namespace {

// kv0.errors names its classes after the codes, except that IOError is
// StoreIOError there (IOError is a built-in alias of OSError).
std::string PythonName(Code code) {
  return code == Code::kIOError ? "StoreIOError" : std::string(CodeName(code));
}

}  // namespace

void SetError(const Error& e) noexcept {
  try {
    nb::object errors = nb::module_::import_("kv0.errors");
    nb::object type = errors.attr(PythonName(e.code()).c_str());
    PyErr_SetString(type.ptr(), e.what());
  } catch (nb::python_error& failed) {
    failed.restore();  // kv0.errors could not be imported: that error stands
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
}

void RegisterErrors(nb::module_&) {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      SetError(e);
    }
  });
}

}  // namespace kv0::python
