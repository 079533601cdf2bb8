// kv0.DB's hot calls and kv0.WriteBatch, as CPython fast calls.
//
// A read answered from memory keeps the GIL: DB::TryGet takes the view's
// lock only if it is free and gives up on a value that stays in Lance, and
// only then is the GIL released for Get (gil_free.h: no thread may wait on
// kv0 or Lance holding it). Writes always release it: a write may wait for a
// flush when the buffer is full.

#include <optional>
#include <string>
#include <vector>

#include "fast_call.h"
#include "kv_handle.h"

namespace nb = nanobind;

namespace kv0::python {
namespace {

PyTypeObject* batch_type = nullptr;  // set by BatchSlots' type when bound

PyObject* NewBytes(std::string_view v) {
  return PyBytes_FromStringAndSize(v.data(), static_cast<Py_ssize_t>(v.size()));
}

// The value of `key` as a new reference, None when absent.
PyObject* Lookup(PyDB* self, const Bytes& key) {
  kv::DB& db = self->db();
  PyObject* value = nullptr;
  switch (db.TryGet(key.view, [&](std::string_view v) { value = NewBytes(v); })) {
    case kv::DB::Probe::kFound:
      return value;  // nullptr with MemoryError set if it could not be made
    case kv::DB::Probe::kAbsent:
      Py_RETURN_NONE;
    case kv::DB::Probe::kWouldWait:
      break;
  }
  std::optional<std::string> got;
  {
    nb::gil_scoped_release release;
    got = db.Get(key.view);
  }
  if (!got) Py_RETURN_NONE;
  return NewBytes(*got);
}

bool RejectSnapshot(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (kwnames == nullptr) return true;
  for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(kwnames); ++k) {
    const char* name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, k));
    if (name == nullptr) return false;
    if (std::string_view(name) == "snapshot" && args[nargs + k] != Py_None) {
      Raise(Code::kNotSupported, "kv0 has no snapshots; open a version instead");
      return false;
    }
  }
  return true;
}

// get(key, *args, **kwargs): the value or None. Other arguments are
// aimrocks' read options, accepted and ignored, except a snapshot.
PyObject* DbGet(PyObject* o, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return Guarded([&]() -> PyObject* {
    static const Params kParams("get", {"key"});
    PyDB* self = DbOf(o);
    PyObject* a[1];
    if (self == nullptr || !BindArgs(kParams, args, nargs, kwnames, 1, a, true) ||
        !RejectSnapshot(args, nargs, kwnames)) {
      return nullptr;
    }
    Bytes key;
    if (!ToKey(a[0], &key)) return nullptr;
    return Lookup(self, key);
  });
}

// multi_get(keys, *args, **kwargs): {key: value or None}, keyed by the
// objects given.
PyObject* DbMultiGet(PyObject* o, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return Guarded([&]() -> PyObject* {
    static const Params kParams("multi_get", {"keys"});
    PyDB* self = DbOf(o);
    PyObject* a[1];
    if (self == nullptr || !BindArgs(kParams, args, nargs, kwnames, 1, a, true) ||
        !RejectSnapshot(args, nargs, kwnames)) {
      return nullptr;
    }
    nb::object seq = nb::steal(PySequence_Fast(a[0], "multi_get takes an iterable of keys"));
    if (!seq.is_valid()) return nullptr;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq.ptr());
    PyObject** items = PySequence_Fast_ITEMS(seq.ptr());
    std::vector<Bytes> keys(static_cast<size_t>(n));  // never resized: views point into them
    std::vector<std::string_view> views(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
      if (!ToKey(items[i], &keys[i])) return nullptr;
      views[i] = keys[i].view;
    }
    kv::DB& db = self->db();
    std::vector<nb::object> values(static_cast<size_t>(n));
    bool made = true;
    auto found = [&](size_t i, std::string_view v) {
      values[i] = nb::steal(NewBytes(v));
      made = made && values[i].is_valid();
    };
    if (db.TryMultiGet(views, found) == kv::DB::Probe::kWouldWait) {
      for (auto& v : values) v.reset();
      std::vector<std::optional<std::string>> got;
      {
        nb::gil_scoped_release release;
        got = db.MultiGet(views);
      }
      made = true;
      for (size_t i = 0; i < got.size(); ++i) {
        if (got[i]) found(i, *got[i]);
      }
    }
    if (!made) return nullptr;
    nb::dict out;
    for (Py_ssize_t i = 0; i < n; ++i) {
      nb::handle v = values[i].is_valid() ? values[i] : nb::none();
      if (PyDict_SetItem(out.ptr(), items[i], v.ptr()) != 0) return nullptr;
    }
    return out.release().ptr();
  });
}

