// The iterators kv0.DB hands out (KeysIterator, ValuesIterator,
// ItemsIterator in python/kv0/db.py derive from _Cursor): __next__ is a
// type slot, and items come from a chunk that one native call fills.
//
// A fill releases the GIL once (moving a kv::Iterator may take the view's
// lock or read values from Lance) and copies up to a chunk of entries out of
// the kv::Iterator (a seek fills the first chunk in the same call);
// __next__ then makes each item from the chunk holding the GIL, so only the
// items handed out are made. The first chunk after a seek is small, since most seeks read a few
// entries; each further one doubles, up to kMaxChunk. Positions follow the Python iterator's, never
// the kv::Iterator's, which runs ahead:
//
//   - the next item is slots_[pos_] while pos_ < slots_.size();
//   - past the chunk it is where the kv::Iterator stands, after one more
//     step in dir_ when `step_` (a fill stops on its last entry rather
//     than step past it, which could load a chunk no one asks for).
//
// Turning round inside a chunk seeks the kv::Iterator back to the next
// item's key. Like kv::Iterator, a cursor is not a snapshot.

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "fast_call.h"
#include "kv_handle.h"
#include "util/owner_process.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace kv0::python {
namespace {

class Cursor {
 public:
  enum Mode { kKeys = 0, kValues = 1, kItems = 2 };
  static constexpr size_t kFirstChunk = 16;
  static constexpr size_t kMaxChunk = 256;

  Cursor(kv::DB& db, int mode) : it_(db.NewIterator()), uri_(db.uri()), mode_(mode) {
    if (mode < kKeys || mode > kItems) throw Error(Code::kInvalidArgument, "unknown cursor mode");
  }

  // The seeks: the chunk is refilled from the position sought, in the
  // direction a walk from there usually takes, within the same native call.
  void SeekToFirst() {
    Reset(+1, [&] { it_->SeekToFirst(); });
  }
  void SeekToLast() {
    Reset(-1, [&] { it_->SeekToLast(); });
  }
  void Seek(std::string_view key) {
    Reset(+1, [&] { it_->Seek(key); });
  }
  void SeekForPrev(std::string_view key) {
    Reset(-1, [&] { it_->SeekForPrev(key); });
  }

  // The next item in direction `dir` (+1 forward, -1 backward), moving past
  // it; nullptr with no error set past the end. Makes no item when `make`
  // is false (returns Py_None).
  PyObject* Take(int dir, bool make = true) {
    if (!Ready(dir)) return nullptr;
    const Slot& s = slots_[pos_++];
    if (!make) Py_RETURN_NONE;
    return Item(s);
  }

  // The next item in the direction last taken, without moving; nullptr with
  // no error set past the end.
  PyObject* Peek() {
    if (!Ready(dir_)) return nullptr;
    return Item(slots_[pos_]);
  }

 private:
  struct Slot {
    size_t key;
    uint32_t key_size;
    size_t value;
    uint32_t value_size;
  };

  // Moves the kv::Iterator with `move`, then fills a first chunk in `dir`;
  // releases the GIL once.
  template <class Move>
  void Reset(int dir, Move&& move) {
    owner_.Check("database", uri_);
    slots_.clear();
    bytes_.clear();
    pos_ = 0;
    step_ = false;
    limit_ = kFirstChunk;
    nb::gil_scoped_release release;
    move();
    FillReleased(dir);
  }

  // Makes slots_[pos_] the next item in `dir`; false past the end.
  bool Ready(int dir) {
    owner_.Check("database", uri_);
    if (pos_ < slots_.size() && dir == dir_) return true;
    if (pos_ < slots_.size()) {
      // Turning round: the kv::Iterator goes back to the next item.
      std::string key(Key(slots_[pos_]));
      Reset(dir, [&] {
        if (dir > 0) {
          it_->Seek(key);
        } else {
          it_->SeekForPrev(key);
        }
      });
    } else {
      nb::gil_scoped_release release;
      FillReleased(dir);
    }
    return pos_ < slots_.size();
  }

  // Copies up to limit_ entries, from the next item on in `dir`. Runs
  // without the GIL and touches no Python object.
  void FillReleased(int dir) {
    slots_.clear();
    bytes_.clear();
    pos_ = 0;
    const size_t want = limit_;
    limit_ = std::min(limit_ * 2, kMaxChunk);
    const int behind = step_ ? dir_ : 0;
    dir_ = dir;
    step_ = false;
    if (behind > 0) it_->Next();
    if (behind < 0) it_->Prev();
    while (it_->Valid()) {
      std::string_view key = it_->key();
      Slot s{bytes_.size(), static_cast<uint32_t>(key.size()), 0, 0};
      bytes_.append(key);
      if (mode_ != kKeys) {
        std::string_view value = it_->value();
        s.value = bytes_.size();
        s.value_size = static_cast<uint32_t>(value.size());
        bytes_.append(value);
      }
      slots_.push_back(s);
      if (slots_.size() == want) {
        step_ = true;
        break;
      }
      if (dir > 0) {
        it_->Next();
      } else {
        it_->Prev();
      }
    }
  }

  std::string_view Key(const Slot& s) const { return {bytes_.data() + s.key, s.key_size}; }
  std::string_view Value(const Slot& s) const { return {bytes_.data() + s.value, s.value_size}; }

