#include "lance/arrow.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "batch_util.h"
#include "kv0/error.h"

namespace kv0::arrow {
namespace {

// Runs f and returns the kv0::Error it throws, failing the test if none is.
template <typename F>
Error Catch(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no kv0::Error was thrown";
  return Error(Code::kNotFound, "nothing was thrown");
}

bool Contains(const char* text, std::string_view part) {
  return std::string_view(text).find(part) != std::string_view::npos;
}

// Sends arrays through MakeStream and StreamReader; the batches outlive both.
std::vector<Batch> RoundTrip(const Schema& schema, std::vector<OwnedArray> arrays) {
  OwnedStream stream;
  MakeStream(schema, std::move(arrays), &stream);
  StreamReader reader(std::move(stream));
  std::vector<Batch> batches;
  while (std::optional<Batch> batch = reader.Next()) batches.push_back(std::move(*batch));
  EXPECT_FALSE(reader.Next().has_value());  // end of stream stays the end
  return batches;
}

// ---------------------------------------------------------------------------
// One batch of every type. Row r's values are a function of r, so a reader
// can check any slice; with nulls, column c of row r is null if (r + c) % 3 == 1.

Schema AllTypes() {
  return {{"u8", Type::kUInt8},      {"u32", Type::kUInt32},  {"u64", Type::kUInt64},
          {"i64", Type::kInt64},     {"f64", Type::kFloat64}, {"flag", Type::kBool},
          {"bin", Type::kBinary},    {"text", Type::kUtf8},   {"tags", Type::kListUtf8},
          {"ts", Type::kTimestampUs}};
}

bool NullAt(bool nulls, int column, int64_t r) { return nulls && (r + column) % 3 == 1; }
uint8_t U8(int64_t r) { return static_cast<uint8_t>(r * 7); }
uint32_t U32(int64_t r) { return static_cast<uint32_t>(r * 100003); }
uint64_t U64(int64_t r) { return (uint64_t{1} << 63) + r; }
int64_t I64(int64_t r) { return -r * 1000000000000; }
double F64(int64_t r) { return r * 0.5 - 3; }
bool Flag(int64_t r) { return r % 5 < 2; }
std::string Bin(int64_t r) { return std::string("\0\xff", 2) + std::to_string(r); }
std::string Text(int64_t r) { return r % 4 == 0 ? "" : "t\xc3\xa9xt " + std::to_string(r); }
std::vector<std::string> Tags(int64_t r) {
  std::vector<std::string> tags;
  for (int64_t k = 0; k < r % 4; k++) tags.push_back(k == 2 ? "" : "tag" + std::to_string(k));
  return tags;
}
int64_t Ts(int64_t r) { return 1700000000000000 + r; }

template <typename B, typename V>
void Add(B& builder, bool null, const V& value) {
  if (null) {
    builder.AppendNull();
  } else {
    builder.Append(value);
  }
}

void Fill(BatchBuilder& b, int64_t first, int64_t rows, bool nulls) {
  for (int64_t r = first; r < first + rows; r++) {
    Add(b.uint8(0), NullAt(nulls, 0, r), U8(r));
    Add(b.uint32(1), NullAt(nulls, 1, r), U32(r));
    Add(b.uint64(2), NullAt(nulls, 2, r), U64(r));
    Add(b.int64(3), NullAt(nulls, 3, r), I64(r));
    Add(b.float64(4), NullAt(nulls, 4, r), F64(r));
    Add(b.boolean(5), NullAt(nulls, 5, r), Flag(r));
    Add(b.binary(6), NullAt(nulls, 6, r), std::string_view(Bin(r)));
    Add(b.utf8(7), NullAt(nulls, 7, r), std::string_view(Text(r)));
    std::vector<std::string> tags = Tags(r);
    std::vector<std::string_view> views(tags.begin(), tags.end());
    Add(b.list_utf8(8), NullAt(nulls, 8, r), std::span<const std::string_view>(views));
    Add(b.timestamp(9), NullAt(nulls, 9, r), Ts(r));
  }
}

template <typename C, typename V>
void ExpectCell(const C& column, int64_t i, bool null, const V& expected) {
  EXPECT_EQ(column.is_null(i), null) << "row " << i;
  if (!null) {
    EXPECT_EQ(column.value(i), expected) << "row " << i;
  }
}

// Checks that batch holds rows [first, first + rows) as Fill wrote them.
void Check(const Batch& batch, int64_t first, int64_t rows, bool nulls) {
  ASSERT_EQ(batch.num_rows(), rows);
  ASSERT_EQ(batch.num_columns(), 10);
  UInt8Column u8(batch, "u8");
  UInt32Column u32(batch, "u32");
  UInt64Column u64(batch, "u64");
  Int64Column i64(batch, "i64");
  Float64Column f64(batch, "f64");
  BoolColumn flag(batch, "flag");
  BinaryColumn bin(batch, "bin");
  Utf8Column text(batch, "text");
  ListUtf8Column tags(batch, "tags");
  TimestampColumn ts(batch, "ts");
  EXPECT_EQ(u8.size(), rows);
  EXPECT_EQ(tags.size(), rows);
  for (int64_t i = 0; i < rows; i++) {
    int64_t r = first + i;
    ExpectCell(u8, i, NullAt(nulls, 0, r), U8(r));
    ExpectCell(u32, i, NullAt(nulls, 1, r), U32(r));
    ExpectCell(u64, i, NullAt(nulls, 2, r), U64(r));
    ExpectCell(i64, i, NullAt(nulls, 3, r), I64(r));
    ExpectCell(f64, i, NullAt(nulls, 4, r), F64(r));
    ExpectCell(flag, i, NullAt(nulls, 5, r), Flag(r));
    ExpectCell(bin, i, NullAt(nulls, 6, r), Bin(r));
    ExpectCell(text, i, NullAt(nulls, 7, r), Text(r));
    std::vector<std::string> expected = Tags(r);
    bool null_tags = NullAt(nulls, 8, r);
    ExpectCell(tags, i, null_tags, std::vector<std::string_view>(expected.begin(), expected.end()));
    EXPECT_EQ(tags.size(i), null_tags ? 0 : static_cast<int64_t>(expected.size()));
    ExpectCell(ts, i, NullAt(nulls, 9, r), Ts(r));
  }
}

TEST(ArrowTest, ExportSchemaDescribesFields) {
  Schema schema = AllTypes();
  schema[2].nullable = false;
  OwnedSchema owned;
  ExportSchema(schema, owned.get());
  const ArrowSchema& s = *owned.get();
  EXPECT_STREQ(s.format, "+s");
  EXPECT_EQ(s.flags, 0);
  ASSERT_EQ(s.n_children, 10);
  const char* formats[] = {"C", "I", "L", "l", "g", "b", "z", "u", "+l", "tsu:UTC"};
  for (int i = 0; i < 10; i++) {
    EXPECT_STREQ(s.children[i]->format, formats[i]);
    EXPECT_EQ(s.children[i]->name, schema[i].name);
    EXPECT_EQ(s.children[i]->flags, i == 2 ? 0 : ARROW_FLAG_NULLABLE);
    EXPECT_EQ(s.children[i]->n_children, i == 8 ? 1 : 0);
  }
  const ArrowSchema& item = *s.children[8]->children[0];
  EXPECT_STREQ(item.format, "u");
  EXPECT_STREQ(item.name, "item");
  EXPECT_EQ(item.flags, ARROW_FLAG_NULLABLE);
}

TEST(ArrowTest, ExportSchemaEncodesFieldMetadata) {
  Schema schema = {{"a", Type::kInt64, true, {{"k1", "v1"}, {"key2", ""}}},
                   {"b", Type::kUtf8, true}};
  OwnedSchema owned;
  ExportSchema(schema, owned.get());
  EXPECT_EQ(owned.get()->children[1]->metadata, nullptr);
  const char* p = owned.get()->children[0]->metadata;
  ASSERT_NE(p, nullptr);
  auto next_int = [&] {
    int32_t v;
    std::memcpy(&v, p, sizeof v);
    p += sizeof v;
    return v;
  };
  auto next_text = [&] {
    int32_t n = next_int();
    std::string text(p, static_cast<size_t>(n));
    p += n;
    return text;
  };
  ASSERT_EQ(next_int(), 2);
  EXPECT_EQ(next_text(), "k1");
  EXPECT_EQ(next_text(), "v1");
  EXPECT_EQ(next_text(), "key2");
  EXPECT_EQ(next_text(), "");
}

TEST(ArrowTest, EveryTypeRoundTripsWithoutNulls) {
  BatchBuilder builder(AllTypes());
  Fill(builder, 0, 20, false);
  EXPECT_EQ(builder.num_rows(), 20);
  OwnedArray array = Finish(builder);
  EXPECT_EQ(builder.num_rows(), 0);
  ASSERT_EQ(array->n_children, 10);
  EXPECT_EQ(array->length, 20);
  for (int c = 0; c < 10; c++) {  // no nulls, so no bitmaps
    EXPECT_EQ(array->children[c]->null_count, 0);
    EXPECT_EQ(array->children[c]->buffers[0], nullptr);
  }
  std::vector<OwnedArray> arrays;
  arrays.push_back(std::move(array));
  std::vector<Batch> batches = RoundTrip(AllTypes(), std::move(arrays));
  ASSERT_EQ(batches.size(), 1u);
  Check(batches[0], 0, 20, false);
}

TEST(ArrowTest, EveryTypeRoundTripsWithNulls) {
  BatchBuilder builder(AllTypes());
  Fill(builder, 0, 20, true);
  for (int c = 0; c < 10; c++) {
    int64_t nulls = 0;
    for (int64_t r = 0; r < 20; r++) nulls += NullAt(true, c, r);
    EXPECT_EQ(builder.column(c).null_count(), nulls);
  }
  OwnedArray array = Finish(builder);
  for (int c = 0; c < 10; c++) {
    EXPECT_GT(array->children[c]->null_count, 0);
    EXPECT_NE(array->children[c]->buffers[0], nullptr);
  }
  std::vector<OwnedArray> arrays;
  arrays.push_back(std::move(array));
  std::vector<Batch> batches = RoundTrip(AllTypes(), std::move(arrays));
  ASSERT_EQ(batches.size(), 1u);
  Check(batches[0], 0, 20, true);
}

TEST(ArrowTest, BuffersFollowTheSpecification) {
  BoolBuilder flags;
  for (bool v : {true, false, true, true, false, false, false, false, true}) flags.Append(v);
  OwnedArray array;
  flags.Finish(array.get());
  ASSERT_EQ(array->n_buffers, 2);
  EXPECT_EQ(array->buffers[0], nullptr);
  auto bits = static_cast<const uint8_t*>(array->buffers[1]);
  EXPECT_EQ(bits[0], 0x0D);
  EXPECT_EQ(bits[1], 0x01);

  UInt32Builder numbers;
  for (uint32_t i = 0; i < 9; i++) numbers.Append(i);
  numbers.AppendNull();
  array.reset();
  numbers.Finish(array.get());
  EXPECT_EQ(array->length, 10);
  EXPECT_EQ(array->null_count, 1);
  auto validity = static_cast<const uint8_t*>(array->buffers[0]);
  EXPECT_EQ(validity[0], 0xFF);
  EXPECT_EQ(validity[1], 0x01);
  EXPECT_EQ(static_cast<const uint32_t*>(array->buffers[1])[8], 8u);

  // The builder starts over after Finish; a first null gets a bitmap at once.
  numbers.AppendNull();
  numbers.Append(7);
  array.reset();
  numbers.Finish(array.get());
  EXPECT_EQ(array->length, 2);
  EXPECT_EQ(static_cast<const uint8_t*>(array->buffers[0])[0], 0x02);

  BinaryBuilder strings;
  strings.Append("ab");
  strings.AppendNull();
  strings.Append("cde");
  array.reset();
  strings.Finish(array.get());
  ASSERT_EQ(array->n_buffers, 3);
  auto offsets = static_cast<const int32_t*>(array->buffers[1]);
  EXPECT_EQ(std::vector<int32_t>(offsets, offsets + 4), (std::vector<int32_t>{0, 2, 2, 5}));
  EXPECT_EQ(std::memcmp(array->buffers[2], "abcde", 5), 0);
}

TEST(ArrowTest, EmptyBatches) {
  BatchBuilder builder(AllTypes());
  std::vector<OwnedArray> arrays;
  arrays.push_back(Finish(builder));
  Fill(builder, 0, 3, true);
  arrays.push_back(Finish(builder));
  arrays.push_back(Finish(builder));
  std::vector<Batch> batches = RoundTrip(AllTypes(), std::move(arrays));
  ASSERT_EQ(batches.size(), 3u);
  Check(batches[0], 0, 0, false);
  Check(batches[1], 0, 3, true);
  Check(batches[2], 0, 0, false);

  BatchBuilder no_columns(Schema{});
  Batch batch = Import({}, Finish(no_columns));
  EXPECT_EQ(batch.num_rows(), 0);
  EXPECT_EQ(batch.num_columns(), 0);
}

TEST(ArrowTest, EmptyStrings) {
  Schema schema = {{"bin", Type::kBinary}, {"text", Type::kUtf8}, {"tags", Type::kListUtf8}};
  BatchBuilder builder(schema);
  for (int i = 0; i < 3; i++) {
    builder.binary(0).Append("");
    builder.utf8(1).Append("");
    builder.list_utf8(2).Append({"", ""});
  }
  OwnedArray array = Finish(builder);
  EXPECT_NE(array->children[0]->buffers[2], nullptr);  // empty, yet not null
  Batch batch = Import(schema, std::move(array));
  BinaryColumn bin(batch, "bin");
  Utf8Column text(batch, "text");
  ListUtf8Column tags(batch, "tags");
  for (int64_t i = 0; i < 3; i++) {
    ExpectCell(bin, i, false, "");
    ExpectCell(text, i, false, "");
    ExpectCell(tags, i, false, std::vector<std::string_view>{"", ""});
  }
}

TEST(ArrowTest, ReadsSlicedBatches) {
  BatchBuilder builder(AllTypes());

  // The struct's offset applies to every column.
  Fill(builder, 0, 12, true);
  OwnedArray array = Finish(builder);
  array->offset = 3;
  array->length = 6;
  Check(Import(AllTypes(), std::move(array)), 3, 6, true);

  // So does each column's own offset.
  Fill(builder, 0, 12, true);
  array = Finish(builder);
  for (int c = 0; c < 10; c++) {
    array->children[c]->offset = 2;
    array->children[c]->length -= 2;
  }
  array->length = 10;
  Check(Import(AllTypes(), std::move(array)), 2, 10, true);

  // And both add up, also through a stream.
  Fill(builder, 0, 12, true);
  array = Finish(builder);
  for (int c = 0; c < 10; c++) {
    array->children[c]->offset = 2;
    array->children[c]->length -= 2;
  }
  array->offset = 3;
  array->length = 5;
  std::vector<OwnedArray> arrays;
  arrays.push_back(std::move(array));
  std::vector<Batch> batches = RoundTrip(AllTypes(), std::move(arrays));
  ASSERT_EQ(batches.size(), 1u);
  Check(batches[0], 5, 5, true);

  // A column shorter than the slice is refused rather than read past its end.
  Fill(builder, 0, 12, true);
  array = Finish(builder);
  array->offset = 8;
  Batch batch = Import(AllTypes(), std::move(array));
  EXPECT_EQ(Catch([&] { UInt8Column column(batch, "u8"); }).code(), Code::kInvalidArgument);
}

TEST(ArrowTest, TypeMismatch) {
  Schema schema = {{"id", Type::kUInt64}, {"key", Type::kBinary}, {"name", Type::kUtf8}};
  BatchBuilder builder(schema);
  Error e = Catch([&] { builder.binary(0); });
  EXPECT_EQ(e.code(), Code::kInvalidArgument);
  EXPECT_TRUE(Contains(e.what(), "\"id\"")) << e.what();
  EXPECT_EQ(Catch([&] { builder.uint64(3); }).code(), Code::kInvalidArgument);
  EXPECT_EQ(Catch([&] { builder.column(3); }).code(), Code::kInvalidArgument);

  builder.uint64(0).Append(1);
  builder.binary(1).Append("k");
  builder.utf8(2).Append("n");
  Batch batch = Import(schema, Finish(builder));
  e = Catch([&] { UInt64Column column(batch, "key"); });
  EXPECT_EQ(e.code(), Code::kInvalidArgument);
  EXPECT_TRUE(Contains(e.what(), "column \"key\" has type \"z\", expected uint64")) << e.what();
  EXPECT_EQ(Catch([&] { Utf8Column column(batch, "key"); }).code(), Code::kInvalidArgument);
  EXPECT_EQ(Catch([&] { TimestampColumn column(batch, 0); }).code(), Code::kInvalidArgument);
  EXPECT_EQ(Catch([&] { Int64Column column(batch, 0); }).code(), Code::kInvalidArgument);
  EXPECT_EQ(Catch([&] { ListUtf8Column column(batch, 2); }).code(), Code::kInvalidArgument);
  EXPECT_EQ(Catch([&] { UInt64Column column(batch, 3); }).code(), Code::kInvalidArgument);
  EXPECT_EQ(BinaryColumn(batch, "name").value(0), "n");  // utf8 reads fine as bytes
}

TEST(ArrowTest, MissingColumn) {
  Schema schema = {{"id", Type::kUInt64}};
  BatchBuilder builder(schema);
  Batch batch = Import(schema, Finish(builder));
  EXPECT_EQ(batch.FindColumn("id"), 0);
  EXPECT_EQ(batch.FindColumn("nope"), -1);
  Error e = Catch([&] { batch.Column("nope"); });
  EXPECT_EQ(e.code(), Code::kInvalidArgument);
  EXPECT_TRUE(Contains(e.what(), "nope")) << e.what();
  e = Catch([&] { UInt64Column column(batch, "nope"); });
  EXPECT_TRUE(Contains(e.what(), "nope")) << e.what();
}

TEST(ArrowTest, AppendingASpanMatchesAppendingEachValue) {
  Schema schema = {{"a", Type::kInt64}, {"b", Type::kFloat64}};
  BatchBuilder builder(schema);
  std::vector<int64_t> ints = {1, -2, 3};
  std::vector<double> doubles = {0.5, 1.5};
  builder.int64(0).Append(std::span<const int64_t>(ints));  // before any null
  builder.int64(0).AppendNull();
  builder.int64(0).Append(std::span<const int64_t>(ints).first(2));  // after one
  builder.float64(1).Append(std::span<const double>(doubles));
  builder.float64(1).Append(std::span<const double>());
  builder.float64(1).Append(std::span<const double>(doubles));
  for (int i = 0; i < 2; ++i) builder.float64(1).AppendNull();
  Batch batch = Import(schema, Finish(builder));
  ASSERT_EQ(batch.num_rows(), 6);
  Int64Column a(batch, "a");
  Float64Column b(batch, "b");
  std::vector<std::optional<int64_t>> got_a;
  std::vector<std::optional<double>> got_b;
  for (int64_t i = 0; i < 6; ++i) {
    got_a.push_back(a.is_null(i) ? std::nullopt : std::optional(a.value(i)));
    got_b.push_back(b.is_null(i) ? std::nullopt : std::optional(b.value(i)));
  }
  EXPECT_EQ(got_a, (std::vector<std::optional<int64_t>>{1, -2, 3, std::nullopt, 1, -2}));
  EXPECT_EQ(got_b,
            (std::vector<std::optional<double>>{0.5, 1.5, 0.5, 1.5, std::nullopt, std::nullopt}));
}

TEST(ArrowTest, AppendingWithValidityMatchesAppendingEachValue) {
  Schema schema = {{"a", Type::kInt64}, {"b", Type::kBinary}, {"c", Type::kUInt64}};
  BatchBuilder builder(schema);
  std::vector<int64_t> ints = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  std::vector<uint8_t> some = {1, 0, 1, 1, 0, 1, 1, 1, 1, 0};
  std::vector<uint8_t> all(10, 1);
  // a: all valid before any null (no bitmap yet), then some null across a
  // byte boundary, then all valid again after nulls.
  builder.int64(0).Append(std::span<const int64_t>(ints).first(3), std::span(all).first(3));
  builder.int64(0).Append(std::span<const int64_t>(ints), some);
  builder.int64(0).Append(std::span<const int64_t>(ints).first(2), std::span(all).first(2));
  // b: runs of nulls between values.
  builder.binary(1).Append("x");
  builder.binary(1).AppendNulls(9);
  builder.binary(1).Append("yz");
  builder.binary(1).AppendNulls(0);
  builder.binary(1).AppendNulls(4);
  // c: no nulls at all keeps no bitmap.
  std::vector<uint64_t> big(15, 42);
  builder.uint64(2).Append(std::span<const uint64_t>(big), std::vector<uint8_t>(15, 1));
  Batch batch = Import(schema, Finish(builder));
  ASSERT_EQ(batch.num_rows(), 15);
  Int64Column a(batch, "a");
  BinaryColumn b(batch, "b");
  UInt64Column c(batch, "c");
  std::vector<std::optional<int64_t>> got_a, want_a = {1, 2, 3};
  std::vector<std::optional<std::string>> got_b, want_b = {"x"};
  for (size_t i = 0; i < ints.size(); ++i) {
    want_a.push_back(some[i] ? std::optional(ints[i]) : std::nullopt);
  }
  want_a.insert(want_a.end(), {1, 2});
  want_b.insert(want_b.end(), 9, std::nullopt);
  want_b.push_back("yz");
  want_b.insert(want_b.end(), 4, std::nullopt);
  for (int64_t i = 0; i < 15; ++i) {
    got_a.push_back(a.is_null(i) ? std::nullopt : std::optional(a.value(i)));
    got_b.push_back(b.is_null(i) ? std::nullopt : std::optional(std::string(b.value(i))));
    EXPECT_FALSE(c.is_null(i));
    EXPECT_EQ(c.value(i), 42u);
  }
  EXPECT_EQ(got_a, want_a);
  EXPECT_EQ(got_b, want_b);
}

// AppendRows gathers rows in any order, with and without a valid list,
// before and after the column's first null.
TEST(ArrowTest, AppendingRowsMatchesAppendingEachValueInTheirOrder) {
  Schema schema = {{"a", Type::kInt64}, {"b", Type::kFloat64}};
  BatchBuilder builder(schema);
  const std::vector<int64_t> ints = {10, 11, 12, 13, 14, 15, 16, 17, 18, 19};
  const std::vector<double> doubles = {0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 9.5};
  const std::vector<uint8_t> valid = {1, 1, 0, 1, 1, 1, 0, 1, 1, 1};
  const std::vector<uint32_t> order = {9, 2, 2, 0, 6, 5, 1, 8, 3, 7, 4};
  builder.int64(0).AppendRows(ints, {}, std::span(order).first(2));  // no nulls yet
  builder.int64(0).AppendRows(ints, valid, std::span(order).subspan(2));
  builder.float64(1).AppendRows(doubles, {}, order);
  Batch batch = Import(schema, Finish(builder));
  ASSERT_EQ(batch.num_rows(), static_cast<int64_t>(order.size()));
  Int64Column a(batch, "a");
  Float64Column b(batch, "b");
  for (size_t k = 0; k < order.size(); ++k) {
    const uint32_t i = order[k];
    const bool null = k >= 2 && valid[i] == 0;
    ASSERT_EQ(a.is_null(static_cast<int64_t>(k)), null) << "row " << k;
    if (!null) EXPECT_EQ(a.value(static_cast<int64_t>(k)), ints[i]) << "row " << k;
    EXPECT_FALSE(b.is_null(static_cast<int64_t>(k)));
    EXPECT_EQ(b.value(static_cast<int64_t>(k)), doubles[i]) << "row " << k;
  }
}

TEST(ArrowTest, FinishChecksLengthsAndNullability) {
  Schema schema = {{"id", Type::kUInt64, false}, {"key", Type::kBinary}};
  BatchBuilder builder(schema);
  builder.uint64(0).Append(1);
  Error e = Catch([&] { OwnedArray array = Finish(builder); });
  EXPECT_EQ(e.code(), Code::kInvalidArgument);
  EXPECT_TRUE(Contains(e.what(), "\"key\" has 0 rows")) << e.what();
  builder.binary(1).Append("k");  // the rows were kept; now they line up
  Batch batch = Import(schema, Finish(builder));
  EXPECT_EQ(UInt64Column(batch, "id").value(0), 1u);
  EXPECT_EQ(BinaryColumn(batch, "key").value(0), "k");

  builder.uint64(0).AppendNull();
  builder.binary(1).AppendNull();
  e = Catch([&] { OwnedArray array = Finish(builder); });
  EXPECT_TRUE(Contains(e.what(), "\"id\" is not nullable")) << e.what();
}

TEST(ArrowTest, MultipleBatchesThroughAStream) {
  BatchBuilder builder(AllTypes());
  std::vector<OwnedArray> arrays;
  Fill(builder, 0, 5, false);
  arrays.push_back(Finish(builder));
  Fill(builder, 5, 100, true);
  arrays.push_back(Finish(builder));
  arrays.push_back(Finish(builder));
  Fill(builder, 105, 3, true);
  arrays.push_back(Finish(builder));
  std::vector<Batch> batches = RoundTrip(AllTypes(), std::move(arrays));
  ASSERT_EQ(batches.size(), 4u);
  Check(batches[0], 0, 5, false);
  Check(batches[1], 5, 100, true);
  Check(batches[2], 0, 0, true);
  Check(batches[3], 105, 3, true);
}

TEST(ArrowTest, GeneratorStream) {
  Schema schema = {{"n", Type::kUInt64}};
  int calls = 0;
  OwnedStream stream;
  MakeStream(
      schema,
      [&](ArrowArray* out) {
        if (++calls > 3) return false;
        BatchBuilder builder(schema);
        builder.uint64(0).Append(calls);
        builder.Finish(out);
        return true;
      },
      &stream);
  StreamReader reader(std::move(stream));
  EXPECT_STREQ(reader.schema()->get()->children[0]->name, "n");
  for (uint64_t i = 1; i <= 3; i++) {
    std::optional<Batch> batch = reader.Next();
    ASSERT_TRUE(batch.has_value());
    EXPECT_EQ(UInt64Column(*batch, "n").value(0), i);
  }
  EXPECT_FALSE(reader.Next().has_value());
  EXPECT_FALSE(reader.Next().has_value());
  EXPECT_EQ(calls, 4);  // not called again after the end
}

TEST(ArrowTest, StreamErrorPropagates) {
  Schema schema = {{"n", Type::kUInt64}};
  int calls = 0;
  OwnedStream stream;
  MakeStream(
      schema,
      [&](ArrowArray* out) -> bool {
        if (calls++ == 0) {
          BatchBuilder builder(schema);
          builder.uint64(0).Append(1);
          builder.Finish(out);
          return true;
        }
        throw Error(Code::kIOError, "disk on fire");
      },
      &stream);
  StreamReader reader(std::move(stream));
  std::optional<Batch> first = reader.Next();
  ASSERT_TRUE(first.has_value());
  Error e = Catch([&] { reader.Next(); });
  EXPECT_EQ(e.code(), Code::kIOError);
  EXPECT_TRUE(Contains(e.what(), "disk on fire")) << e.what();
  EXPECT_EQ(UInt64Column(*first, "n").value(0), 1u);  // earlier batches stay valid
}

TEST(ArrowTest, StreamReportsErrnoAndMessage) {
  Schema schema = {{"n", Type::kUInt64}};
  int calls = 0;
  OwnedStream stream;
  MakeStream(
      schema,
      [&](ArrowArray* out) -> bool {
        switch (calls++) {
          case 0:
            throw Error(Code::kInvalidArgument, "bad range");
          case 1: {  // fills *out, then fails: the stream must release it
            BatchBuilder builder(schema);
            builder.uint64(0).Append(1);
            builder.Finish(out);
            throw std::runtime_error("late failure");
          }
          default:
            throw Error(Code::kCorruption, "checksum mismatch");
        }
      },
      &stream);
  ArrowArrayStream* s = stream.get();
  OwnedSchema schema_out;
  ASSERT_EQ(s->get_schema(s, schema_out.get()), 0);
  EXPECT_STREQ(schema_out->format, "+s");
  OwnedArray array;
  EXPECT_EQ(s->get_next(s, array.get()), EINVAL);
  EXPECT_TRUE(Contains(s->get_last_error(s), "bad range"));
  EXPECT_FALSE(array);
  EXPECT_EQ(s->get_next(s, array.get()), EIO);
  EXPECT_STREQ(s->get_last_error(s), "late failure");
  EXPECT_FALSE(array);
  EXPECT_EQ(s->get_next(s, array.get()), EIO);
  EXPECT_STREQ(s->get_last_error(s), "Corruption: checksum mismatch");
}

// Counts calls to an array's release, then runs the original.
struct Counted {
  void (*release)(ArrowArray*);
  void* private_data;
  int* count;
};

void CountedRelease(ArrowArray* array) {
  auto* counted = static_cast<Counted*>(array->private_data);
  ++*counted->count;
  array->release = counted->release;
  array->private_data = counted->private_data;
  delete counted;
  array->release(array);
}

OwnedArray Counting(OwnedArray array, int* count) {
  array->private_data = new Counted{array->release, array->private_data, count};
  array->release = CountedRelease;
  return array;
}

TEST(ArrowTest, ReleasesExactlyOnce) {
  Schema schema = {{"n", Type::kUInt64}};
  BatchBuilder builder(schema);
  int count = 0;

  {  // Moved owners.
    OwnedArray a = Counting(Finish(builder), &count);
    OwnedArray b = std::move(a);
    OwnedArray c;
    c = std::move(b);
    EXPECT_FALSE(a);
    EXPECT_TRUE(c);
  }
  EXPECT_EQ(count, 1);

  // Handed out with release(): the new holder releases it.
  count = 0;
  OwnedArray owned = Counting(Finish(builder), &count);
  ArrowArray raw = owned.release();
  owned.reset();
  EXPECT_EQ(count, 0);
  raw.release(&raw);
  EXPECT_EQ(count, 1);

  // A Batch, moved around, and one whose constructor throws.
  count = 0;
  {
    Batch batch = Import(schema, Counting(Finish(builder), &count));
    Batch moved = std::move(batch);
    std::optional<Batch> held(std::move(moved));
  }
  EXPECT_EQ(count, 1);
  EXPECT_EQ(Catch([&] { Import(AllTypes(), Counting(Finish(builder), &count)); }).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(count, 2);

  // A stream read partway: the unread batches go with the stream, the read one
  // with its Batch.
  count = 0;
  std::vector<OwnedArray> arrays;
  for (int i = 0; i < 3; i++) arrays.push_back(Counting(Finish(builder), &count));
  std::optional<Batch> first;
  {
    OwnedStream stream;
    MakeStream(schema, std::move(arrays), &stream);
    StreamReader reader(std::move(stream));
    first = reader.Next();
    EXPECT_EQ(count, 0);
  }
  EXPECT_EQ(count, 2);
  first.reset();
  EXPECT_EQ(count, 3);
}

TEST(ArrowTest, ListUtf8EmptyAndNullLists) {
  Schema schema = {{"tags", Type::kListUtf8}};
  BatchBuilder builder(schema);
  ListUtf8Builder& tags = builder.list_utf8(0);
  tags.Append({});
  tags.AppendNull();
  tags.Append({"a", "", "bc"});
  tags.Append({});
  tags.AppendNull();
  std::vector<std::string_view> items = {"d"};
  tags.Append(items);
  OwnedArray array = Finish(builder);
  const ArrowArray& list = *array->children[0];
  EXPECT_EQ(list.null_count, 2);
  ASSERT_EQ(list.n_children, 1);
  EXPECT_EQ(list.children[0]->length, 4);
  EXPECT_EQ(list.children[0]->null_count, 0);

  Batch batch = Import(schema, std::move(array));
  ListUtf8Column column(batch, "tags");
  using Items = std::vector<std::string_view>;
  ExpectCell(column, 0, false, Items{});
  ExpectCell(column, 1, true, Items{});
  ExpectCell(column, 2, false, Items{"a", "", "bc"});
  ExpectCell(column, 3, false, Items{});
  ExpectCell(column, 4, true, Items{});
  ExpectCell(column, 5, false, Items{"d"});
  EXPECT_EQ(column.value(1), Items{});
  EXPECT_EQ(column.size(2), 3);
  EXPECT_EQ(column.size(4), 0);
}

TEST(ArrowTest, LargeBinaryValues) {
  std::string three(3 << 20, '\0'), five(5 << 20, '\0');
  for (size_t i = 0; i < three.size(); i++) three[i] = static_cast<char>(i * 31 % 251);
  for (size_t i = 0; i < five.size(); i++) five[i] = static_cast<char>(i * 17 % 241);
  Schema schema = {{"blob", Type::kBinary}};
  BatchBuilder builder(schema);
  builder.binary(0).Append(three);
  builder.binary(0).AppendNull();
  builder.binary(0).Append("");
  builder.binary(0).Append(five);
  std::vector<OwnedArray> arrays;
  arrays.push_back(Finish(builder));
  std::vector<Batch> batches = RoundTrip(schema, std::move(arrays));
  ASSERT_EQ(batches.size(), 1u);
  BinaryColumn blob(batches[0], "blob");
  ASSERT_EQ(blob.size(), 4);
  EXPECT_TRUE(blob.value(0) == three);
  EXPECT_TRUE(blob.is_null(1));
  EXPECT_EQ(blob.value(2), "");
  EXPECT_TRUE(blob.value(3) == five);
}

TEST(ArrowTest, RejectsColumnsPast2GiB) {
  // Untouched read-only pages stand in for 2 GiB of input: the size check
  // comes before any byte is read, so this costs no memory.
  const size_t kTwoGiB = size_t{1} << 31;
  void* pages =
      mmap(nullptr, kTwoGiB, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(pages, MAP_FAILED);
  std::string_view huge(static_cast<const char*>(pages), kTwoGiB - 3);  // "abc" + this > 2^31-1

  BinaryBuilder binary;
  binary.Append("abc");
  EXPECT_EQ(Catch([&] { binary.Append(huge); }).code(), Code::kInvalidArgument);
  EXPECT_EQ(binary.size(), 1);
  EXPECT_EQ(binary.data_size(), 3);

  Utf8Builder text;
  text.Append("abc");
  EXPECT_EQ(Catch([&] { text.Append(huge); }).code(), Code::kInvalidArgument);
  EXPECT_EQ(text.size(), 1);

  Schema schema = {{"tags", Type::kListUtf8}};
  BatchBuilder builder(schema);
  builder.list_utf8(0).Append({"abc"});
  EXPECT_EQ(Catch([&] {
              builder.list_utf8(0).Append({"x", huge});
            }).code(),
            Code::kInvalidArgument);
  builder.list_utf8(0).Append({"d"});
  Batch batch = Import(schema, Finish(builder));  // nothing of the failed list is left
  ListUtf8Column tags(batch, "tags");
  ASSERT_EQ(tags.size(), 2);
  EXPECT_EQ(tags.value(0), std::vector<std::string_view>{"abc"});
  EXPECT_EQ(tags.value(1), std::vector<std::string_view>{"d"});
  munmap(pages, kTwoGiB);
}

TEST(ArrowTest, RejectsInvalidUtf8) {
  Utf8Builder text;
  text.Append("pl\xc3\xa9in \xf0\x9f\x99\x82");
  for (std::string_view bad :
       {"\xff", "\xc3", "\xc3\x28", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "ok\xe2\x82"}) {
    EXPECT_EQ(Catch([&] { text.Append(bad); }).code(), Code::kInvalidArgument) << bad;
  }
  EXPECT_EQ(text.size(), 1);

  ListUtf8Builder tags;
  EXPECT_EQ(Catch([&] { tags.Append({"fine", "\xff"}); }).code(), Code::kInvalidArgument);
  EXPECT_EQ(tags.size(), 0);

  BinaryBuilder bytes;
  bytes.Append("\xff");  // binary takes any bytes
  EXPECT_EQ(bytes.size(), 1);
}

// A batch laid out by hand the way another producer might: 64-bit offsets, a
// list whose child has an offset, a timestamp in another zone. Its release
// callbacks only count, since the memory belongs to the object.
class ForeignBatch {
 public:
  ForeignBatch() {
    Node(&fields_[0], "Z", "big");
    Node(&fields_[1], "U", "text");
    Node(&fields_[2], "+L", "tags");
    Node(&fields_[3], "tsu:Europe/Paris", "when");
    Node(&item_, "U", "item");
    fields_[2].n_children = 1;
    fields_[2].children = item_pointers_;
    Node(&schema_, "+s", "");
    schema_.n_children = 4;
    schema_.children = field_pointers_;

    Leaf(&columns_[0], 1, big_buffers_);
    Leaf(&columns_[1], 0, text_buffers_);
    Leaf(&columns_[2], 1, tags_buffers_, 2);
    Leaf(&columns_[3], 0, when_buffers_, 2);
    Leaf(&items_, 0, items_buffers_);
    items_.length = 3;
    items_.offset = 1;  // skips "skip"
    columns_[2].n_children = 1;
    columns_[2].children = items_pointers_;
    Leaf(&array_, 0, struct_buffers_, 1);
    array_.n_children = 4;
    array_.children = column_pointers_;
  }

  static int releases;

  ArrowSchema schema_{}, fields_[4]{}, item_{};
  ArrowSchema* field_pointers_[4] = {&fields_[0], &fields_[1], &fields_[2], &fields_[3]};
  ArrowSchema* item_pointers_[1] = {&item_};
  ArrowArray array_{}, columns_[4]{}, items_{};
  ArrowArray* column_pointers_[4] = {&columns_[0], &columns_[1], &columns_[2], &columns_[3]};
  ArrowArray* items_pointers_[1] = {&items_};

 private:
  static void ReleaseSchema(ArrowSchema* s) {
    releases++;
    s->release = nullptr;
  }
  static void ReleaseArray(ArrowArray* a) {
    releases++;
    a->release = nullptr;
  }
  static void Node(ArrowSchema* s, const char* format, const char* name) {
    s->format = format;
    s->name = name;
    s->flags = ARROW_FLAG_NULLABLE;
    s->release = ReleaseSchema;
  }
  static void Leaf(ArrowArray* a, int64_t nulls, const void** buffers, int64_t n_buffers = 3) {
    a->length = 4;
    a->null_count = nulls;
    a->n_buffers = n_buffers;
    a->buffers = buffers;
    a->release = ReleaseArray;
  }

  // big: "ab", null, "", "xyz"
  const uint8_t big_validity_[1] = {0x0D};
  const int64_t big_offsets_[5] = {0, 2, 2, 2, 5};
  const void* big_buffers_[3] = {big_validity_, big_offsets_, "abxyz"};
  // text: "x", "yy", "zzz", ""
  const int64_t text_offsets_[5] = {0, 1, 3, 6, 6};
  const void* text_buffers_[3] = {nullptr, text_offsets_, "xyyzzz"};
  // tags: ["a", "b"], [], null, ["c"]
  const uint8_t tags_validity_[1] = {0x0B};
  const int64_t tags_offsets_[5] = {0, 2, 2, 2, 3};
  const void* tags_buffers_[2] = {tags_validity_, tags_offsets_};
  const int64_t items_offsets_[5] = {0, 4, 5, 6, 7};
  const void* items_buffers_[3] = {nullptr, items_offsets_, "skipabc"};
  // when: 1, 2, 3, 4
  const int64_t when_values_[4] = {1, 2, 3, 4};
  const void* when_buffers_[2] = {nullptr, when_values_};
  const void* struct_buffers_[1] = {nullptr};
};
int ForeignBatch::releases = 0;

TEST(ArrowTest, ReadsOtherProducersLayouts) {
  ForeignBatch::releases = 0;
  {
    ForeignBatch foreign;
    auto schema = std::make_shared<OwnedSchema>(&foreign.schema_);
    EXPECT_EQ(foreign.schema_.release, nullptr);  // moved into the owner
    foreign.array_.offset = 1;
    foreign.array_.length = 3;
    Batch batch(schema, OwnedArray(&foreign.array_));
    ASSERT_EQ(batch.num_rows(), 3);
    using Items = std::vector<std::string_view>;

    BinaryColumn big(batch, "big");
    ExpectCell(big, 0, true, "");
    ExpectCell(big, 1, false, "");
    ExpectCell(big, 2, false, "xyz");
    Utf8Column text(batch, "text");
    ExpectCell(text, 0, false, "yy");
    ExpectCell(text, 2, false, "");
    EXPECT_EQ(BinaryColumn(batch, "text").value(1), "zzz");
    ListUtf8Column tags(batch, "tags");
    ExpectCell(tags, 0, false, Items{});
    ExpectCell(tags, 1, true, Items{});
    ExpectCell(tags, 2, false, Items{"c"});
    TimestampColumn when(batch, "when");
    ExpectCell(when, 0, false, 2);
    ExpectCell(when, 2, false, 4);
    EXPECT_EQ(Catch([&] { Int64Column column(batch, "when"); }).code(), Code::kInvalidArgument);
  }
  EXPECT_EQ(ForeignBatch::releases, 2);  // the top-level schema and array, once each
}

}  // namespace
}  // namespace kv0::arrow