// db[key]: the value, KeyError when absent.
PyObject* DbSubscript(PyObject* o, PyObject* k) {
  return Guarded([&]() -> PyObject* {
    PyDB* self = DbOf(o);
    Bytes key;
    if (self == nullptr || !ToKey(k, &key)) return nullptr;
    PyObject* value = Lookup(self, key);
    if (value == Py_None) {
      Py_DECREF(value);
      PyErr_SetObject(PyExc_KeyError, k);
      return nullptr;
    }
    return value;
  });
}

// key in db.
int DbContains(PyObject* o, PyObject* k) {
  PyObject* answer = Guarded([&]() -> PyObject* {
    PyDB* self = DbOf(o);
    Bytes key;
    if (self == nullptr || !ToKey(k, &key)) return nullptr;
    kv::DB& db = self->db();
    bool present = false;
    switch (db.TryGet(key.view, [](std::string_view) {})) {
      case kv::DB::Probe::kFound:
        present = true;
        break;
      case kv::DB::Probe::kAbsent:
        break;
      case kv::DB::Probe::kWouldWait: {
        nb::gil_scoped_release release;
        present = db.KeyMayExist(key.view);  // exact: the view holds every key
        break;
      }
    }
    return nb::bool_(present).release().ptr();
  });
  if (answer == nullptr) return -1;
  int result = answer == Py_True;
  Py_DECREF(answer);
  return result;
}

// The write options of put, delete and write; false with an error set.
bool WriteFlags(PyObject* sync, PyObject* disable_wal, kv::WriteOptions* out) {
  int s = Flag(sync), d = Flag(disable_wal);
  if (s < 0 || d < 0) return false;
  out->sync = s != 0;
  out->disable_wal = d != 0;
  return true;
}

// put(key, value, sync=False, disable_wal=False, column_family=None)
PyObject* DbPut(PyObject* o, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return Guarded([&]() -> PyObject* {
    static const Params kParams("put", {"key", "value", "sync", "disable_wal", "column_family"});
    PyDB* self = DbOf(o);
    PyObject* a[5];
    kv::WriteOptions options;
    if (self == nullptr || !BindArgs(kParams, args, nargs, kwnames, 2, a) || !CheckFamily(a[4]) ||
        !WriteFlags(a[2], a[3], &options)) {
      return nullptr;
    }
    Bytes key, value;
    if (!ToKey(a[0], &key) || !ToBytes(a[1], "value", &value)) return nullptr;
    kv::DB& db = self->db();
    {
      nb::gil_scoped_release release;
      db.Put(key.view, value.view, options);
    }
    Py_RETURN_NONE;
  });
}

// delete(key, sync=False, disable_wal=False, column_family=None)
PyObject* DbDelete(PyObject* o, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return Guarded([&]() -> PyObject* {
    static const Params kParams("delete", {"key", "sync", "disable_wal", "column_family"});
    PyDB* self = DbOf(o);
    PyObject* a[4];
    kv::WriteOptions options;
    if (self == nullptr || !BindArgs(kParams, args, nargs, kwnames, 1, a) || !CheckFamily(a[3]) ||
        !WriteFlags(a[1], a[2], &options)) {
      return nullptr;
    }
    Bytes key;
    if (!ToKey(a[0], &key)) return nullptr;
    kv::DB& db = self->db();
    {
      nb::gil_scoped_release release;
      db.Delete(key.view, options);
    }
    Py_RETURN_NONE;
  });
}

// write(batch, sync=False, disable_wal=False)
PyObject* DbWrite(PyObject* o, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return Guarded([&]() -> PyObject* {
    static const Params kParams("write", {"batch", "sync", "disable_wal"});
    PyDB* self = DbOf(o);
    PyObject* a[3];
    kv::WriteOptions options;
    if (self == nullptr || !BindArgs(kParams, args, nargs, kwnames, 1, a) ||
        !WriteFlags(a[1], a[2], &options)) {
      return nullptr;
    }
    if (!PyObject_TypeCheck(a[0], batch_type)) {
      PyErr_SetString(PyExc_TypeError, "write takes a kv0.WriteBatch");
      return nullptr;
    }
    PyBatch* batch = BatchOf(a[0]);
    if (batch == nullptr) return nullptr;
    kv::DB& db = self->db();
    nb::object keep = nb::borrow(a[0]);
    ++batch->writing;
    try {
      nb::gil_scoped_release release;
      db.Write(batch->batch, options);
    } catch (...) {
      --batch->writing;
      throw;
    }
    --batch->writing;
    Py_RETURN_NONE;
  });
}

