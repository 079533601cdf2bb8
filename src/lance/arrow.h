// Builders and readers for the Arrow C Data Interface, for exactly the column
// types kv0 exchanges with the Lance library. No Arrow library is used.
//
// Ownership follows the C Data Interface: whoever holds a struct whose release
// callback is set owns it and must call release exactly once. Moving a struct
// is a bitwise copy followed by clearing release in the source. The Owned*
// classes do this bookkeeping.
//
// Nothing here is thread-safe; distinct objects may be used on distinct threads.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kv0/arrow_c.h"
#include "kv0/error.h"

namespace kv0::arrow {

// The column types kv0 uses, with their Arrow format strings:
//   kUInt8 "C", kUInt32 "I", kUInt64 "L", kInt64 "l", kFloat64 "g", kBool "b",
//   kBinary "z", kUtf8 "u" (both with 32-bit offsets),
//   kListUtf8 "+l" (one child field "item" of format "u"),
//   kTimestampUs "tsu:UTC" (int64 microseconds since the Unix epoch).
enum class Type {
  kUInt8,
  kUInt32,
  kUInt64,
  kInt64,
  kFloat64,
  kBool,
  kBinary,
  kUtf8,
  kListUtf8,
  kTimestampUs,
};

// A short name such as "uint64", for messages.
std::string_view TypeName(Type type);

struct Field {
  std::string name;
  Type type;
  bool nullable = true;
  // Exported as the field's Arrow metadata; Lance reads its encoding hints
  // ("lance-encoding:...") from here when a dataset is created.
  std::map<std::string, std::string> metadata = {};
};
using Schema = std::vector<Field>;

// Owns one C Data Interface struct. The destructor calls its release callback
// if set. An empty owner (release == nullptr) may be handed to a producer as
// get(), to be filled in; handing over a non-empty one leaks. Move-only.
template <typename T>
class Owned {
 public:
  Owned() = default;
  // Takes over *raw and marks it released, so its previous holder is done.
  explicit Owned(T* raw) : raw_(*raw) { raw->release = nullptr; }
  Owned(Owned&& other) noexcept : raw_(other.raw_) { other.raw_.release = nullptr; }
  Owned& operator=(Owned&& other) noexcept {
    if (this != &other) {
      reset();
      raw_ = other.raw_;
      other.raw_.release = nullptr;
    }
    return *this;
  }
  ~Owned() { reset(); }

  T* get() { return &raw_; }
  const T* get() const { return &raw_; }
  T* operator->() { return &raw_; }
  const T* operator->() const { return &raw_; }
  explicit operator bool() const { return raw_.release != nullptr; }

  // Hands the struct to the caller, who must release it. This becomes empty.
  T release() {
    T out = raw_;
    raw_.release = nullptr;
    return out;
  }
  // Releases the struct now, if set.
  void reset() {
    if (raw_.release != nullptr) raw_.release(&raw_);
    raw_ = T{};
  }

 private:
  T raw_{};
};
using OwnedSchema = Owned<ArrowSchema>;
using OwnedArray = Owned<ArrowArray>;
using OwnedStream = Owned<ArrowArrayStream>;

// Fills *out with a struct schema ("+s") with one child per field, in order,
// each flagged ARROW_FLAG_NULLABLE if the field is nullable. The caller owns
// *out.
void ExportSchema(const Schema& schema, ArrowSchema* out);

// ---------------------------------------------------------------------------
// Builders. Each column builder accumulates rows until Finish, which exports
// them as an array in *out (owned by the caller from then on) and leaves the
// builder empty for the next batch. Exported arrays share no memory with the
// builder. A validity bitmap is exported only if a null was appended.

class ColumnBuilder {
 public:
  virtual ~ColumnBuilder() = default;

  virtual Type type() const = 0;
  int64_t size() const { return length_; }
  int64_t null_count() const { return null_count_; }
  virtual void AppendNull() = 0;
  virtual void Finish(ArrowArray* out) = 0;

 protected:
  using Buffer = std::vector<uint8_t>;

