// kv0._kv0: the native half of the Python package.

#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>

#include "arrow_capsule.h"
#include "errors.h"
#include "gil_free.h"
#include "kv0/wal_sync.h"
#include "lance/dataset.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace kv0::python {
namespace {

// Low-level access to one Lance dataset through libkv0, for tests and
// tools: kv0's own layers sit on the same calls.
void BindLance(nb::module_& m) {
  nb::module_ lance = m.def_submodule("lance", "Raw Lance datasets through libkv0.");

  lance.def(
      "write",
      [](const std::string& uri, StreamArg data, const lance::StorageOptions& options,
         const std::string& mode) {
        if (mode == "create") {
          arrow::OwnedSchema schema;
          if (data.stream->get_schema(data.stream.get(), schema.get()) != 0) {
            throw Error(Code::kInvalidArgument, "cannot read the schema of the input stream");
          }
          auto ds = lance::Dataset::Create(uri, options, *schema.get());
          auto result = ds.Append(std::move(data.stream));
          return std::make_pair(result.version, result.fragment_ids);
        }
        if (mode != "append") throw Error(Code::kInvalidArgument, "mode is create or append");
        auto ds = lance::Dataset::Open(uri, options);
        auto result = ds.Append(std::move(data.stream));
        return std::make_pair(result.version, result.fragment_ids);
      },
      "uri"_a, "data"_a, "storage_options"_a = lance::StorageOptions{}, "mode"_a = "create",
      kReleaseGil,
      "Writes data (anything with __arrow_c_stream__) as one fragment: into a new dataset "
      "(mode='create') or appended (mode='append'). Returns (version, fragment ids).");

  lance.def(
      "scan",
      [](const std::string& uri, std::optional<std::vector<std::string>> columns,
         std::optional<std::string> filter, bool with_row_address,
         const lance::StorageOptions& options) {
        auto ds = lance::Dataset::Open(uri, options);
        lance::ScanOptions scan;
        if (columns) scan.columns = *columns;
        if (filter) scan.filter = *filter;
        scan.with_row_address = with_row_address;
        // The reader keeps the dataset's stream alive on its own.
        return StreamResult{ds.ScanStream(scan)};
      },
      "uri"_a, "columns"_a = nb::none(), "filter"_a = nb::none(), "with_row_address"_a = false,
      "storage_options"_a = lance::StorageOptions{}, kReleaseGil,
      "Scans the latest version; returns an Arrow stream.");

  lance.def(
      "take",
      [](const std::string& uri, const std::vector<uint64_t>& addresses,
         const std::vector<std::string>& columns, const lance::StorageOptions& options) {
        auto ds = lance::Dataset::Open(uri, options);
        return StreamResult{ds.TakeStream(addresses, columns)};
      },
      "uri"_a, "addresses"_a, "columns"_a = std::vector<std::string>{},
      "storage_options"_a = lance::StorageOptions{}, kReleaseGil,
      "Reads the rows at the given row addresses; returns an Arrow stream.");
}

}  // namespace

void BindKv(nb::module_& m);          // kv.cc
void BindTracking(nb::module_& m);    // tracking.cc
void BindBenchLoops(nb::module_& m);  // bench_loops.cc

// Lance's log records go to Python's logging module, as logger
// "lance.<target>". Called on Lance's threads: it takes the GIL only here,
// which is safe because no binding waits on Lance, a kv0 lock or the runtime
// while holding the GIL (gil_free.h).
void LogToPython(int level, const char* target, const char* message, void*) {
  if (!Py_IsInitialized()) return;
  nb::gil_scoped_acquire gil;
  try {
    static const int kLevels[] = {0, 40, 30, 20, 10, 5};  // ERROR .. TRACE
    nb::object logging = nb::module_::import_("logging");
    nb::object logger = logging.attr("getLogger")(std::string("lance.") + target);
    logger.attr("log")(kLevels[std::clamp(level, 1, 5)], message);
  } catch (...) {
    PyErr_Clear();  // logging must never raise into Lance
  }
}

}  // namespace kv0::python

NB_MODULE(_kv0, m) {
  m.doc() = "Native core of kv0, an embedded storage engine on Lance datasets.";
  m.attr("__version__") = KV0_VERSION;
  m.def("lance_version", &kv0::lance::LanceVersion, kv0::python::kReleaseGil,
        "The version of the Lance library kv0 was built with.");
  kv0::python::RegisterErrors(m);
  kv0::python::BindArrow(m);
  kv0::python::BindLance(m);
  kv0::python::BindKv(m);
  kv0::python::BindTracking(m);
  kv0::python::BindBenchLoops(m);
  m.def(
      "parse_wal_sync",
      [](const std::string& mode) {
        return std::string(kv0::WalSyncName(kv0::ParseWalSync(mode)));
      },
      "mode"_a,
      "Checks a wal_sync value as every kv0 handle does: returns it, or raises InvalidArgument.");
  m.def(
      "set_lance_log_level",
      // Takes the lock that a Lance thread logging through LogToPython holds.
      [](int level) {
        kv0::lance::SetLogCallback(level > 0 ? kv0::python::LogToPython : nullptr, nullptr, level);
      },
      "level"_a, kv0::python::kReleaseGil,
      "Forwards Lance's log records up to this level (1 error, 2 warn, 3 info, 4 debug, "
      "5 trace; 0 stops) to the logging module, as loggers named lance.<target>.");
}