PyMethodDef db_methods[] = {
    {"get", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(DbGet)),
     METH_FASTCALL | METH_KEYWORDS,
     "get(key, *args, **kwargs): the value of key, or None. Read options are accepted and "
     "ignored; a snapshot raises NotSupported."},
    {"multi_get", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(DbMultiGet)),
     METH_FASTCALL | METH_KEYWORDS,
     "multi_get(keys, *args, **kwargs): {key: value or None} for every key given."},
    {"put", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(DbPut)),
     METH_FASTCALL | METH_KEYWORDS,
     "put(key, value, sync=False, disable_wal=False, column_family=None)"},
    {"delete", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(DbDelete)),
     METH_FASTCALL | METH_KEYWORDS,
     "delete(key, sync=False, disable_wal=False, column_family=None)"},
    {"write", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(DbWrite)),
     METH_FASTCALL | METH_KEYWORDS,
     "write(batch, sync=False, disable_wal=False): applies a WriteBatch atomically."},
    {nullptr, nullptr, 0, nullptr},
};

PyType_Slot db_slots[] = {
    {Py_tp_methods, db_methods},
    {Py_mp_subscript, reinterpret_cast<void*>(DbSubscript)},
    {Py_sq_contains, reinterpret_cast<void*>(DbContains)},
    {0, nullptr},
};

// --- WriteBatch --------------------------------------------------------------------

PyBatch* MutableBatch(PyObject* o) {
  PyBatch* b = BatchOf(o);
  if (b != nullptr && b->writing > 0) {
    Raise(Code::kInvalidArgument, "the WriteBatch is being written by another thread");
    return nullptr;
  }
  return b;
}

// put(key, value)
PyObject* BatchPut(PyObject* o, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return Guarded([&]() -> PyObject* {
    static const Params kParams("put", {"key", "value"});
    PyBatch* b = MutableBatch(o);
    PyObject* a[2];
    Bytes key, value;
    if (b == nullptr || !BindArgs(kParams, args, nargs, kwnames, 2, a) || !ToKey(a[0], &key) ||
        !ToBytes(a[1], "value", &value)) {
      return nullptr;
    }
    b->batch.Put(key.view, value.view);
    Py_RETURN_NONE;
  });
}

// delete(key)
PyObject* BatchDelete(PyObject* o, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return Guarded([&]() -> PyObject* {
    static const Params kParams("delete", {"key"});
    PyBatch* b = MutableBatch(o);
    PyObject* a[1];
    Bytes key;
    if (b == nullptr || !BindArgs(kParams, args, nargs, kwnames, 1, a) || !ToKey(a[0], &key)) {
      return nullptr;
    }
    b->batch.Delete(key.view);
    Py_RETURN_NONE;
  });
}

// delete_range(begin, end) or delete_range((begin, end))
PyObject* BatchDeleteRange(PyObject* o, PyObject* const* args, Py_ssize_t nargs,
                           PyObject* kwnames) {
  return Guarded([&]() -> PyObject* {
    static const Params kParams("delete_range", {"begin", "end"});
    PyBatch* b = MutableBatch(o);
    PyObject* a[2];
    if (b == nullptr || !BindArgs(kParams, args, nargs, kwnames, 1, a)) {
      return nullptr;
    }
    PyObject* begin = a[0];
    PyObject* end = a[1];
    if ((end == nullptr || end == Py_None) && PyTuple_Check(begin) &&
        PyTuple_GET_SIZE(begin) == 2) {
      end = PyTuple_GET_ITEM(begin, 1);
      begin = PyTuple_GET_ITEM(begin, 0);
    }
    if (end == nullptr) end = Py_None;
    Bytes from, to;
    if (!ToKey(begin, &from) || !ToKey(end, &to)) return nullptr;
    b->batch.DeleteRange(from.view, to.view);
    Py_RETURN_NONE;
  });
}

