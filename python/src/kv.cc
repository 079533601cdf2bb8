// Python bindings of kv0::kv: the native _DB, _WriteBatch and _Iterator
// that kv0.DB and friends (python/kv0/db.py) build on.
//
// Every call that can wait on a kv0 lock, on I/O or on Lance's runtime
// releases the GIL; Lance's log callback takes it back only to log.

#include "kv0/kv.h"

#include <nanobind/nanobind.h>
#include <nanobind/stl/chrono.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "arrow_capsule.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace kv0::python {
namespace {

using kv::DB;
using kv::WriteBatch;

// Keys and values are bytes; str is refused with a clear message, so code
// does not silently store text in some encoding.
std::string_view Bytes(nb::handle obj, const char* what) {
  if (nb::isinstance<nb::bytes>(obj)) {
    nb::bytes b = nb::borrow<nb::bytes>(obj);
    return {b.c_str(), b.size()};
  }
  throw nb::type_error(
      (std::string(what) + " must be bytes, not " + nb::type_name(obj.type()).c_str()).c_str());
}

nb::bytes ToBytes(std::string_view s) { return nb::bytes(s.data(), s.size()); }

// The native handle. Python's DB wraps it and keeps the aimrocks surface.
class PyDB {
 public:
  explicit PyDB(std::unique_ptr<DB> db) : db_(std::move(db)) {}

  DB& db() {
    if (!db_) throw Error(Code::kNotSupported, "the database is closed");
    return *db_;
  }
  std::shared_ptr<void> keepalive;

  void Close() {
    if (!db_) return;
    nb::gil_scoped_release release;
    db_->Close();
  }

 private:
  std::unique_ptr<DB> db_;
};

// A native iterator; it keeps its database's handle alive.
class PyIterator {
 public:
  explicit PyIterator(DB& db) : it_(db.NewIterator()) {}

  bool Valid() const { return it_->Valid(); }
  void SeekToFirst() {
    nb::gil_scoped_release release;
    it_->SeekToFirst();
  }
  void SeekToLast() {
    nb::gil_scoped_release release;
    it_->SeekToLast();
  }
  void Seek(nb::handle key) {
    std::string_view k = Bytes(key, "key");
    nb::gil_scoped_release release;
    it_->Seek(k);
  }
  void SeekForPrev(nb::handle key) {
    std::string_view k = Bytes(key, "key");
    nb::gil_scoped_release release;
    it_->SeekForPrev(k);
  }
  void Next() {
    nb::gil_scoped_release release;
    it_->Next();
  }
  void Prev() {
    nb::gil_scoped_release release;
    it_->Prev();
  }
  nb::bytes Key() { return ToBytes(it_->key()); }
  nb::bytes Value() {
    std::string_view v;
    {
      nb::gil_scoped_release release;
      v = it_->value();
    }
    return ToBytes(v);
  }

 private:
  std::unique_ptr<kv::Iterator> it_;
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
    else
      throw Error(Code::kInvalidArgument, "unknown kv0 option " + name);
  }
  return o;
}

}  // namespace

