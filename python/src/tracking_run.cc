// Python bindings of kv0::tracking::Run (kv0.tracking.Run): track,
// set_params, update and finish.
//
// The GIL. Every call into kv0 releases the GIL (see tracking.cc), except
// track, the hot path: it keeps the GIL for the common call, which only
// appends to the in-memory buffer and the local-file WAL under a lock that
// no thread holds while calling Lance (measured with a CPU-bound Python
// thread beside: about 1.5M calls/s kept, 0.5-1M released). Once the buffer
// holds 2 * flush_rows points, though, Run::Track calls Repo::Flush() itself
// (the background flush is not keeping up), which waits on flush_mu_, held
// by a flush that is inside Lance; holding the GIL there deadlocks as soon
// as Lance logs from its runtime threads during that flush (reproduced with
// set_lance_log_level(5) and flush_rows=10: the main thread blocked in
// RepoImpl::Flush, a lance-c thread in PyGILState_Ensure). So track calls
// Run::TryTrack, which writes nothing when the call would wait, and then
// Run::Track with the GIL released. The decision and the write happen under
// one lock, so no flush can fill the buffer between them.
//
// Contexts. A training loop passes the same context (often the same dict)
// to every call; converting it to JSON each time was a third of a call's
// cost. PyRun keeps the last context converted beside a shallow copy of
// the dict, and a call whose context has the same keys and values, of the
// same types, reuses the conversion (SameContext). Only flat contexts of
// str, int, float, bool and None are kept: their values cannot change under
// the copy, and comparing them is cheaper than converting.

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>

#include <bit>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "fast_call.h"
#include "json_convert.h"
#include "tracking_convert.h"
#include "tracking_handles.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace kv0::python {
namespace {

// True for a value SameContext can compare to its copy: immutable, and of a
// type that converts to one JSON value only.
bool IsPlainValue(PyObject* v) {
  return PyUnicode_CheckExact(v) || PyLong_CheckExact(v) || PyFloat_CheckExact(v) ||
         PyBool_Check(v) || v == Py_None;
}

// The dict to keep beside its conversion: a shallow copy when every key is
// a str and every value plain, else null (such a context is converted at
// every call).
nb::object ContextCopy(PyObject* context) {
  Py_ssize_t pos = 0;
  PyObject *key, *value;
  while (PyDict_Next(context, &pos, &key, &value)) {
    if (!PyUnicode_CheckExact(key) || !IsPlainValue(value)) return nb::object();
  }
  return nb::steal(PyDict_Copy(context));
}

// True when two values of a context convert to the same JSON: the same
// object, or the same type and value (floats equal bit for bit). False,
// never an error, when unsure.
bool SameValue(PyObject* value, PyObject* old) {
  if (old == value) return true;  // the same object, or the same bool or None
  if (Py_TYPE(old) != Py_TYPE(value)) return false;
  if (PyFloat_CheckExact(value)) {
    return std::bit_cast<uint64_t>(PyFloat_AS_DOUBLE(value)) ==
           std::bit_cast<uint64_t>(PyFloat_AS_DOUBLE(old));
  }
  if (PyUnicode_CheckExact(value) || PyLong_CheckExact(value)) {
    int equal = PyObject_RichCompareBool(value, old, Py_EQ);
    if (equal < 0) PyErr_Clear();
    return equal == 1;
  }
  return false;  // a bool or None that differs
}

// True when context has the keys and values of kept (a ContextCopy), so
// both convert to the same JSON. The two dicts are walked side by side:
// a context built by the same code as the kept one has its keys in the
// same order, often the same objects, and then no key is looked up.
bool SameContext(PyObject* context, PyObject* kept) {
  if (kept == nullptr || !PyDict_Check(context) ||
      PyDict_GET_SIZE(context) != PyDict_GET_SIZE(kept)) {
    return false;
  }
  Py_ssize_t pos = 0, kept_pos = 0;
  PyObject *key, *value, *kept_key, *kept_value;
  while (PyDict_Next(context, &pos, &key, &value)) {
    if (!PyDict_Next(kept, &kept_pos, &kept_key, &kept_value)) return false;
    if (key != kept_key) {
      if (!PyUnicode_CheckExact(key)) return false;
      kept_value = PyDict_GetItemWithError(kept, key);  // borrowed
      if (kept_value == nullptr) {
        PyErr_Clear();
        return false;
      }
    }
    if (!SameValue(value, kept_value)) return false;
  }
  return true;
}

void Finish(PyRun& self, const std::string& status, nb::handle ended_at) {
  std::optional<int64_t> at = OptionalMicros(ended_at, "ended_at");
  {
    nb::gil_scoped_release release;
    if (at) {
      self.run->FinishAt(status, *at);
    } else {
      self.run->Finish(status);
    }
  }
  self.finished = true;
}

constexpr const char* kRunDoc =
    R"(A handle on one run, for writing; from Repo.create_run or Repo.resume_run.

Writes go to the repository's buffer (and local write-ahead log) and are
committed by the repository handle's flushes. The handle keeps its Repo
alive; once the Repo is closed every call raises kv0.errors.NotSupported.

A Run is a context manager: leaving a with block calls finish("finished"),
or finish("failed") if an exception escapes it; if finish() was already
called through this handle, the status it set is kept.)";