  // Appends the bytes of value to *buffer. Buffers come from operator new, so
  // they are 16-byte aligned, which every type here needs at most.
  // (A resize and a copy: a range insert of a few bytes is not inlined; a
  // flush's per-row appends through it were about a tenth of Track's samples
  // when Track waited for that flush.)
  template <typename T>
  static void Put(Buffer* buffer, T value) {
    const size_t used = buffer->size();
    buffer->resize(used + sizeof(T));
    std::memcpy(buffer->data() + used, &value, sizeof(T));
  }
  // Counts n valid rows.
  void AppendValid(size_t n) {
    if (null_count_ == 0) {
      length_ += static_cast<int64_t>(n);
    } else {
      AppendValidities(n, nullptr);
    }
  }
  // Counts n rows, row i valid if valid[i] is not 0 (all valid if valid is
  // null), setting the bitmap's bits in one pass.
  void AppendValidities(size_t n, const uint8_t* valid);
  // Counts one row and records whether it is valid. Inline for the common
  // case of a column with no nulls so far, which keeps no bitmap.
  void AppendValidity(bool valid) {
    if (valid && null_count_ == 0) {
      length_++;
    } else {
      AppendValiditySlow(valid);
    }
  }
  // Returns the validity bitmap (empty if there are no nulls) and starts over
  // at zero rows. Call it after reading size() and null_count().
  Buffer TakeValidity();

 private:
  void AppendValiditySlow(bool valid);
  // Writes out the bitmap of the rows so far, all valid, before a first null.
  void StartBitmap();

  Buffer validity_;  // allocated at the first null; until then all are valid
  int64_t length_ = 0;
  int64_t null_count_ = 0;
};

// Fixed-width values (Arrow buffers {validity, values}).
template <typename T, Type kType>
class FixedWidthBuilder final : public ColumnBuilder {
 public:
  Type type() const override { return kType; }
  void Append(T value) {
    Put(&values_, value);
    AppendValidity(true);
  }
  // Appends every value of `values`, none null, in one copy.
  void Append(std::span<const T> values) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(values.data());
    values_.insert(values_.end(), bytes, bytes + values.size_bytes());
    AppendValid(values.size());
  }
  void AppendNull() override {
    Put(&values_, T{});
    AppendValidity(false);
  }
  // Appends values[i] for each i, null where valid[i] is 0 (its value is
  // still copied, and ignored by readers). `valid` is as long as `values`,
  // or empty: none null.
  void Append(std::span<const T> values, std::span<const uint8_t> valid) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(values.data());
    values_.insert(values_.end(), bytes, bytes + values.size_bytes());
    AppendValidities(values.size(), valid.data());
  }
  // Appends values[i] for each i of `rows`, in that order, null where
  // valid[i] is 0 (`valid` empty: none null); gathered straight into the
  // column, without a reordered copy first.
  void AppendRows(std::span<const T> values, std::span<const uint8_t> valid,
                  std::span<const uint32_t> rows) {
    const size_t used = values_.size();
    values_.resize(used + rows.size() * sizeof(T));
    uint8_t* out = values_.data() + used;
    for (size_t k = 0; k < rows.size(); ++k) {
      std::memcpy(out + k * sizeof(T), &values[rows[k]], sizeof(T));
    }
    if (valid.empty()) {
      AppendValid(rows.size());
      return;
    }
    std::vector<uint8_t> picked(rows.size());
    for (size_t k = 0; k < rows.size(); ++k) picked[k] = valid[rows[k]];
    AppendValidities(rows.size(), picked.data());
  }
  void Finish(ArrowArray* out) override;

 private:
  Buffer values_;
};
using UInt8Builder = FixedWidthBuilder<uint8_t, Type::kUInt8>;
using UInt32Builder = FixedWidthBuilder<uint32_t, Type::kUInt32>;
using UInt64Builder = FixedWidthBuilder<uint64_t, Type::kUInt64>;
using Int64Builder = FixedWidthBuilder<int64_t, Type::kInt64>;
using Float64Builder = FixedWidthBuilder<double, Type::kFloat64>;
using TimestampBuilder = FixedWidthBuilder<int64_t, Type::kTimestampUs>;  // micros

