// Python objects <-> nlohmann::json, for the values the tracking layer keeps
// as JSON: run parameters, series contexts and run targets.
//
// The JSON types map onto Python's as the json module maps them: object <->
// dict (str keys), array <-> list (tuples are accepted as arrays), string <->
// str, integer <-> int, number <-> float, true/false <-> bool, null <-> None.
#pragma once

#include <nanobind/nanobind.h>

#include <nlohmann/json.hpp>

namespace kv0::python {

// Converts obj, which must be built of dict (str keys), list, tuple, str,
// int, float, bool and None. Raises TypeError naming the offending type and
// where it sits (as subscripts: "at ['optimizer']['betas'][1]") for anything else
// or a non-str key, OverflowError for an int outside [-2**63, 2**64), and
// RecursionError for a structure nested too deeply (or containing itself).
// Needs the GIL. float subclasses (numpy.float64) convert as floats; NaN and
// infinities convert unchanged, for the callee to accept or refuse.
nlohmann::json ToJson(nanobind::handle obj);

// The Python value of j: a new dict, list, str, int, float, bool or None.
// Binary values (which kv0 never stores) become bytes. Needs the GIL.
nanobind::object FromJson(const nlohmann::json& j);

}  // namespace kv0::python
