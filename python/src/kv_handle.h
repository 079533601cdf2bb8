// The native objects behind kv0.DB and kv0.WriteBatch, shared by the
// nanobind bindings (kv.cc), the fast calls (kv_calls.cc) and the iterators
// (kv_cursor.cc).
#pragma once

#include <nanobind/nanobind.h>

#include <memory>

#include "kv0/kv.h"

namespace kv0::python {

// The native handle. Python's DB derives from it and keeps the aimrocks
// surface.
class PyDB {
 public:
  explicit PyDB(std::unique_ptr<kv::DB> db) : db_(std::move(db)) {}
  // Python destroys an unclosed handle holding the GIL, and closing flushes
  // through Lance.
  ~PyDB() {
    if (db_ && PyGILState_Check()) {
      nanobind::gil_scoped_release release;
      db_.reset();
    }
  }

  kv::DB& db() {
    if (!db_) throw Error(Code::kNotSupported, "the database is closed");
    return *db_;
  }

 private:
  std::unique_ptr<kv::DB> db_;
};

// kv0.WriteBatch. `writing` counts the DB.write calls using it: they run
// without the GIL, so a change to the batch meanwhile is refused.
struct PyBatch {
  kv::WriteBatch batch;
  int writing = 0;
};

// The slots of _DB (get, multi_get, put, delete, write, db[key], key in db)
// and of WriteBatch (every method), as fast calls.
const PyType_Slot* DbSlots();
const PyType_Slot* BatchSlots();
// Records the bound WriteBatch type, which DB.write and BatchOf check for.
void SetBatchType(PyObject* type);

// The native object of a Python object of one of these classes (or of a
// class derived from it), or nullptr with TypeError set when its __init__
// has not run or (BatchOf, AnyDbOf) it is not one. DbOf trusts the type
// (CPython checks `self` of a method); AnyDbOf takes any object.
PyDB* DbOf(PyObject* self);
PyDB* AnyDbOf(PyObject* o);
PyBatch* BatchOf(PyObject* o);

// Binds the iterators, _Cursor and _ReversedCursor (kv_cursor.cc).
void BindCursors(nanobind::module_& m);

}  // namespace kv0::python