// Booleans, bit-packed.
class BoolBuilder final : public ColumnBuilder {
 public:
  Type type() const override { return Type::kBool; }
  void Append(bool value);
  void AppendNull() override;
  void Finish(ArrowArray* out) override;

 private:
  Buffer values_;
};

// Byte strings with 32-bit offsets (buffers {validity, offsets, data}).
// Append throws InvalidArgument, leaving the builder unchanged, if the batch's
// bytes in this column would exceed 2^31-1 or, for Utf8Builder, if value is not
// valid UTF-8 (which the Rust side assumes without checking).
template <Type kType>
class VarBinaryBuilder final : public ColumnBuilder {
 public:
  VarBinaryBuilder();
  Type type() const override { return kType; }
  void Append(std::string_view value);
  void AppendNull() override;
  void AppendNulls(size_t n);
  void Finish(ArrowArray* out) override;
  // Bytes appended since the last Finish.
  int64_t data_size() const { return static_cast<int64_t>(data_.size()); }

 private:
  Buffer offsets_;  // int32, one more than size()
  Buffer data_;
};
using BinaryBuilder = VarBinaryBuilder<Type::kBinary>;
using Utf8Builder = VarBinaryBuilder<Type::kUtf8>;

// Lists of non-null UTF-8 strings. Append throws like Utf8Builder::Append,
// leaving the builder unchanged. The exported child is named "item" and, as
// is customary for Arrow lists, flagged nullable though it holds no nulls.
class ListUtf8Builder final : public ColumnBuilder {
 public:
  ListUtf8Builder();
  Type type() const override { return Type::kListUtf8; }
  void Append(std::span<const std::string_view> items);
  void Append(std::initializer_list<std::string_view> items) {
    Append(std::span<const std::string_view>(items.begin(), items.size()));
  }
  void AppendNull() override;
  void Finish(ArrowArray* out) override;

 private:
  Buffer offsets_;       // int32, one more than size()
  BinaryBuilder items_;  // same layout as utf8; Append validates the text
};

// Builds record batches of one schema: one column builder per field. Append
// the same number of rows to every column, then Finish.
class BatchBuilder {
 public:
  explicit BatchBuilder(Schema schema);

  const Schema& schema() const { return schema_; }

  // The builder of column i. The typed accessors throw InvalidArgument if i is
  // out of range or field i has another type.
  ColumnBuilder& column(size_t i);
  UInt8Builder& uint8(size_t i);
  UInt32Builder& uint32(size_t i);
  UInt64Builder& uint64(size_t i);
  Int64Builder& int64(size_t i);
  Float64Builder& float64(size_t i);
  BoolBuilder& boolean(size_t i);
  BinaryBuilder& binary(size_t i);
  Utf8Builder& utf8(size_t i);
  ListUtf8Builder& list_utf8(size_t i);
  TimestampBuilder& timestamp(size_t i);

  // Rows in the first column (0 if there are no columns).
  int64_t num_rows() const;

  // Exports the rows appended since the last Finish as a struct array ("+s",
  // length = rows, one child per field, no nulls of its own) in *out, which
  // the caller then owns, and empties the builder. Throws InvalidArgument, and
  // exports nothing and keeps the rows, if the columns have different lengths
  // or a non-nullable field has a null.
  void Finish(ArrowArray* out);

 private:
  template <typename B>
  B& Typed(size_t i, Type type);

  Schema schema_;
  std::vector<std::unique_ptr<ColumnBuilder>> columns_;
};

// ---------------------------------------------------------------------------
// Streams.

// Fills *out (released first if set) with a stream of struct arrays of
// schema that hands out batches in order, then end of stream. Batches not
// handed out are released with the stream.
void MakeStream(Schema schema, std::vector<OwnedArray> batches, OwnedStream* out);
// A stream of the one batch `builder` holds (schema is the builder's).
OwnedStream OneBatch(const Schema& schema, BatchBuilder& builder);

