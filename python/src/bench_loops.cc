// The C++ side of bench/python_peers.py and bench/tracking_py_bench.py: the
// loops they time through kv0.DB and kv0.tracking.Run from Python, run here
// on the same handles and data, so that their gates compare the binding with
// C++ doing the same work. Not part of kv0's API.

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <chrono>
#include <ctime>
#include <string>
#include <tuple>
#include <vector>

#include "fast_call.h"
#include "json_convert.h"
#include "kv_handle.h"
#include "tracking_handles.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace kv0::python {
namespace {

double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

std::vector<std::string> Strings(nb::handle list, size_t field) {
  std::vector<std::string> out;
  for (nb::handle item : list) {
    nb::handle b = field == 0 && PyBytes_Check(item.ptr()) ? item : item[field];
    out.emplace_back(PyBytes_AsString(b.ptr()), static_cast<size_t>(PyBytes_Size(b.ptr())));
  }
  return out;
}

// Runs `op` over `arg` (keys for get, multi_get and seek+10; (key, value)
// pairs for put and batch; ignored for scan). Returns (operations, CPU
// seconds of the process, wall seconds) of the loop alone.
std::tuple<size_t, double, double> Loop(nb::handle db_object, const std::string& op,
                                        nb::handle arg) {
  PyDB* native = AnyDbOf(db_object.ptr());
  if (native == nullptr) throw nb::python_error();
  kv::DB& db = native->db();
  std::vector<std::string> keys, values;
  if (op != "scan") keys = Strings(arg, 0);
  if (op == "put" || op == "batch") values = Strings(arg, 1);
  nb::gil_scoped_release release;
  size_t n = 0, bytes = 0;
  double cpu = CpuSeconds();
  auto wall = std::chrono::steady_clock::now();
  if (op == "get") {
    for (const auto& k : keys) {
      auto v = db.Get(k);
      bytes += v ? v->size() : 0;
    }
    n = keys.size();
  } else if (op == "multi_get") {
    std::vector<std::string_view> part;
    for (size_t i = 0; i < keys.size(); i += 1000) {
      part.assign(keys.begin() + i, keys.begin() + std::min(keys.size(), i + 1000));
      for (auto& v : db.MultiGet(part)) bytes += v ? v->size() : 0;
    }
    n = keys.size();
  } else if (op == "scan") {
    auto it = db.NewIterator();
    for (it->SeekToFirst(); it->Valid(); it->Next(), ++n) {
      bytes += std::string(it->key()).size() + std::string(it->value()).size();
    }
  } else if (op == "seek+10") {
    auto it = db.NewIterator();
    for (const auto& k : keys) {
      it->Seek(k);
      for (int i = 0; i < 10 && it->Valid(); ++i, it->Next()) {
        bytes += std::string(it->key()).size() + std::string(it->value()).size();
      }
    }
    n = keys.size();
  } else if (op == "put") {
    for (size_t i = 0; i < keys.size(); ++i) db.Put(keys[i], values[i]);
    n = keys.size();
  } else if (op == "batch") {
    for (size_t i = 0; i < keys.size(); i += 1000) {
      kv::WriteBatch batch;
      for (size_t j = i; j < std::min(keys.size(), i + 1000); ++j) batch.Put(keys[j], values[j]);
      db.Write(batch);
    }
    n = keys.size();
  } else {
    throw Error(Code::kInvalidArgument, "unknown loop " + op);
  }
  double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall).count();
  if (bytes == 0 && n > 0 && op != "put" && op != "batch") {
    throw Error(Code::kCorruption, "the " + op + " loop read nothing");
  }
  return {n, CpuSeconds() - cpu, wall_s};
}

// Runs n calls of one of bench/tracking_py_bench.py's loops on the run:
// Track with value and name ("minimal"), with a step too ("step"), with step,
// epoch and context {"subset": "train"} ("full"), or SetParams(params)
// ("set_params"). Returns (calls, CPU seconds of the process, wall seconds).
std::tuple<size_t, double, double> TrackLoop(PyRun& run, const std::string& variant, size_t n,
                                             nb::handle params) {
  nlohmann::json p = variant == "set_params" ? ToJson(params) : nlohmann::json();
  if (variant != "minimal" && variant != "step" && variant != "full" && variant != "set_params") {
    throw Error(Code::kInvalidArgument, "unknown loop " + variant);
  }
  tr::Run& r = *run.run;
  nb::gil_scoped_release release;
  double cpu = CpuSeconds();
  auto wall = std::chrono::steady_clock::now();
  tr::TrackOptions opts;
  if (variant == "full") opts.context = {{"subset", "train"}};
  for (size_t i = 0; i < n; ++i) {
    double value = static_cast<double>(i) * 1e-3;
    if (variant == "minimal") {
      r.Track(value, "loss");
      continue;
    }
    if (variant == "set_params") {
      r.SetParams(p);
      continue;
    }
    opts.step = static_cast<int64_t>(i);
    if (variant == "full") opts.epoch = static_cast<int64_t>(i / 1000);
    r.Track(value, "loss", opts);
  }
  double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall).count();
  return {n, CpuSeconds() - cpu, wall_s};
}

// A fast call that takes any arguments and does nothing: a Python loop
// calling it costs what the interpreter spends on the loop and the call,
// the floor under any binding's figure.
PyObject* Noop(PyObject*, PyObject* const*, Py_ssize_t, PyObject*) { Py_RETURN_NONE; }

PyMethodDef noop_method = {"_noop",
                           reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Noop)),
                           METH_FASTCALL | METH_KEYWORDS,
                           "For bench/tracking_py_bench.py: takes any arguments, returns None."};

}  // namespace

void BindBenchLoops(nb::module_& m) {
  nb::object noop = nb::steal(PyCFunction_NewEx(&noop_method, nullptr, m.attr("__name__").ptr()));
  if (!noop.is_valid()) throw nb::python_error();
  m.attr("_noop") = noop;
  m.def("_cxx_loop", &Loop, "db"_a, "op"_a, "arg"_a,
        "For bench/python_peers.py: runs one of its loops in C++ on a kv0.DB; returns "
        "(operations, CPU seconds, wall seconds).");
  m.def("_cxx_track_loop", &TrackLoop, "run"_a, "variant"_a, "n"_a, "params"_a = nb::none(),
        "For bench/tracking_py_bench.py: runs one of its loops in C++ on a kv0.tracking.Run; "
        "returns (calls, CPU seconds, wall seconds).");
}

}  // namespace kv0::python
