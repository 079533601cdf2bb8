// Python bindings of kv0::kv: the native _DB, WriteBatch, _Options and
// _Iterator that kv0.DB and friends (python/kv0/db.py) build on. The hot
// calls of _DB and every method of WriteBatch are fast calls (kv_calls.cc);
// the iterators kv0.DB hands out are in kv_cursor.cc.
//
// Every method bound here that can reach Lance, a kv0 lock or Lance's
// runtime runs without the GIL (kReleaseGil, gil_free.h says why); that is
// every method here but _Options' constructor and _Iterator's valid() and
// key(), which only read memory. Lance's log callback takes the GIL back
// only to log.

#include "kv0/kv.h"

#include <nanobind/nanobind.h>
#include <nanobind/stl/chrono.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>

#include "arrow_capsule.h"
#include "gil_free.h"
#include "kv_handle.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace nanobind::detail {

template <>
struct type_caster<kv0::kv::Stats> {
  NB_TYPE_CASTER(kv0::kv::Stats, const_name("dict[str, int | bool]"))

  bool from_python(handle, uint32_t, cleanup_list*) noexcept { return false; }
  static handle from_cpp(const kv0::kv::Stats& s, rv_policy, cleanup_list*) noexcept {
    try {
      dict d;
      d["version"] = s.version;
      d["entries"] = s.entries;
      d["tombstones"] = s.tombstones;
      d["range_tombstones"] = s.range_tombstones;
      d["lazy_values"] = s.lazy_values;
      d["buffered_ops"] = s.buffered_ops;
      d["buffered_bytes"] = s.buffered_bytes;
      d["fragments"] = s.fragments;
      d["stored_rows"] = s.stored_rows;
      d["flushes"] = s.flushes;
      d["compactions"] = s.compactions;
      d["view_reloads"] = s.view_reloads;
      d["opened_from_snapshot"] = s.opened_from_snapshot;
      return d.release();
    } catch (python_error& e) {
      e.restore();
      return handle();
    }
  }
};

template <>
struct type_caster<kv0::kv::DB::PurgeStats> {
  NB_TYPE_CASTER(kv0::kv::DB::PurgeStats, const_name("dict[str, object]"))

  bool from_python(handle, uint32_t, cleanup_list*) noexcept { return false; }
  static handle from_cpp(const kv0::kv::DB::PurgeStats& s, rv_policy, cleanup_list*) noexcept {
    try {
      dict d;
      d["versions_removed"] = s.versions_removed;
      d["bytes_removed"] = s.bytes_removed;
      d["tags_deleted"] = s.tags_deleted;
      return d.release();
    } catch (python_error& e) {
      e.restore();
      return handle();
    }
  }
};

}  // namespace nanobind::detail

namespace kv0::python {
namespace {

using kv::DB;

// A native iterator; it keeps its database's handle alive.
class PyIterator {
 public:
  explicit PyIterator(DB& db) : it_(db.NewIterator()) {}

  kv::Iterator& it() { return *it_; }

