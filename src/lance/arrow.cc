#include "lance/arrow.h"

#include <algorithm>
#include <cerrno>
#include <limits>
#include <new>
#include <utility>

#include "kv0/error.h"
#include "util/utf8.h"

namespace kv0::arrow {
namespace {

using Buffer = std::vector<uint8_t>;

// 32-bit offsets address at most this many bytes (or items) per column.
constexpr size_t kMaxOffset = std::numeric_limits<int32_t>::max();

// Empty offsets or values buffers point here rather than at null, which the
// specification allows but some consumers mishandle.
alignas(64) constexpr uint8_t kEmpty[64] = {};

struct TypeInfo {
  const char* name;
  const char* format;  // as exported
  int64_t n_buffers;
};
// Indexed by Type, in declaration order.
constexpr TypeInfo kTypes[] = {
    {"uint8", "C", 2},       {"uint32", "I", 2},
    {"uint64", "L", 2},      {"int64", "l", 2},
    {"float64", "g", 2},     {"bool", "b", 2},
    {"binary", "z", 3},      {"utf8", "u", 3},
    {"list<utf8>", "+l", 2}, {"timestamp[us]", "tsu:UTC", 2},
};
const TypeInfo& Info(Type type) { return kTypes[static_cast<int>(type)]; }

// Whether an imported column of this format can be read as type.
bool Accepts(Type type, std::string_view format) {
  switch (type) {
    case Type::kBinary:
      return format == "z" || format == "Z" || format == "u" || format == "U";
    case Type::kUtf8:
      return format == "u" || format == "U";
    case Type::kListUtf8:
      return format == "+l" || format == "+L";
    case Type::kTimestampUs:
      return format.starts_with("tsu:");
    default:
      return format == Info(type).format;
  }
}

std::string Quote(std::string_view s) { return "\"" + std::string(s) + "\""; }

void AppendBit(Buffer* bits, int64_t i, bool value) {
  if (i % 8 == 0) bits->push_back(0);
  if (value) bits->back() |= static_cast<uint8_t>(1u << (i % 8));
}

void CheckFits(size_t used, size_t more) {
  if (more > kMaxOffset - used) {
    throw Error(Code::kInvalidArgument, "appending " + std::to_string(more) +
                                            " bytes to a column holding " + std::to_string(used) +
                                            " would pass the 2^31-1 bytes a batch column can hold");
  }
}

void CheckUtf8(std::string_view s) {
  size_t bad = FindInvalidUtf8(s);
  if (bad != std::string_view::npos) {
    throw Error(Code::kInvalidArgument,
                "utf8 value has an invalid byte sequence at byte " + std::to_string(bad));
  }
}

// private_data of an exported array: the memory its pointers refer to.
struct ArrayData {
  int64_t length = 0;
  int64_t null_count = 0;
  std::vector<Buffer> buffers;  // buffers[0] is the validity bitmap, empty if no nulls
  std::vector<const void*> pointers;
  std::vector<ArrowArray> children;  // released here unless a consumer moved them out
  std::vector<ArrowArray*> child_pointers;

  ~ArrayData() {
    for (ArrowArray& child : children) {
      if (child.release != nullptr) child.release(&child);
    }
  }
};

void ReleaseArray(ArrowArray* array) {
  delete static_cast<ArrayData*>(array->private_data);
  array->release = nullptr;
}

void Export(std::unique_ptr<ArrayData> data, ArrowArray* out) {
  for (size_t i = 0; i < data->buffers.size(); i++) {
    const Buffer& b = data->buffers[i];
    data->pointers.push_back(!b.empty() ? b.data() : i == 0 ? nullptr : kEmpty);
  }
  for (ArrowArray& child : data->children) data->child_pointers.push_back(&child);
  *out = ArrowArray{};
  out->length = data->length;
  out->null_count = data->null_count;
  out->n_buffers = static_cast<int64_t>(data->pointers.size());
  out->n_children = static_cast<int64_t>(data->child_pointers.size());
  out->buffers = data->pointers.data();
  out->children = data->child_pointers.empty() ? nullptr : data->child_pointers.data();
  out->release = ReleaseArray;
  out->private_data = data.release();
}

// private_data of an exported schema node.
struct SchemaData {
  std::string format;
  std::string name;
  std::string metadata;  // the C Data Interface's encoding; empty for none
  std::vector<ArrowSchema> children;
  std::vector<ArrowSchema*> child_pointers;