constexpr const char* kTrackDoc =
    R"(track(value, name, step=None, epoch=None, context=None, timestamp=None)

Records one point of the series (this run, name, context).

value: a float (anything float() accepts). name: a non-empty str.
step: an int; default one past the series' last step. epoch: an int or None.
context: a dict of JSON-able values distinguishing series of one name
(such as {"subset": "val"}); None means {}. timestamp: a datetime (naive =
UTC) or an int of microseconds since the Unix epoch; default now.

Buffered: the point is committed by the next flush (flush_rows points,
every flush_interval, Repo.flush(), finish() or Repo.close()). Raises
TypeError for a context that is not a dict or not JSON-able, and
kv0.errors.InvalidArgument for an empty name.)";

constexpr const char* kUpdateDoc =
    R"(Changes the given fields of the run's record and returns the new record
(a dict as Repo.run returns). Fields: name, experiment, description, kind
(str or None), tags (list of str), status ("running", "finished", "failed"
or "aborted"), archived (bool), created_at_us (datetime or int of
microseconds), ended_at_us (same, or None) and target (any JSON-able value,
None removes it). Only changed fields are written; other writers' changes
to other fields are kept. An unknown keyword raises TypeError.)";

// An optional int argument (step, epoch): absent or None, or an int (or
// anything with __index__).
bool OptionalInt(PyObject* o, const char* what, std::optional<int64_t>* out) {
  if (o == nullptr || o == Py_None) {
    out->reset();
    return true;
  }
  // An exact int first: PyFloat_Check walks the type's bases for it.
  if (!PyLong_CheckExact(o) && (PyFloat_Check(o) || PyUnicode_Check(o))) {
    PyErr_Format(PyExc_TypeError, "%s must be an int or None, not %s", what, Py_TYPE(o)->tp_name);
    return false;
  }
  long long v = PyLong_AsLongLong(o);
  if (v == -1 && PyErr_Occurred()) return false;
  *out = v;
  return true;
}

// track(value, name, step=None, epoch=None, context=None, timestamp=None), a
// CPython fast call (fast_call.h): nanobind's dispatch of these six
// arguments cost more than the rest of the call.
PyObject* RunTrack(PyObject* o, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return Guarded([&]() -> PyObject* {
    static const Params kParams("track",
                                {"value", "name", "step", "epoch", "context", "timestamp"});
    PyRun* self = ReadyInstance<PyRun>(o, "not an initialised kv0.tracking.Run");
    PyObject* a[6];
    if (self == nullptr || !BindArgs(kParams, args, nargs, kwnames, 2, a)) {
      return nullptr;
    }
    double value = PyFloat_CheckExact(a[0]) ? PyFloat_AS_DOUBLE(a[0]) : PyFloat_AsDouble(a[0]);
    if (value == -1.0 && PyErr_Occurred()) return nullptr;
    if (!PyUnicode_Check(a[1])) {
      PyErr_Format(PyExc_TypeError, "name must be a str, not %s", Py_TYPE(a[1])->tp_name);
      return nullptr;
    }
    Py_ssize_t size = 0;
    const char* utf8 = PyUnicode_AsUTF8AndSize(a[1], &size);
    if (utf8 == nullptr) return nullptr;
    tr::TrackOptions& opts = self->track_options;
    if (!OptionalInt(a[2], "step", &opts.step) || !OptionalInt(a[3], "epoch", &opts.epoch)) {
      return nullptr;
    }
    PyObject* context = a[4] == nullptr ? Py_None : a[4];
    if (context == Py_None) {
      if (!opts.context.empty()) {
        self->kept_context.reset();
        opts.context = nlohmann::json::object();
      }
    } else if (!SameContext(context, self->kept_context.ptr())) {
      nlohmann::json converted = Context(context);  // raises for a bad one
      self->kept_context = ContextCopy(context);
      opts.context = std::move(converted);
    }
    opts.timestamp_us.reset();
    if (a[5] != nullptr && a[5] != Py_None) opts.timestamp_us = Micros(a[5], "timestamp");
    std::string_view name(utf8, static_cast<size_t>(size));
    if (self->run->TryTrack(value, name, opts)) Py_RETURN_NONE;
    // Another thread may call track on this handle once the GIL is
    // released: this call keeps options of its own.
    tr::TrackOptions own = opts;
    {
      nb::gil_scoped_release release;
      self->run->Track(value, name, own);
    }
    Py_RETURN_NONE;
  });
}