PyObject* BatchMerge(PyObject*, PyObject* const*, Py_ssize_t, PyObject*) {
  return Raise(Code::kNotSupported, "kv0 has no merge operators");
}

PyObject* BatchClear(PyObject* o, PyObject*) {
  PyBatch* b = MutableBatch(o);
  if (b == nullptr) return nullptr;
  b->batch.Clear();
  Py_RETURN_NONE;
}

PyObject* BatchCount(PyObject* o, PyObject*) {
  PyBatch* b = BatchOf(o);
  if (b == nullptr) return nullptr;
  return PyLong_FromSize_t(b->batch.Count());
}

Py_ssize_t BatchLength(PyObject* o) {
  PyBatch* b = BatchOf(o);
  if (b == nullptr) return -1;
  return static_cast<Py_ssize_t>(b->batch.Count());
}

// iter(batch): ("Put", key, value), ("Delete", key, None) and
// ("DeleteRange", begin, end), of the operations it holds now.
PyObject* BatchIter(PyObject* o) {
  return Guarded([&]() -> PyObject* {
    PyBatch* b = BatchOf(o);
    if (b == nullptr) return nullptr;
    const auto& ops = b->batch.ops();
    nb::list out;
    for (const auto& op : ops) {
      switch (op.kind) {
        case kv::WriteBatch::Kind::kPut:
          out.append(nb::make_tuple("Put", nb::bytes(op.key.data(), op.key.size()),
                                    nb::bytes(op.value.data(), op.value.size())));
          break;
        case kv::WriteBatch::Kind::kDelete:
          out.append(nb::make_tuple("Delete", nb::bytes(op.key.data(), op.key.size()), nb::none()));
          break;
        case kv::WriteBatch::Kind::kDeleteRange:
          out.append(nb::make_tuple("DeleteRange", nb::bytes(op.key.data(), op.key.size()),
                                    nb::bytes(op.value.data(), op.value.size())));
          break;
      }
    }
    return PyObject_GetIter(out.ptr());
  });
}

PyMethodDef batch_methods[] = {
    {"put", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(BatchPut)),
     METH_FASTCALL | METH_KEYWORDS, "put(key, value)"},
    {"delete", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(BatchDelete)),
     METH_FASTCALL | METH_KEYWORDS, "delete(key)"},
    {"delete_range", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(BatchDeleteRange)),
     METH_FASTCALL | METH_KEYWORDS,
     "delete_range(begin, end): deletes every key in [begin, end); also takes one (begin, end) "
     "tuple."},
    {"merge", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(BatchMerge)),
     METH_FASTCALL | METH_KEYWORDS, "Raises NotSupported: kv0 has no merge operators."},
    {"clear", BatchClear, METH_NOARGS, "Removes every operation."},
    {"count", BatchCount, METH_NOARGS, "The number of operations."},
    {nullptr, nullptr, 0, nullptr},
};

PyType_Slot batch_slots[] = {
    {Py_tp_methods, batch_methods},
    {Py_sq_length, reinterpret_cast<void*>(BatchLength)},
    {Py_tp_iter, reinterpret_cast<void*>(BatchIter)},
    {0, nullptr},
};

}  // namespace

const PyType_Slot* DbSlots() { return db_slots; }
const PyType_Slot* BatchSlots() { return batch_slots; }

void SetBatchType(PyObject* type) { batch_type = reinterpret_cast<PyTypeObject*>(type); }

PyDB* DbOf(PyObject* self) {
  return ReadyInstance<PyDB>(self, "the kv0.DB is not initialised (its __init__ did not run)");
}

PyDB* AnyDbOf(PyObject* o) {
  if (!nb::isinstance<PyDB>(nb::handle(o))) {
    PyErr_Format(PyExc_TypeError, "a kv0.DB is needed, not %s", Py_TYPE(o)->tp_name);
    return nullptr;
  }
  return DbOf(o);
}

PyBatch* BatchOf(PyObject* o) {
  constexpr const char* kMessage = "not an initialised kv0.WriteBatch";
  if (batch_type == nullptr || !PyObject_TypeCheck(o, batch_type)) {
    PyErr_SetString(PyExc_TypeError, kMessage);
    return nullptr;
  }
  return ReadyInstance<PyBatch>(o, kMessage);
}

}  // namespace kv0::python