// Generator form. Each get_next calls next(out): next either fills *out,
// which the consumer then owns, and returns true, or returns false at the end
// without touching *out; it is not called again after that. If next throws,
// get_next fails with EINVAL for kv0 InvalidArgument, ENOMEM for bad_alloc
// and EIO otherwise, and get_last_error returns the exception's message.
void MakeStream(Schema schema, std::function<bool(ArrowArray* out)> next, OwnedStream* out);

// ---------------------------------------------------------------------------
// Readers.

// One record batch received over the C Data Interface: a struct array and the
// struct schema describing it, shared by the batches of a stream. The Batch
// owns the array and releases it exactly once, when destroyed. Column views
// point into the Batch and must not outlive it.
class Batch {
 public:
  // Takes ownership of array (released even if this throws). Throws
  // InvalidArgument if either is released, the schema is not a struct, the
  // array's children do not match the schema's, or the batch has null rows.
  Batch(std::shared_ptr<const OwnedSchema> schema, OwnedArray array);

  int64_t num_rows() const { return array_->length; }
  int num_columns() const { return static_cast<int>(schema_->get()->n_children); }
  std::string_view column_name(int i) const;

  // The index of the column called name: FindColumn returns -1 if there is
  // none, Column throws InvalidArgument naming it.
  int FindColumn(std::string_view name) const;
  int Column(std::string_view name) const;

  const ArrowSchema& schema() const { return *schema_->get(); }
  const ArrowArray& array() const { return *array_.get(); }
  // Hands the array on (to another stream, say); the batch is empty after,
  // and its column views must not be used.
  OwnedArray Release() && { return std::move(array_); }

 private:
  std::shared_ptr<const OwnedSchema> schema_;
  OwnedArray array_;
};

// What every typed column view has: its rows and their validity. A view's
// constructor takes a column index or name and throws InvalidArgument if there
// is no such column or its Arrow format does not match the view
// ("column X has type F, expected T"). Row indexes are not checked: i must be
// in [0, size()).
class ColumnView {
 public:
  int64_t size() const { return length_; }
  bool is_null(int64_t i) const { return validity_ != nullptr && !Bit(validity_, offset_ + i); }

 protected:
  ColumnView(const Batch& batch, int index, Type type);

  static bool Bit(const void* bits, int64_t i) {
    return (static_cast<const uint8_t*>(bits)[i >> 3] >> (i & 7)) & 1;
  }
  // memcpy because buffers from other producers need not be aligned.
  template <typename T>
  static T Load(const void* values, int64_t i) {
    T value;
    std::memcpy(&value, static_cast<const char*>(values) + i * sizeof(T), sizeof(T));
    return value;
  }
  static int64_t Offset(const void* offsets, bool large, int64_t i) {
    return large ? Load<int64_t>(offsets, i) : Load<int32_t>(offsets, i);
  }
  // Reads entry i of a variable-length column (offsets and data buffers).
  static std::string_view String(const void* offsets, bool large, const void* data, int64_t i) {
    int64_t begin = Offset(offsets, large, i);
    return {static_cast<const char*>(data) + begin,
            static_cast<size_t>(Offset(offsets, large, i + 1) - begin)};
  }

  const ArrowArray* array_;
  std::string_view format_;
  int64_t offset_;        // position of row 0 in the buffers
  int64_t length_;        // rows, as in the batch
  const void* validity_;  // null when there are no nulls
};

// Fixed-width values. A null row's value is unspecified (kv0 stores 0).
template <typename T, Type kType>
class FixedWidthColumn : public ColumnView {
 public:
  FixedWidthColumn(const Batch& batch, int index)
      : ColumnView(batch, index, kType), values_(array_->buffers[1]) {}
  FixedWidthColumn(const Batch& batch, std::string_view name)
      : FixedWidthColumn(batch, batch.Column(name)) {}

  T value(int64_t i) const { return Load<T>(values_, offset_ + i); }

