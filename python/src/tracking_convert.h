// Python values in, kv0::tracking's types out, and back: the conversions
// the files binding kv0.tracking share (tracking.cc, tracking_run.cc).
//
// Parameters, contexts and targets convert to and from JSON with
// json_convert.h; the result structs (RunInfo, SeriesInfo, SeriesStats...)
// convert to dicts with the keys of their JSON form. Times are taken as a
// datetime (naive means UTC) or an int of microseconds since the Unix epoch,
// and returned as ints of microseconds. Every function here needs the GIL;
// a value of the wrong Python type raises TypeError (nb::type_error), a
// value kv0 refuses raises kv0::Error.
#pragma once

#include <nanobind/nanobind.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kv0/tracking.h"
#include "nlohmann/json.hpp"

namespace kv0::python {

namespace tr = kv0::tracking;

// Looks up datetime's types once; called when the module is imported,
// before any conversion of a time.
void InitTimeTypes();

[[noreturn]] void ThrowPython(PyObject* type, const std::string& message);
std::string TypeName(nanobind::handle obj);

// --- Arguments --------------------------------------------------------------

// A time: an int of microseconds since the Unix epoch, or a datetime. A
// float is refused (seconds or microseconds?). `what` names the argument in
// errors.
int64_t Micros(nanobind::handle obj, const char* what);
std::optional<int64_t> OptionalMicros(nanobind::handle obj, const char* what);

// Series ids: any iterable of ints.
std::vector<uint64_t> Ids(nanobind::handle ids);
// Tags: an iterable of str, not a lone str.
std::vector<std::string> Tags(nanobind::handle tags);
// A metric context: None ({}) or a dict of JSON-able values.
nlohmann::json Context(nanobind::handle context);
std::optional<std::string> OptionalStr(nanobind::handle obj, const char* what);
std::string Str(nanobind::handle obj, const std::string& what);
// An iterable of str, not a lone str.
std::vector<std::string> StrList(nanobind::handle obj, const char* what);
// Durations given in seconds, refused when negative or not finite.
std::chrono::milliseconds Millis(double seconds, const char* what);
std::chrono::seconds Seconds(double seconds, const char* what);
// None (0, the latest) or an int >= 0.
uint64_t Version(nanobind::handle obj);

// The changes of Run.update / Repo.update_run, converted while the GIL is
// held, so that applying them (inside kv0, without the GIL) touches no
// Python object. An outer nullopt leaves the field alone.
struct RunChange {
  std::optional<std::optional<std::string>> name, experiment, description, kind;
  std::optional<std::vector<std::string>> tags;
  std::optional<std::string> status;
  std::optional<bool> archived;
  std::optional<int64_t> created_at_us;
  std::optional<std::optional<int64_t>> ended_at_us;
  std::optional<std::optional<nlohmann::json>> target;

  void Apply(tr::RunInfo& info) const;
};
// `function` names the caller in the error for an unknown keyword.
RunChange ParseRunChange(const nanobind::kwargs& fields, const char* function);

// The rows of Repo.append_records and the keyword arguments of Repo.records.
std::vector<tr::Record> RecordRows(nanobind::handle rows);
tr::RecordQuery MakeRecordQuery(nanobind::handle run_id, nanobind::handle run_ids,
                                nanobind::handle item_id, nanobind::handle item_ids,
                                nanobind::handle item_prefix, nanobind::handle version,
                                nanobind::handle tag);

// --- Results ----------------------------------------------------------------

nanobind::object OptionalToPy(const std::optional<std::string>& s);
nanobind::dict RunInfoToDict(const tr::RunInfo& r);
nanobind::dict SeriesInfoToDict(const tr::SeriesInfo& s);
nanobind::dict SeriesStatsToDict(const tr::SeriesStats& s);
nanobind::list SeriesListToPy(const std::vector<tr::SeriesInfo>& series);
nanobind::dict RecordToDict(const tr::Record& r);
// (runs, params, series, metrics)
nanobind::tuple VersionsToTuple(const tr::TableVersions& v);

}  // namespace kv0::python