  PyObject* Item(const Slot& s) const {
    auto bytes = [](std::string_view v) {
      return PyBytes_FromStringAndSize(v.data(), static_cast<Py_ssize_t>(v.size()));
    };
    if (mode_ == kKeys) return bytes(Key(s));
    if (mode_ == kValues) return bytes(Value(s));
    PyObject* k = bytes(Key(s));
    if (k == nullptr) return nullptr;
    PyObject* v = bytes(Value(s));
    if (v == nullptr) {
      Py_DECREF(k);
      return nullptr;
    }
    PyObject* pair = PyTuple_New(2);
    if (pair == nullptr) {
      Py_DECREF(k);
      Py_DECREF(v);
      return nullptr;
    }
    PyTuple_SET_ITEM(pair, 0, k);
    PyTuple_SET_ITEM(pair, 1, v);
    return pair;
  }

  std::unique_ptr<kv::Iterator> it_;
  const std::string uri_;
  const OwnerProcess owner_;
  const int mode_;
  std::string bytes_;  // the chunk's keys and values
  std::vector<Slot> slots_;
  size_t pos_ = 0;
  int dir_ = 1;
  bool step_ = false;
  size_t limit_ = kFirstChunk;
};

// The same position walked backwards (reversed(cursor)).
struct ReversedCursor {
  nb::object base;  // a _Cursor
};

Cursor* CursorOf(PyObject* o) {
  return ReadyInstance<Cursor>(o, "the iterator is not initialised");
}

// tp_iternext returns nullptr without an error at the end.
PyObject* CursorIterNext(PyObject* o) {
  Cursor* c = CursorOf(o);
  if (c == nullptr) return nullptr;
  return Guarded([&]() -> PyObject* { return c->Take(+1); });
}

PyObject* ReversedIterNext(PyObject* o) {
  auto* r = ReadyInstance<ReversedCursor>(o, "the iterator is not initialised");
  Cursor* c = r == nullptr ? nullptr : CursorOf(r->base.ptr());
  if (c == nullptr) return nullptr;
  return Guarded([&]() -> PyObject* { return c->Take(-1); });
}

PyType_Slot cursor_slots[] = {
    {Py_tp_iter, reinterpret_cast<void*>(PyObject_SelfIter)},
    {Py_tp_iternext, reinterpret_cast<void*>(CursorIterNext)},
    {0, nullptr},
};

PyType_Slot reversed_slots[] = {
    {Py_tp_iter, reinterpret_cast<void*>(PyObject_SelfIter)},
    {Py_tp_iternext, reinterpret_cast<void*>(ReversedIterNext)},
    {0, nullptr},
};

nb::object Got(PyObject* item) {
  if (item == nullptr) {
    if (PyErr_Occurred()) throw nb::python_error();
    return nb::none();
  }
  return nb::steal(item);
}

}  // namespace

void BindCursors(nb::module_& m) {
  nb::class_<Cursor>(m, "_Cursor", nb::type_slots(cursor_slots),
                     "An iterator over a kv0.DB in key order; unpositioned until a seek. "
                     "Iterating yields from the current position on.")
      .def(
          "__init__",
          [](Cursor* self, nb::handle db, int mode) {
            PyDB* native = AnyDbOf(db.ptr());
            if (native == nullptr) throw nb::python_error();
            kv::DB& handle = native->db();
            nb::gil_scoped_release release;  // creating an iterator refreshes the handle
            new (self) Cursor(handle, mode);
          },
          "db"_a, "mode"_a)
      .def("seek_to_first", &Cursor::SeekToFirst)
      .def("seek_to_last", &Cursor::SeekToLast)
      .def(
          "seek",
          [](Cursor& c, nb::handle key) {
            Bytes k;
            if (!ToKey(key.ptr(), &k)) throw nb::python_error();
            c.Seek(k.view);
          },
          "key"_a)
      .def(
          "seek_for_prev",
          [](Cursor& c, nb::handle key) {
            Bytes k;
            if (!ToKey(key.ptr(), &k)) throw nb::python_error();
            c.SeekForPrev(k.view);
          },
          "key"_a)
      .def(
          "get",
          [](Cursor& c) {
            nb::object item = Got(c.Peek());
            if (item.is_none()) throw nb::value_error("the iterator is not positioned at an entry");
            return item;
          },
          "The current item, without moving; ValueError past the end.")
      .def(
          "next", [](Cursor& c) { return Got(c.Take(+1)); },
          "The current item, then moves forward; None past the end.")
      .def(
          "skip", [](Cursor& c) { Got(c.Take(+1, false)); }, "Moves forward without reading.")
      .def(
          "__reversed__", [](nb::handle self) { return ReversedCursor{nb::borrow(self)}; },
          "The same position, walked backwards.");

  nb::class_<ReversedCursor>(m, "_ReversedCursor", nb::type_slots(reversed_slots))
      .def("seek_to_first", [](ReversedCursor& r) { nb::cast<Cursor&>(r.base).SeekToFirst(); })
      .def("seek_to_last", [](ReversedCursor& r) { nb::cast<Cursor&>(r.base).SeekToLast(); })
      .def(
          "seek", [](ReversedCursor& r, nb::handle key) { r.base.attr("seek")(key); }, "key"_a)
      .def(
          "seek_for_prev",
          [](ReversedCursor& r, nb::handle key) { r.base.attr("seek_for_prev")(key); }, "key"_a)
      .def("get", [](ReversedCursor& r) { return r.base.attr("get")(); })
      .def("__reversed__", [](ReversedCursor& r) { return r.base; });
}

}  // namespace kv0::python