PyMethodDef run_methods[] = {
    {"track", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(RunTrack)),
     METH_FASTCALL | METH_KEYWORDS, kTrackDoc},
    {nullptr, nullptr, 0, nullptr},
};

PyType_Slot run_slots[] = {
    {Py_tp_methods, run_methods},
    {0, nullptr},
};

}  // namespace

void BindRun(nb::module_& t) {
  nb::class_<PyRun>(t, "Run", nb::type_slots(run_slots), kRunDoc)
      .def_prop_ro(
          "run_id", [](PyRun& self) { return self.run->run_id(); }, "The run's id (a str).")
      .def(
          "set_params",
          [](PyRun& self, nb::handle params) {
            if (!PyDict_Check(params.ptr())) {
              throw nb::type_error(("params must be a dict, not " + TypeName(params)).c_str());
            }
            nlohmann::json p = ToJson(params);
            nb::gil_scoped_release release;
            self.run->SetParams(p);
          },
          "params"_a, nb::sig("def set_params(self, params: dict) -> None"),
          "Merges params (a dict of JSON-able values) into the run's parameters: nested dicts "
          "merge key by key (stored as dotted keys such as 'optimizer.lr'), keys not named keep "
          "their values, any other value replaces what its key held. Keys must be non-empty "
          "str without '.'; NaN and infinities are refused (kv0.errors.InvalidArgument).")
      .def(
          "update",
          [](PyRun& self, nb::kwargs fields) {
            RunChange change = ParseRunChange(fields, "update");
            tr::RunInfo info;
            {
              nb::gil_scoped_release release;
              info = self.run->Update([&change](tr::RunInfo& r) { change.Apply(r); });
            }
            return RunInfoToDict(info);
          },
          "fields"_a, nb::sig("def update(self, **fields) -> dict"), kUpdateDoc)
      .def(
          "finish",
          [](PyRun& self, const std::string& status, nb::handle ended_at) {
            Finish(self, status, ended_at);
          },
          "status"_a = "finished", "ended_at"_a = nb::none(),
          nb::sig("def finish(self, status: str = 'finished', ended_at: datetime.datetime | int | "
                  "None = None) -> None"),
          "Sets the status (finished, failed or aborted) and the end time (now, or ended_at: a "
          "datetime, naive = UTC, or an int of microseconds since the Unix epoch), then flushes "
          "the repository handle: waits for the commit, or with the Repo's finish_waits=False "
          "starts it in the background and returns once the status is logged.")
      .def(
          "__enter__", [](nb::object self) { return self; }, nb::sig("def __enter__(self) -> Run"))
      .def(
          "__exit__",
          [](PyRun& self, nb::handle exc_type, nb::handle, nb::handle) {
            if (self.finished) return false;
            Finish(self, exc_type.is_none() ? "finished" : "failed", nb::none());
            return false;
          },
          "exc_type"_a.none(), "exc_value"_a.none(), "traceback"_a.none())
      .def("__repr__", [](PyRun& self) { return "<kv0.tracking.Run " + self.run->run_id() + ">"; });
}

}  // namespace kv0::python
