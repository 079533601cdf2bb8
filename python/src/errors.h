// Maps kv0::Error onto the exception classes of kv0.errors.
#pragma once

#include <nanobind/nanobind.h>

#include "kv0/error.h"

namespace kv0::python {

// Registers the translator: a kv0::Error with code C raises kv0.errors.<C's
// Python name>, which the pure-Python package defines.
void RegisterErrors(nanobind::module_& m);

// Sets the Python error a kv0::Error raises (the translator's mapping), for
// code that is not called through nanobind.
void SetError(const Error& e) noexcept;

}  // namespace kv0::python
