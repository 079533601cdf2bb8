// The native handles of kv0.tracking, shared by the files that bind their
// methods (tracking.cc, tracking_run.cc, tracking_search.cc).
#pragma once

#include <nanobind/nanobind.h>

#include <optional>
#include <string>
#include <utility>

#include "kv0/tracking.h"

namespace kv0::python {

namespace tr = kv0::tracking;

// The native repository handle.
class PyRepo {
 public:
  explicit PyRepo(tr::Repo repo) : repo_(std::move(repo)), uri_(repo_->uri()) {}
  ~PyRepo() {
    // ~Repo flushes, which waits on Lance: not with the GIL (see
    // tracking.cc's opening comment).
    nanobind::gil_scoped_release release;
    repo_.reset();
  }
  PyRepo(const PyRepo&) = delete;
  PyRepo& operator=(const PyRepo&) = delete;

  // After close() kv0 itself answers every call with NotSupported.
  tr::Repo& repo() { return *repo_; }
  const std::string& uri() const { return uri_; }

  // Idempotent; the flag is only touched with the GIL held.
  void Close() {
    if (closed_) return;
    {
      nanobind::gil_scoped_release release;
      repo_->Close();
    }
    closed_ = true;
  }
  bool closed() const { return closed_; }

 private:
  std::optional<tr::Repo> repo_;
  std::string uri_;
  bool closed_ = false;
};

// The native run handle; Python's Run is this class.
struct PyRun {
  explicit PyRun(tr::Run r) : run(std::move(r)) {}
  ~PyRun() {
    // Dropping the last reference to the repository would close it.
    nanobind::gil_scoped_release release;
    run.reset();
  }
  PyRun(PyRun&&) = default;
  PyRun(const PyRun&) = delete;

  std::optional<tr::Run> run;
  // finish() was called through this handle: leaving a with block then
  // keeps the status it set.
  bool finished = false;
  // track's options, reused from call to call, with the context of the last
  // call converted, and kept_context, a copy of that context's dict (null
  // when the context is None or not flat): see tracking_run.cc.
  tr::TrackOptions track_options;
  nanobind::object kept_context;
};

// Adds the class Run to the module kv0._kv0.tracking (tracking_run.cc).
void BindRun(nanobind::module_& tracking);
// Adds search_runs' native half to _Repo (tracking_search.cc).
void BindRunSearch(nanobind::class_<PyRepo>& repo);

}  // namespace kv0::python