 private:
  const void* values_;
};
using UInt8Column = FixedWidthColumn<uint8_t, Type::kUInt8>;
using UInt32Column = FixedWidthColumn<uint32_t, Type::kUInt32>;
using UInt64Column = FixedWidthColumn<uint64_t, Type::kUInt64>;
using Int64Column = FixedWidthColumn<int64_t, Type::kInt64>;
using Float64Column = FixedWidthColumn<double, Type::kFloat64>;
using TimestampColumn = FixedWidthColumn<int64_t, Type::kTimestampUs>;  // "tsu:" any zone

class BoolColumn : public ColumnView {
 public:
  BoolColumn(const Batch& batch, int index)
      : ColumnView(batch, index, Type::kBool), values_(array_->buffers[1]) {}
  BoolColumn(const Batch& batch, std::string_view name) : BoolColumn(batch, batch.Column(name)) {}

  bool value(int64_t i) const { return Bit(values_, offset_ + i); }

 private:
  const void* values_;
};

// Variable-length values with 32- or 64-bit offsets. BinaryColumn accepts
// "z", "Z", "u" and "U"; Utf8Column only "u" and "U". value(i) points into the
// batch and is empty for a null row.
template <Type kType>
class VarBinaryColumn : public ColumnView {
 public:
  VarBinaryColumn(const Batch& batch, int index)
      : ColumnView(batch, index, kType),
        offsets_(array_->buffers[1]),
        data_(array_->buffers[2]),
        large_(format_ == "Z" || format_ == "U") {}
  VarBinaryColumn(const Batch& batch, std::string_view name)
      : VarBinaryColumn(batch, batch.Column(name)) {}

  std::string_view value(int64_t i) const {
    return is_null(i) ? std::string_view() : String(offsets_, large_, data_, offset_ + i);
  }

 private:
  const void* offsets_;
  const void* data_;
  bool large_;
};
using BinaryColumn = VarBinaryColumn<Type::kBinary>;
using Utf8Column = VarBinaryColumn<Type::kUtf8>;

// Lists of strings: "+l" or "+L" whose child is "u" or "U". A null row reads
// as an empty list, a null item as an empty string. Items point into the batch.
class ListUtf8Column : public ColumnView {
 public:
  ListUtf8Column(const Batch& batch, int index);
  ListUtf8Column(const Batch& batch, std::string_view name)
      : ListUtf8Column(batch, batch.Column(name)) {}

  using ColumnView::size;
  int64_t size(int64_t i) const;  // items in row i
  std::vector<std::string_view> value(int64_t i) const;

 private:
  const void* offsets_;
  bool large_;
  const ArrowArray* items_;
  int64_t items_offset_;
  bool items_large_;
};

// Reads record batches from a stream, typically one the Lance library filled.
class StreamReader {
 public:
  // Takes ownership of stream and reads its schema. Throws IOError if
  // get_schema fails, InvalidArgument if the stream is released or its schema
  // is not a struct.
  explicit StreamReader(OwnedStream stream);

  const std::shared_ptr<const OwnedSchema>& schema() const { return schema_; }

  // The next batch, or nullopt at end of stream. Throws IOError with the
  // message from get_last_error if the stream fails.
  std::optional<Batch> Next();

 private:
  OwnedStream stream_;
  std::shared_ptr<const OwnedSchema> schema_;
};

extern template class FixedWidthBuilder<uint8_t, Type::kUInt8>;
extern template class FixedWidthBuilder<uint32_t, Type::kUInt32>;
extern template class FixedWidthBuilder<uint64_t, Type::kUInt64>;
extern template class FixedWidthBuilder<int64_t, Type::kInt64>;
extern template class FixedWidthBuilder<double, Type::kFloat64>;
extern template class FixedWidthBuilder<int64_t, Type::kTimestampUs>;
extern template class VarBinaryBuilder<Type::kBinary>;
extern template class VarBinaryBuilder<Type::kUtf8>;

}  // namespace kv0::arrow