void BindKv(nb::module_& m) {
  nb::class_<PyIterator>(m, "_Iterator")
      .def("valid", &PyIterator::Valid)
      .def("seek_to_first", &PyIterator::SeekToFirst)
      .def("seek_to_last", &PyIterator::SeekToLast)
      .def("seek", &PyIterator::Seek)
      .def("seek_for_prev", &PyIterator::SeekForPrev)
      .def("next", &PyIterator::Next)
      .def("prev", &PyIterator::Prev)
      .def("key", &PyIterator::Key)
      .def("value", &PyIterator::Value);

  nb::class_<PyDB>(m, "_DB")
      .def(
          "__init__",
          [](PyDB* self, const std::string& path, nb::kwargs kw) {
            kv::Options options = MakeOptions(kw);
            std::unique_ptr<DB> db;
            {
              nb::gil_scoped_release release;
              db = DB::Open(path, options);
            }
            new (self) PyDB(std::move(db));
          },
          "path"_a, "kwargs"_a)
      .def(
          "put",
          [](PyDB& self, nb::handle key, nb::handle value, bool sync, bool disable_wal) {
            std::string_view k = Bytes(key, "key"), v = Bytes(value, "value");
            DB& db = self.db();
            nb::gil_scoped_release release;
            db.Put(k, v, {.sync = sync, .disable_wal = disable_wal});
          },
          "key"_a, "value"_a, "sync"_a = false, "disable_wal"_a = false)
      .def(
          "delete",
          [](PyDB& self, nb::handle key, bool sync, bool disable_wal) {
            std::string_view k = Bytes(key, "key");
            DB& db = self.db();
            nb::gil_scoped_release release;
            db.Delete(k, {.sync = sync, .disable_wal = disable_wal});
          },
          "key"_a, "sync"_a = false, "disable_wal"_a = false)
      .def(
          "delete_range",
          [](PyDB& self, nb::handle begin, nb::handle end, bool sync, bool disable_wal) {
            std::string_view b = Bytes(begin, "begin"), e = Bytes(end, "end");
            DB& db = self.db();
            nb::gil_scoped_release release;
            db.DeleteRange(b, e, {.sync = sync, .disable_wal = disable_wal});
          },
          "begin"_a, "end"_a, "sync"_a = false, "disable_wal"_a = false)
      .def(
          "write",
          [](PyDB& self, nb::list ops, bool sync, bool disable_wal) {
            // ops: (kind, key, value) with kind 0 put, 1 delete, 2 delete range.
            WriteBatch batch;
            for (nb::handle item : ops) {
              nb::tuple t = nb::borrow<nb::tuple>(item);
              int kind = nb::cast<int>(t[0]);
              std::string_view k = Bytes(t[1], "key");
              if (kind == 0)
                batch.Put(k, Bytes(t[2], "value"));
              else if (kind == 1)
                batch.Delete(k);
              else
                batch.DeleteRange(k, Bytes(t[2], "end"));
            }
            DB& db = self.db();
            nb::gil_scoped_release release;
            db.Write(batch, {.sync = sync, .disable_wal = disable_wal});
          },
          "ops"_a, "sync"_a = false, "disable_wal"_a = false)
      .def("get",
           [](PyDB& self, nb::handle key) -> nb::object {
             std::string_view k = Bytes(key, "key");
             DB& db = self.db();
             std::optional<std::string> v;
             {
               nb::gil_scoped_release release;
               v = db.Get(k);
             }
             if (!v) return nb::none();
             return ToBytes(*v);
           })
      .def("multi_get",
           [](PyDB& self, nb::list keys) {
             std::vector<std::string_view> ks;
             for (nb::handle k : keys) ks.push_back(Bytes(k, "key"));
             DB& db = self.db();
             std::vector<std::optional<std::string>> values;
             {
               nb::gil_scoped_release release;
               values = db.MultiGet(ks);
             }
             nb::list out;
             for (auto& v : values) out.append(v ? nb::object(ToBytes(*v)) : nb::none());
             return out;
           })
      .def("key_may_exist",
           [](PyDB& self, nb::handle key) {
             std::string_view k = Bytes(key, "key");
             DB& db = self.db();
             nb::gil_scoped_release release;
             return db.KeyMayExist(k);
           })
      .def(
          "_iterator", [](PyDB& self) { return new PyIterator(self.db()); }, nb::keep_alive<0, 1>())
      .def(
          "_scan_arrow",
          [](PyDB& self, std::optional<nb::bytes> start, std::optional<nb::bytes> end) {
            // Batches of (key, value) read through an iterator as the consumer
            // pulls them; the consumer may run without the GIL.
            auto it = std::shared_ptr<kv::Iterator>(self.db().NewIterator());
            std::optional<std::string> stop;
            if (end) stop = std::string(end->c_str(), end->size());
            {
              std::string first = start ? std::string(start->c_str(), start->size()) : "";
              nb::gil_scoped_release release;
              it->Seek(first);
            }
            arrow::Schema schema = {{"key", arrow::Type::kBinary, false},
                                    {"value", arrow::Type::kBinary, false}};
            auto next = [it, stop, schema](ArrowArray* out) -> bool {
              arrow::BatchBuilder builder(schema);
              for (int n = 0; n < 4096 && it->Valid(); ++n, it->Next()) {
                if (stop && it->key() >= *stop) break;
                builder.binary(0).Append(it->key());
                builder.binary(1).Append(it->value());
              }
              if (builder.num_rows() == 0) return false;
              builder.Finish(out);
              return true;
            };
            arrow::OwnedStream stream;
            arrow::MakeStream(schema, next, &stream);
            return ExportStream(std::move(stream));
          },
          "start"_a = nb::none(), "end"_a = nb::none(), nb::keep_alive<0, 1>())
      .def("flush",
           [](PyDB& self) {
             DB& db = self.db();
             nb::gil_scoped_release release;
             db.Flush();
           })
      .def("compact_range",
           [](PyDB& self) {
             DB& db = self.db();
             nb::gil_scoped_release release;
             db.CompactRange();
           })
      .def("refresh",
           [](PyDB& self) {
             DB& db = self.db();
             nb::gil_scoped_release release;
             db.Refresh();
           })
      .def_prop_ro("version", [](PyDB& self) { return self.db().version(); })
      .def("versions",
           [](PyDB& self) {
             DB& db = self.db();
             std::vector<kv::VersionInfo> versions;
             {
               nb::gil_scoped_release release;
               versions = db.Versions();
             }
             std::vector<std::pair<uint64_t, int64_t>> out;
             for (const auto& v : versions) out.emplace_back(v.version, v.timestamp_us);
             return out;
           })
      .def("cleanup_old_versions",
           [](PyDB& self, double seconds) {
             DB& db = self.db();
             nb::gil_scoped_release release;
             return db.CleanupOldVersions(std::chrono::seconds(static_cast<int64_t>(seconds)));
           })
      .def(
          "create_tag",
          [](PyDB& self, const std::string& tag, uint64_t version) {
            DB& db = self.db();
            nb::gil_scoped_release release;
            db.CreateTag(tag, version);
          },
          "tag"_a, "version"_a = 0)
      .def("delete_tag",
           [](PyDB& self, const std::string& tag) {
             DB& db = self.db();
             nb::gil_scoped_release release;
             db.DeleteTag(tag);
           })
      .def("tags",
           [](PyDB& self) {
             DB& db = self.db();
             nb::gil_scoped_release release;
             return db.Tags();
           })
      .def(
          "purge",
          [](PyDB& self, bool force) {
            DB::PurgeStats s;
            {
              DB& db = self.db();
              nb::gil_scoped_release release;
              s = db.Purge(force);
            }
            nb::dict d;
            d["versions_removed"] = s.versions_removed;
            d["bytes_removed"] = s.bytes_removed;
            d["tags_deleted"] = s.tags_deleted;
            return d;
          },
          "force"_a = false)
      .def("stats",
           [](PyDB& self) {
             kv::Stats s;
             {
               DB& db = self.db();
               nb::gil_scoped_release release;
               s = db.GetStats();
             }
             nb::dict d;
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
             d["opened_from_snapshot"] = s.opened_from_snapshot;
             return d;
           })
      .def_prop_ro("uri", [](PyDB& self) { return self.db().uri(); })
      .def("close", &PyDB::Close);
}

}  // namespace kv0::python