 private:
  std::unique_ptr<kv::Iterator> it_;
};

// Owns the iterator of an exported stream. The consumer may release the
// stream holding the GIL; the last reference to the database's state may go
// with the iterator.
struct StreamIterator {
  std::unique_ptr<kv::Iterator> it;
  ~StreamIterator() {
    std::optional<nb::gil_scoped_release> release;
    if (PyGILState_Check()) release.emplace();
    it.reset();
  }
};

kv::Options MakeOptions(const nb::dict& kw) {
  kv::Options o;
  for (auto [key, value] : kw) {
    std::string name = nb::cast<std::string>(key);
    if (name == "create_if_missing")
      o.create_if_missing = nb::cast<bool>(value);
    else if (name == "read_only")
      o.read_only = nb::cast<bool>(value);
    else if (name == "version")
      o.version = value.is_none() ? 0 : nb::cast<uint64_t>(value);
    else if (name == "tag")
      o.tag = value.is_none() ? "" : nb::cast<std::string>(value);
    else if (name == "storage_options") {
      if (!value.is_none()) o.storage_options = nb::cast<std::map<std::string, std::string>>(value);
    } else if (name == "write_buffer_size")
      o.write_buffer_size = nb::cast<size_t>(value);
    else if (name == "flush_interval")
      o.flush_interval =
          std::chrono::milliseconds(static_cast<int64_t>(nb::cast<double>(value) * 1000));
    else if (name == "max_fragments")
      o.max_fragments = nb::cast<size_t>(value);
    else if (name == "lazy_value_threshold")
      o.lazy_value_threshold = nb::cast<size_t>(value);
    else if (name == "value_cache_size")
      o.value_cache_size = nb::cast<size_t>(value);
    else if (name == "snapshot_min_entries")
      o.snapshot_min_entries = nb::cast<size_t>(value);
    else if (name == "tombstone_grace")
      o.tombstone_grace = std::chrono::seconds(static_cast<int64_t>(nb::cast<double>(value)));
    else if (name == "refresh_interval")
      o.refresh_interval =
          std::chrono::milliseconds(static_cast<int64_t>(nb::cast<double>(value) * 1000));
    else if (name == "version_retention")
      o.version_retention = std::chrono::seconds(static_cast<int64_t>(nb::cast<double>(value)));
    else if (name == "wal_dir")
      o.wal_dir = value.is_none() ? "" : nb::cast<std::string>(value);
    else if (name == "wal_sync")
      o.wal_sync = kv0::ParseWalSync(nb::cast<std::string>(value));
    else if (name == "mark_ttl")
      o.mark_ttl = std::chrono::seconds(static_cast<int64_t>(nb::cast<double>(value)));
    else if (name == "replay_stale_wal")
      o.replay_stale_wal = nb::cast<bool>(value);
    else if (name == "request_timeout")
      o.request_timeout =
          std::chrono::milliseconds(static_cast<int64_t>(nb::cast<double>(value) * 1000));
    else if (name == "request_retries")
      o.request_retries = nb::cast<uint32_t>(value);
    else if (name == "commit_timeout")
      o.commit_timeout =
          std::chrono::milliseconds(static_cast<int64_t>(nb::cast<double>(value) * 1000));
    else
      throw Error(Code::kInvalidArgument, "unknown kv0 option " + name);
  }
  return o;
}

// Batches of (key, value) read through an iterator as the consumer pulls
// them, up to `end` (exclusive).
arrow::OwnedStream ScanStream(DB& db, const std::optional<std::string>& start,
                              const std::optional<std::string>& end) {
  auto holder = std::make_shared<StreamIterator>();
  holder->it = db.NewIterator();
  holder->it->Seek(start.value_or(""));
  arrow::Schema schema = {{"key", arrow::Type::kBinary, false},
                          {"value", arrow::Type::kBinary, false}};
  auto next = [holder, end, schema](ArrowArray* out) -> bool {
    // The consumer may pull holding the GIL (pyarrow from Python does not,
    // others may); reading values can reach Lance.
    std::optional<nb::gil_scoped_release> release;
    if (PyGILState_Check()) release.emplace();
    kv::Iterator& it = *holder->it;
    arrow::BatchBuilder builder(schema);
    for (int n = 0; n < 4096 && it.Valid(); ++n, it.Next()) {
      if (end && it.key() >= *end) break;
      builder.binary(0).Append(it.key());
      builder.binary(1).Append(it.value());
    }
    if (builder.num_rows() == 0) return false;
    builder.Finish(out);
    return true;
  };
  arrow::OwnedStream stream;
  arrow::MakeStream(schema, next, &stream);
  return stream;
}

}  // namespace

void BindKv(nb::module_& m) {
  nb::class_<kv::Options>(m, "_Options",
                          "kv0's options for one handle, from a dict of kv0.DB's keyword "
                          "arguments (converting them reaches nothing but memory).")
      .def("__init__", [](kv::Options* self, const nb::dict& options) {
        new (self) kv::Options(MakeOptions(options));
      });

  nb::class_<PyIterator>(m, "_Iterator")
      .def("valid", [](PyIterator& self) { return self.it().Valid(); })
      .def(
          "seek_to_first", [](PyIterator& self) { self.it().SeekToFirst(); }, kReleaseGil)
      .def(
          "seek_to_last", [](PyIterator& self) { self.it().SeekToLast(); }, kReleaseGil)
      .def(
          "seek", [](PyIterator& self, BytesArg key) { self.it().Seek(key.view); }, "key"_a,
          kReleaseGil)
      .def(
          "seek_for_prev", [](PyIterator& self, BytesArg key) { self.it().SeekForPrev(key.view); },
          "key"_a, kReleaseGil)
      .def(
          "next", [](PyIterator& self) { self.it().Next(); }, kReleaseGil)
      .def(
          "prev", [](PyIterator& self) { self.it().Prev(); }, kReleaseGil)
      .def("key", [](PyIterator& self) { return BytesView{self.it().key()}; })
      // May read the chunk's stored values from Lance.
      .def(
          "value", [](PyIterator& self) { return BytesView{self.it().value()}; }, kReleaseGil);

  auto batch = nb::class_<PyBatch>(m, "WriteBatch", nb::type_slots(BatchSlots()),
                                   "Writes applied atomically by DB.write: all or none.")
                   .def(
                       "__init__",
                       [](PyBatch* self, nb::handle data) {
                         if (!data.is_none()) {
                           throw Error(Code::kNotSupported,
                                       "WriteBatch from serialized RocksDB data is not supported");
                         }
                         new (self) PyBatch();
                       },
                       "data"_a = nb::none());
  SetBatchType(batch.ptr());

  BindCursors(m);

  nb::class_<PyDB>(m, "_DB", nb::type_slots(DbSlots()))
      .def(
          "__init__",
          [](PyDB* self, const std::string& path, const kv::Options& options) {
            new (self) PyDB(DB::Open(path, options));
          },
          "path"_a, "options"_a, kReleaseGil)
      .def(
          "delete_range",
          [](PyDB& self, BytesArg begin, BytesArg end, bool sync, bool disable_wal) {
            self.db().DeleteRange(begin.view, end.view, {.sync = sync, .disable_wal = disable_wal});
          },
          "begin"_a, "end"_a, "sync"_a = false, "disable_wal"_a = false, kReleaseGil)
      .def(
          "key_may_exist", [](PyDB& self, BytesArg key) { return self.db().KeyMayExist(key.view); },
          "key"_a, kReleaseGil)
      // Creating an iterator refreshes the handle.
      .def(
          "_iterator", [](PyDB& self) { return new PyIterator(self.db()); }, nb::keep_alive<0, 1>(),
          kReleaseGil)
      .def(
          "_scan_arrow",
          [](PyDB& self, std::optional<BytesArg> start, std::optional<BytesArg> end) {
            std::optional<std::string> from, to;
            if (start) from.emplace(start->view);
            if (end) to.emplace(end->view);
            return StreamResult{ScanStream(self.db(), from, to)};
          },
          "start"_a = nb::none(), "end"_a = nb::none(), nb::keep_alive<0, 1>(), kReleaseGil)
      .def(
          "flush", [](PyDB& self) { self.db().Flush(); }, kReleaseGil)
      .def(
          "compact_range", [](PyDB& self) { self.db().CompactRange(); }, kReleaseGil)
      .def(
          "refresh", [](PyDB& self) { self.db().Refresh(); }, kReleaseGil)
      .def_prop_ro(
          "version", [](PyDB& self) { return self.db().version(); }, kReleaseGil)
      .def(
          "versions",
          [](PyDB& self) {
            std::vector<std::pair<uint64_t, int64_t>> out;
            for (const auto& v : self.db().Versions()) out.emplace_back(v.version, v.timestamp_us);
            return out;
          },
          kReleaseGil)
      .def(
          "cleanup_old_versions",
          [](PyDB& self, double seconds) {
            return self.db().CleanupOldVersions(
                std::chrono::seconds(static_cast<int64_t>(seconds)));
          },
          "seconds"_a, kReleaseGil)
      .def(
          "create_tag",
          [](PyDB& self, const std::string& tag, uint64_t version) {
            self.db().CreateTag(tag, version);
          },
          "tag"_a, "version"_a = 0, kReleaseGil)
      .def(
          "delete_tag", [](PyDB& self, const std::string& tag) { self.db().DeleteTag(tag); },
          "tag"_a, kReleaseGil)
      .def(
          "tags", [](PyDB& self) { return self.db().Tags(); }, kReleaseGil)
      .def(
          "purge", [](PyDB& self, bool force) { return self.db().Purge(force); }, "force"_a = false,
          kReleaseGil)
      .def(
          "stats", [](PyDB& self) { return self.db().GetStats(); }, kReleaseGil)
      .def_prop_ro(
          "uri", [](PyDB& self) { return self.db().uri(); }, kReleaseGil)
      .def(
          "close", [](PyDB& self) { self.db().Close(); }, kReleaseGil);
}

}  // namespace kv0::python