  ~SchemaData() {
    for (ArrowSchema& child : children) {
      if (child.release != nullptr) child.release(&child);
    }
  }
};

void ReleaseSchema(ArrowSchema* schema) {
  delete static_cast<SchemaData*>(schema->private_data);
  schema->release = nullptr;
}

void Export(std::unique_ptr<SchemaData> data, bool nullable, ArrowSchema* out) {
  for (ArrowSchema& child : data->children) data->child_pointers.push_back(&child);
  *out = ArrowSchema{};
  out->format = data->format.c_str();
  out->name = data->name.c_str();
  out->metadata = data->metadata.empty() ? nullptr : data->metadata.data();
  out->flags = nullable ? ARROW_FLAG_NULLABLE : 0;
  out->n_children = static_cast<int64_t>(data->child_pointers.size());
  out->children = data->child_pointers.empty() ? nullptr : data->child_pointers.data();
  out->release = ReleaseSchema;
  out->private_data = data.release();
}

// Key-value pairs as the C Data Interface lays them out: a count, then each
// key and value prefixed by its length, all int32 in native byte order.
std::string EncodeMetadata(const std::map<std::string, std::string>& metadata) {
  if (metadata.empty()) return {};
  std::string out;
  auto put_int = [&](size_t n) {
    int32_t v = static_cast<int32_t>(n);
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
  };
  put_int(metadata.size());
  for (const auto& [key, value] : metadata) {
    put_int(key.size());
    out += key;
    put_int(value.size());
    out += value;
  }
  return out;
}

void ExportField(const Field& field, ArrowSchema* out) {
  auto data = std::make_unique<SchemaData>();
  data->format = Info(field.type).format;
  data->name = field.name;
  data->metadata = EncodeMetadata(field.metadata);
  if (field.type == Type::kListUtf8) {
    data->children.resize(1);
    ExportField({"item", Type::kUtf8, true}, &data->children[0]);
  }
  Export(std::move(data), field.nullable, out);
}

void CheckStructSchema(const OwnedSchema* schema) {
  if (schema == nullptr || !*schema) throw Error(Code::kInvalidArgument, "schema is released");
  if (std::string_view((*schema)->format) != "+s") {
    throw Error(Code::kInvalidArgument,
                "batch schema has type " + Quote((*schema)->format) + ", expected a struct");
  }
}

}  // namespace

std::string_view TypeName(Type type) { return Info(type).name; }

void ExportSchema(const Schema& schema, ArrowSchema* out) {
  auto data = std::make_unique<SchemaData>();
  data->format = "+s";
  data->children.resize(schema.size());
  for (size_t i = 0; i < schema.size(); i++) {
    ExportField(schema[i], &data->children[i]);
  }
  Export(std::move(data), false, out);
}

// ---------------------------------------------------------------------------
// Builders.

void ColumnBuilder::StartBitmap() {
  validity_.assign(length_ / 8, 0xFF);
  if (length_ % 8 != 0) validity_.push_back(static_cast<uint8_t>((1u << (length_ % 8)) - 1));
}

void ColumnBuilder::AppendValiditySlow(bool valid) {
  if (!valid && null_count_ == 0) StartBitmap();
  if (!valid || null_count_ > 0) AppendBit(&validity_, length_, valid);
  length_++;
  if (!valid) null_count_++;
}

void ColumnBuilder::AppendValidities(size_t n, const uint8_t* valid) {
  const size_t nulls = valid == nullptr ? 0 : static_cast<size_t>(std::count(valid, valid + n, 0));
  if (nulls == 0 && null_count_ == 0) {
    length_ += static_cast<int64_t>(n);
    return;
  }
  if (null_count_ == 0) StartBitmap();
  // Bits past the last row are 0 (AppendBit and StartBitmap leave them so).
  const auto first = static_cast<size_t>(length_);
  validity_.resize((first + n + 7) / 8, 0);
  for (size_t i = 0; i < n; ++i) {
    if (valid == nullptr || valid[i] != 0) {
      validity_[(first + i) / 8] |= static_cast<uint8_t>(1u << ((first + i) % 8));
    }
  }
  length_ += static_cast<int64_t>(n);
  null_count_ += static_cast<int64_t>(nulls);
}

ColumnBuilder::Buffer ColumnBuilder::TakeValidity() {
  length_ = 0;
  null_count_ = 0;
  return std::exchange(validity_, {});
}

template <typename T, Type kType>
void FixedWidthBuilder<T, kType>::Finish(ArrowArray* out) {
  auto data = std::make_unique<ArrayData>();
  data->length = size();
  data->null_count = null_count();
  data->buffers.push_back(TakeValidity());
  data->buffers.push_back(std::exchange(values_, {}));
  Export(std::move(data), out);
}

template class FixedWidthBuilder<uint8_t, Type::kUInt8>;
template class FixedWidthBuilder<uint32_t, Type::kUInt32>;
template class FixedWidthBuilder<uint64_t, Type::kUInt64>;
template class FixedWidthBuilder<int64_t, Type::kInt64>;
template class FixedWidthBuilder<double, Type::kFloat64>;
template class FixedWidthBuilder<int64_t, Type::kTimestampUs>;

void BoolBuilder::Append(bool value) {
  AppendBit(&values_, size(), value);
  AppendValidity(true);
}

void BoolBuilder::AppendNull() {
  AppendBit(&values_, size(), false);
  AppendValidity(false);
}

void BoolBuilder::Finish(ArrowArray* out) {
  auto data = std::make_unique<ArrayData>();
  data->length = size();
  data->null_count = null_count();
  data->buffers.push_back(TakeValidity());
  data->buffers.push_back(std::exchange(values_, {}));
  Export(std::move(data), out);
}

template <Type kType>
VarBinaryBuilder<kType>::VarBinaryBuilder() {
  Put(&offsets_, int32_t{0});
}

template <Type kType>
void VarBinaryBuilder<kType>::Append(std::string_view value) {
  CheckFits(data_.size(), value.size());
  if constexpr (kType == Type::kUtf8) CheckUtf8(value);
  auto bytes = reinterpret_cast<const uint8_t*>(value.data());
  data_.insert(data_.end(), bytes, bytes + value.size());
  Put(&offsets_, static_cast<int32_t>(data_.size()));
  AppendValidity(true);
}

template <Type kType>
void VarBinaryBuilder<kType>::AppendNull() {
  Put(&offsets_, static_cast<int32_t>(data_.size()));
  AppendValidity(false);
}

template <Type kType>
void VarBinaryBuilder<kType>::AppendNulls(size_t n) {
  const auto end = static_cast<int32_t>(data_.size());
  for (size_t i = 0; i < n; ++i) Put(&offsets_, end);
  std::vector<uint8_t> none(n, 0);
  AppendValidities(n, none.data());
}

template <Type kType>
void VarBinaryBuilder<kType>::Finish(ArrowArray* out) {
  auto data = std::make_unique<ArrayData>();
  data->length = size();
  data->null_count = null_count();
  data->buffers.push_back(TakeValidity());
  data->buffers.push_back(std::exchange(offsets_, {}));
  data->buffers.push_back(std::exchange(data_, {}));
  Put(&offsets_, int32_t{0});
  Export(std::move(data), out);
}

template class VarBinaryBuilder<Type::kBinary>;
template class VarBinaryBuilder<Type::kUtf8>;

ListUtf8Builder::ListUtf8Builder() { Put(&offsets_, int32_t{0}); }

void ListUtf8Builder::Append(std::span<const std::string_view> items) {
  // Check everything first so that a bad item leaves no partial list behind.
  if (items.size() > kMaxOffset - static_cast<size_t>(items_.size())) {
    throw Error(Code::kInvalidArgument, "a list<utf8> column would pass 2^31-1 items");
  }
  size_t bytes = 0;
  for (std::string_view item : items) bytes += item.size();
  CheckFits(static_cast<size_t>(items_.data_size()), bytes);
  for (std::string_view item : items) CheckUtf8(item);
  for (std::string_view item : items) items_.Append(item);
  Put(&offsets_, static_cast<int32_t>(items_.size()));
  AppendValidity(true);
}

void ListUtf8Builder::AppendNull() {
  Put(&offsets_, static_cast<int32_t>(items_.size()));
  AppendValidity(false);
}

void ListUtf8Builder::Finish(ArrowArray* out) {
  auto data = std::make_unique<ArrayData>();
  data->length = size();
  data->null_count = null_count();
  data->buffers.push_back(TakeValidity());
  data->buffers.push_back(std::exchange(offsets_, {}));
  Put(&offsets_, int32_t{0});
  data->children.resize(1);
  items_.Finish(&data->children[0]);
  Export(std::move(data), out);
}

namespace {

std::unique_ptr<ColumnBuilder> NewColumnBuilder(Type type) {
  switch (type) {
    case Type::kUInt8:
      return std::make_unique<UInt8Builder>();
    case Type::kUInt32:
      return std::make_unique<UInt32Builder>();
    case Type::kUInt64:
      return std::make_unique<UInt64Builder>();
    case Type::kInt64:
      return std::make_unique<Int64Builder>();
    case Type::kFloat64:
      return std::make_unique<Float64Builder>();
    case Type::kBool:
      return std::make_unique<BoolBuilder>();
    case Type::kBinary:
      return std::make_unique<BinaryBuilder>();
    case Type::kUtf8:
      return std::make_unique<Utf8Builder>();
    case Type::kListUtf8:
      return std::make_unique<ListUtf8Builder>();
    case Type::kTimestampUs:
      return std::make_unique<TimestampBuilder>();
  }
  throw Error(Code::kInvalidArgument,
              "unknown column type " + std::to_string(static_cast<int>(type)));
}

}  // namespace

BatchBuilder::BatchBuilder(Schema schema) : schema_(std::move(schema)) {
  for (const Field& field : schema_) columns_.push_back(NewColumnBuilder(field.type));
}

ColumnBuilder& BatchBuilder::column(size_t i) {
  if (i >= columns_.size()) {
    throw Error(Code::kInvalidArgument, "column index " + std::to_string(i) + " is out of range (" +
                                            std::to_string(columns_.size()) + " columns)");
  }
  return *columns_[i];
}

template <typename B>
B& BatchBuilder::Typed(size_t i, Type type) {
  ColumnBuilder& builder = column(i);
  if (builder.type() != type) {
    throw Error(Code::kInvalidArgument, "column " + Quote(schema_[i].name) + " is " +
                                            std::string(TypeName(builder.type())) + ", not " +
                                            std::string(TypeName(type)));
  }
  return static_cast<B&>(builder);
}

UInt8Builder& BatchBuilder::uint8(size_t i) { return Typed<UInt8Builder>(i, Type::kUInt8); }
UInt32Builder& BatchBuilder::uint32(size_t i) { return Typed<UInt32Builder>(i, Type::kUInt32); }
UInt64Builder& BatchBuilder::uint64(size_t i) { return Typed<UInt64Builder>(i, Type::kUInt64); }
Int64Builder& BatchBuilder::int64(size_t i) { return Typed<Int64Builder>(i, Type::kInt64); }
Float64Builder& BatchBuilder::float64(size_t i) { return Typed<Float64Builder>(i, Type::kFloat64); }
BoolBuilder& BatchBuilder::boolean(size_t i) { return Typed<BoolBuilder>(i, Type::kBool); }
BinaryBuilder& BatchBuilder::binary(size_t i) { return Typed<BinaryBuilder>(i, Type::kBinary); }
Utf8Builder& BatchBuilder::utf8(size_t i) { return Typed<Utf8Builder>(i, Type::kUtf8); }
ListUtf8Builder& BatchBuilder::list_utf8(size_t i) {
  return Typed<ListUtf8Builder>(i, Type::kListUtf8);
}
TimestampBuilder& BatchBuilder::timestamp(size_t i) {
  return Typed<TimestampBuilder>(i, Type::kTimestampUs);
}

int64_t BatchBuilder::num_rows() const { return columns_.empty() ? 0 : columns_[0]->size(); }

void BatchBuilder::Finish(ArrowArray* out) {
  const int64_t rows = num_rows();
  for (size_t i = 0; i < columns_.size(); i++) {
    const Field& field = schema_[i];
    if (columns_[i]->size() != rows) {
      throw Error(Code::kInvalidArgument, "column " + Quote(field.name) + " has " +
                                              std::to_string(columns_[i]->size()) +
                                              " rows but column " + Quote(schema_[0].name) +
                                              " has " + std::to_string(rows));
    }
    if (!field.nullable && columns_[i]->null_count() > 0) {
      throw Error(Code::kInvalidArgument,
                  "column " + Quote(field.name) + " is not nullable but has a null");
    }
  }
  auto data = std::make_unique<ArrayData>();
  data->length = rows;
  data->buffers.emplace_back();  // a batch has no null rows
  data->children.resize(columns_.size());
  for (size_t i = 0; i < columns_.size(); i++) columns_[i]->Finish(&data->children[i]);
  Export(std::move(data), out);
}

// ---------------------------------------------------------------------------
// Streams.

namespace {

struct StreamData {
  Schema schema;
  std::function<bool(ArrowArray*)> next;
  bool done = false;
  std::string error;
};

StreamData* Data(ArrowArrayStream* stream) {
  return static_cast<StreamData*>(stream->private_data);
}

// Runs f, turning an exception (which must not cross the C boundary) into an
// errno value and a message for get_last_error.
template <typename F>
int Guard(StreamData* data, F f) {
  try {
    f();
    return 0;
  } catch (const Error& e) {
    data->error = e.what();
    return e.code() == Code::kInvalidArgument ? EINVAL : EIO;
  } catch (const std::bad_alloc& e) {
    data->error = e.what();
    return ENOMEM;
  } catch (const std::exception& e) {
    data->error = e.what();
    return EIO;
  } catch (...) {
    data->error = "unknown exception";
    return EIO;
  }
}

int StreamGetSchema(ArrowArrayStream* stream, ArrowSchema* out) {
  StreamData* data = Data(stream);
  return Guard(data, [&] { ExportSchema(data->schema, out); });
}

int StreamGetNext(ArrowArrayStream* stream, ArrowArray* out) {
  StreamData* data = Data(stream);
  *out = ArrowArray{};  // released: end of stream unless next fills it
  int rc = Guard(data, [&] {
    if (!data->done && !data->next(out)) data->done = true;
  });
  if (rc != 0 && out->release != nullptr) out->release(out);  // filled, then threw
  return rc;
}

const char* StreamGetLastError(ArrowArrayStream* stream) {
  StreamData* data = Data(stream);
  return data->error.empty() ? nullptr : data->error.c_str();
}

void StreamRelease(ArrowArrayStream* stream) {
  delete Data(stream);
  stream->release = nullptr;
}

}  // namespace

void MakeStream(Schema schema, std::function<bool(ArrowArray* out)> next, OwnedStream* out) {
  auto data = std::make_unique<StreamData>();
  data->schema = std::move(schema);
  data->next = std::move(next);
  out->reset();
  ArrowArrayStream* stream = out->get();
  stream->get_schema = StreamGetSchema;
  stream->get_next = StreamGetNext;
  stream->get_last_error = StreamGetLastError;
  stream->release = StreamRelease;
  stream->private_data = data.release();
}

OwnedStream OneBatch(const Schema& schema, BatchBuilder& builder) {
  std::vector<OwnedArray> batches(1);
  builder.Finish(batches[0].get());
  OwnedStream stream;
  MakeStream(schema, std::move(batches), &stream);
  return stream;
}

void MakeStream(Schema schema, std::vector<OwnedArray> batches, OwnedStream* out) {
  // std::function must be copyable, so the move-only batches live behind a shared_ptr.
  auto pending = std::make_shared<std::vector<OwnedArray>>(std::move(batches));
  MakeStream(
      std::move(schema),
      [pending, i = size_t{0}](ArrowArray* array) mutable {
        if (i == pending->size()) return false;
        *array = (*pending)[i++].release();
        return true;
      },
      out);
}

// ---------------------------------------------------------------------------
// Readers.

Batch::Batch(std::shared_ptr<const OwnedSchema> schema, OwnedArray array)
    : schema_(std::move(schema)), array_(std::move(array)) {
  CheckStructSchema(schema_.get());
  if (!array_) throw Error(Code::kInvalidArgument, "batch array is released");
  if (array_->n_children != schema_->get()->n_children) {
    throw Error(Code::kInvalidArgument, "batch array has " + std::to_string(array_->n_children) +
                                            " columns but its schema has " +
                                            std::to_string(schema_->get()->n_children));
  }
  if (array_->null_count > 0) throw Error(Code::kInvalidArgument, "batch has null rows");
}

std::string_view Batch::column_name(int i) const {
  const char* name = schema_->get()->children[i]->name;
  return name != nullptr ? name : "";
}

int Batch::FindColumn(std::string_view name) const {
  for (int i = 0; i < num_columns(); i++) {
    if (column_name(i) == name) return i;
  }
  return -1;
}

int Batch::Column(std::string_view name) const {
  int i = FindColumn(name);
  if (i < 0) throw Error(Code::kInvalidArgument, "batch has no column " + Quote(name));
  return i;
}

ColumnView::ColumnView(const Batch& batch, int index, Type type) {
  if (index < 0 || index >= batch.num_columns()) {
    throw Error(Code::kInvalidArgument, "column index " + std::to_string(index) +
                                            " is out of range (" +
                                            std::to_string(batch.num_columns()) + " columns)");
  }
  const std::string name = Quote(batch.column_name(index));
  array_ = batch.array().children[index];
  format_ = batch.schema().children[index]->format;
  if (!Accepts(type, format_)) {
    throw Error(Code::kInvalidArgument, "column " + name + " has type " + Quote(format_) +
                                            ", expected " + std::string(TypeName(type)));
  }
  if (array_->n_buffers != Info(type).n_buffers) {
    throw Error(Code::kInvalidArgument,
                "column " + name + " has " + std::to_string(array_->n_buffers) + " buffers");
  }
  // A struct's offset applies to its children on top of their own.
  const ArrowArray& parent = batch.array();
  if (array_->length < parent.offset + parent.length) {
    throw Error(Code::kInvalidArgument, "column " + name + " is shorter than its batch");
  }
  offset_ = parent.offset + array_->offset;
  length_ = parent.length;
  validity_ = array_->null_count != 0 ? array_->buffers[0] : nullptr;
}

ListUtf8Column::ListUtf8Column(const Batch& batch, int index)
    : ColumnView(batch, index, Type::kListUtf8), offsets_(array_->buffers[1]) {
  const ArrowSchema* field = batch.schema().children[index];
  if (field->n_children != 1 || array_->n_children != 1 ||
      !Accepts(Type::kUtf8, field->children[0]->format) || array_->children[0]->n_buffers != 3) {
    throw Error(Code::kInvalidArgument,
                "column " + Quote(batch.column_name(index)) + " is a list of non-strings");
  }
  large_ = format_ == "+L";
  items_ = array_->children[0];
  items_offset_ = items_->offset;
  items_large_ = std::string_view(field->children[0]->format) == "U";
}

int64_t ListUtf8Column::size(int64_t i) const {
  if (is_null(i)) return 0;
  return Offset(offsets_, large_, offset_ + i + 1) - Offset(offsets_, large_, offset_ + i);
}

std::vector<std::string_view> ListUtf8Column::value(int64_t i) const {
  std::vector<std::string_view> items;
  if (is_null(i)) return items;
  const void* validity = items_->null_count != 0 ? items_->buffers[0] : nullptr;
  int64_t begin = Offset(offsets_, large_, offset_ + i);
  int64_t end = Offset(offsets_, large_, offset_ + i + 1);
  for (int64_t k = items_offset_ + begin; k < items_offset_ + end; k++) {
    bool null = validity != nullptr && !Bit(validity, k);
    items.push_back(null ? std::string_view()
                         : String(items_->buffers[1], items_large_, items_->buffers[2], k));
  }
  return items;
}

StreamReader::StreamReader(OwnedStream stream) : stream_(std::move(stream)) {
  if (!stream_) throw Error(Code::kInvalidArgument, "stream is released");
  auto schema = std::make_shared<OwnedSchema>();
  int rc = stream_->get_schema(stream_.get(), schema->get());
  if (rc != 0) {
    const char* message = stream_->get_last_error(stream_.get());
    throw Error(Code::kIOError, "arrow stream get_schema failed (errno " + std::to_string(rc) +
                                    "): " + (message != nullptr ? message : "no message"));
  }
  CheckStructSchema(schema.get());
  schema_ = std::move(schema);
}

std::optional<Batch> StreamReader::Next() {
  OwnedArray array;
  int rc = stream_->get_next(stream_.get(), array.get());
  if (rc != 0) {
    const char* message = stream_->get_last_error(stream_.get());
    throw Error(Code::kIOError, "arrow stream get_next failed (errno " + std::to_string(rc) +
                                    "): " + (message != nullptr ? message : "no message"));
  }
  if (!array) return std::nullopt;
  return Batch(schema_, std::move(array));
}

}  // namespace kv0::arrow
