#include "tracking/records.h"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <set>
#include <unordered_map>
#include <utility>

#include "lance/arrow.h"
#include "lance/auto_cleanup.h"
#include "tracking/schema.h"
#include "tracking/tables.h"

namespace kv0::tracking {

// A row as stored, data still JSON text: reads and optimize only compare
// keys and seqs, so the text is parsed (by Read) only for the rows returned.
struct StoredRecord {
  uint64_t seq = 0;
  std::optional<std::string> run_id;
  std::string item_id;
  std::string data;
  int64_t created_at_us = 0;
};

namespace {

// Batches written or streamed hold at most this many rows, and stop growing
// once their text passes kBatchBytes (Arrow's utf8 offsets are 32-bit).
constexpr int64_t kBatchRows = 8192;
constexpr size_t kBatchBytes = size_t{64} << 20;

constexpr std::string_view kSuffix = ".lance";

bool IsPlain(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;  // lowercase too: EscapeTableName writes uppercase only
}

// Lance percent-decodes the path of a URI once (s3://, file://, ...) but
// takes a plain path literally, so in a URI the '%' of an escaped name is
// itself escaped for the name to reach storage unchanged.
bool IsUri(const std::string& location) { return location.find("://") != std::string::npos; }

std::string InUri(std::string_view dir) {
  std::string out;
  for (char c : dir) {
    if (c == '%') {
      out += "%25";
    } else {
      out += c;
    }
  }
  return out;
}

// Decodes one UTF-8 sequence at text[*i], advancing *i; nullopt if invalid.
std::optional<char32_t> NextCodePoint(std::string_view text, size_t* i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  unsigned char b0 = byte(*i);
  size_t len = b0 < 0x80           ? 1
               : (b0 >> 5) == 0x6  ? 2
               : (b0 >> 4) == 0xE  ? 3
               : (b0 >> 3) == 0x1E ? 4
                                   : 0;
  if (len == 0 || *i + len > text.size()) return std::nullopt;
  char32_t c = len == 1 ? b0 : len == 2 ? (b0 & 0x1F) : len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (size_t k = 1; k < len; ++k) {
    unsigned char b = byte(*i + k);
    if ((b & 0xC0) != 0x80) return std::nullopt;
    c = (c << 6) | (b & 0x3F);
  }
  static constexpr char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (c < kMin[len] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return std::nullopt;
  *i += len;
  return c;
}

void AppendCodePoint(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

// Sorted and without duplicates, so chunks select disjoint rows.
std::vector<std::string> Distinct(const std::vector<std::string>& values) {
  std::vector<std::string> out = values;
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// "column IN (...)" filters of at most kRecordsInChunk values each.
std::vector<std::string> InFilters(std::string_view column,
                                   const std::vector<std::string>& values) {
  std::vector<std::string> out;
  for (const auto& part : Chunks(values, kRecordsInChunk)) {
    std::string filter = std::string(column) + " IN (";
    for (size_t i = 0; i < part.size(); ++i) {
      if (i > 0) filter += ", ";
      filter += SqlString(part[i]);
    }
    out.push_back(filter + ")");
  }
  return out;
}

void CheckQuery(const RecordQuery& q) {
  if (q.run_id && q.run_ids) {
    throw Error(Code::kInvalidArgument, "records query: set run_id or run_ids, not both");
  }
  if (int(q.item_id.has_value()) + int(q.item_ids.has_value()) + int(q.item_prefix.has_value()) >
      1) {
    throw Error(Code::kInvalidArgument,
                "records query: set at most one of item_id, item_ids and item_prefix");
  }
  if (q.version != 0 && !q.tag.empty()) {
    throw Error(Code::kInvalidArgument, "records query: set version or tag, not both");
  }
}

// Calls fn(row) for every row of a scanned batch.
template <typename Fn>
void ForEachRow(const arrow::Batch& batch, Fn&& fn) {
  arrow::UInt64Column seq(batch, "seq");
  arrow::Utf8Column run_id(batch, "run_id"), item_id(batch, "item_id"), data(batch, "data");
  arrow::TimestampColumn created(batch, "created_at");
  for (int64_t i = 0; i < batch.num_rows(); ++i) {
    StoredRecord row;
    row.seq = seq.value(i);
    if (!run_id.is_null(i)) row.run_id = std::string(run_id.value(i));
    row.item_id = std::string(item_id.value(i));
    row.data = std::string(data.value(i));
    row.created_at_us = created.value(i);
    fn(std::move(row));
  }
}

// The newest row of each (run_id, item_id), ordered by run_id (none first),
// then item_id. Of two rows with one seq (a row copied twice), either.
class Newest {
 public:
  using Key = std::pair<std::optional<std::string>, std::string>;

  void Add(StoredRecord row) {
    max_seq_ = std::max(max_seq_, row.seq);
    Key key(row.run_id, row.item_id);
    auto it = rows_.find(key);
    if (it == rows_.end()) {
      rows_.emplace(std::move(key), std::move(row));
    } else if (row.seq > it->second.seq) {
      it->second = std::move(row);
    }
  }

  uint64_t max_seq() const { return max_seq_; }

  // The rows, without those of hidden runs.
  std::vector<StoredRecord> Take(const RecordsStore::Hidden& hidden) {
    std::unordered_map<std::string, bool> cache;
    std::vector<StoredRecord> out;
    out.reserve(rows_.size());
    for (auto& [key, row] : rows_) {
      if (row.run_id && hidden) {
        auto [it, inserted] = cache.try_emplace(*row.run_id, false);
        if (inserted) it->second = hidden(*row.run_id);
        if (it->second) continue;
      }
      out.push_back(std::move(row));
    }
    rows_.clear();
    return out;
  }

 private:
  std::map<Key, StoredRecord> rows_;
  uint64_t max_seq_ = 0;
};

// Appends one row in RecordsSchema() column order.
void AppendRow(arrow::BatchBuilder& b, std::string_view table, const StoredRecord& row) {
  b.uint64(0).Append(row.seq);
  b.utf8(1).Append(table);
  if (row.run_id) {
    b.utf8(2).Append(*row.run_id);
  } else {
    b.utf8(2).AppendNull();
  }
  b.utf8(3).Append(row.item_id);
  b.utf8(4).Append(row.data);
  b.timestamp(5).Append(row.created_at_us);
}

size_t RowBytes(std::string_view table, const StoredRecord& row) {
  return table.size() + (row.run_id ? row.run_id->size() : 0) + row.item_id.size() +
         row.data.size();
}

// A stream of RecordsSchema() batches over rows, built as they are read.
arrow::OwnedStream RowsStream(std::string table, std::shared_ptr<std::vector<StoredRecord>> rows) {
  auto next = std::make_shared<size_t>(0);
  arrow::OwnedStream stream;
  arrow::MakeStream(
      RecordsSchema(),
      [table = std::move(table), rows, next](ArrowArray* out) {
        if (*next >= rows->size()) return false;
        arrow::BatchBuilder b(RecordsSchema());
        size_t bytes = 0;
        while (*next < rows->size() && b.num_rows() < kBatchRows && bytes < kBatchBytes) {
          const StoredRecord& row = (*rows)[*next];
          AppendRow(b, table, row);
          bytes += RowBytes(table, row);
          ++*next;
        }
        b.Finish(out);
        return true;
      },
      &stream);
  return stream;
}

Record ToRecord(StoredRecord&& row) {
  Record r;
  r.seq = row.seq;
  r.run_id = std::move(row.run_id);
  r.item_id = std::move(row.item_id);
  r.data = nlohmann::json::parse(row.data, nullptr, false);
  // Text that is not JSON (written by another tool) reads as a string.
  if (r.data.is_discarded()) r.data = std::move(row.data);
  r.created_at_us = row.created_at_us;
  return r;
}

bool IsNotFound(const Error& e) { return e.code() == Code::kNotFound; }

}  // namespace

// ---------------------------------------------------------------------------
// Names.

std::string EscapeTableName(std::string_view name) {
  if (name.empty()) throw Error(Code::kInvalidArgument, "a records table name must not be empty");
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(name.size());
  for (char ch : name) {
    auto c = static_cast<unsigned char>(ch);
    if (IsPlain(c)) {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xF]);
    }
  }
  return out;
}

std::optional<std::string> UnescapeTableName(std::string_view dir) {
  if (dir.ends_with(kSuffix)) dir.remove_suffix(kSuffix.size());
  if (dir.empty()) return std::nullopt;
  std::string out;
  out.reserve(dir.size());
  for (size_t i = 0; i < dir.size(); ++i) {
    auto c = static_cast<unsigned char>(dir[i]);
    if (IsPlain(c)) {
      out.push_back(dir[i]);
      continue;
    }
    if (c != '%' || i + 2 >= dir.size()) return std::nullopt;
    int hi = HexDigit(dir[i + 1]), lo = HexDigit(dir[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    auto byte = static_cast<unsigned char>(hi * 16 + lo);
    if (IsPlain(byte)) return std::nullopt;  // never escaped: not a name's directory
    out.push_back(static_cast<char>(byte));
    i += 2;
  }
  return out;
}

std::optional<std::string> PrefixUpperBound(std::string_view prefix) {
  std::vector<char32_t> points;
  for (size_t i = 0; i < prefix.size();) {
    auto c = NextCodePoint(prefix, &i);
    if (!c) return std::nullopt;
    points.push_back(*c);
  }
  while (!points.empty() && points.back() == 0x10FFFF) points.pop_back();
  if (points.empty()) return std::nullopt;
  char32_t& last = points.back();
  last = last == 0xD7FF ? 0xE000 : last + 1;  // surrogates are not code points
  std::string out;
  for (char32_t c : points) AppendCodePoint(c, &out);
  return out;
}

// ---------------------------------------------------------------------------
// JSON.

namespace {

[[noreturn]] void BadRecordKey(const char* key, const char* what) {
  throw Error(Code::kInvalidArgument, std::string("record: ") + key + " " + what);
}

}  // namespace

void to_json(nlohmann::json& j, const Record& record) {
  j = nlohmann::json::object();
  j["seq"] = record.seq;
  j["run_id"] = record.run_id ? nlohmann::json(*record.run_id) : nlohmann::json();
  j["item_id"] = record.item_id;
  j["data"] = record.data;
  j["created_at_us"] = record.created_at_us;
}

void from_json(const nlohmann::json& j, Record& record) {
  if (!j.is_object()) throw Error(Code::kInvalidArgument, "record: not a JSON object");
  Record out;
  if (auto it = j.find("seq"); it != j.end() && !it->is_null()) {
    if (!it->is_number_unsigned()) BadRecordKey("seq", "must be a non-negative integer");
    out.seq = it->get<uint64_t>();
  }
  if (auto it = j.find("run_id"); it != j.end() && !it->is_null()) {
    if (!it->is_string()) BadRecordKey("run_id", "must be a string or null");
    out.run_id = it->get<std::string>();
  }
  auto item = j.find("item_id");
  if (item == j.end() || !item->is_string()) BadRecordKey("item_id", "must be a string");
  out.item_id = item->get<std::string>();
  if (auto it = j.find("data"); it != j.end()) out.data = *it;
  if (auto it = j.find("created_at_us"); it != j.end() && !it->is_null()) {
    bool fits =
        it->is_number_integer() &&
        (!it->is_number_unsigned() || it->get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX));
    if (!fits) BadRecordKey("created_at_us", "must be an integer (microseconds)");
    out.created_at_us = it->get<int64_t>();
  }
  record = std::move(out);
}

// ---------------------------------------------------------------------------
// RecordsStore.

RecordsStore::RecordsStore(std::string repo_uri, lance::StorageOptions options, HybridClock* clock,
                           std::chrono::seconds version_retention)
    : repo_uri_(std::move(repo_uri)),
      options_(std::move(options)),
      clock_(clock),
      version_retention_(version_retention) {}

std::string RecordsStore::RecordsDirUri() const {
  return repo_uri_ + "/" + std::string(kRecordsDir);
}

std::string RecordsStore::LegacyUri() const {
  return repo_uri_ + "/" + std::string(kLegacyRecordsTable);
}

std::string RecordsStore::TableUri(const std::string& table) const {
  std::string dir = EscapeTableName(table) + std::string(kSuffix);
  return RecordsDirUri() + "/" + (IsUri(repo_uri_) ? InUri(dir) : dir);
}

lance::Dataset RecordsStore::OpenOrCreate(const std::string& uri) {
  auto dataset = [&] {
    try {
      return lance::Dataset::Open(uri, options_);
    } catch (const Error& e) {
      if (!IsNotFound(e)) throw;
    }
    try {
      return lance::Dataset::Create(uri, options_, RecordsSchema());
    } catch (const Error& e) {
      if (e.code() != Code::kConflict) throw;  // another writer created it first
    }
    return lance::Dataset::Open(uri, options_);
  }();
  std::shared_ptr<lance::AutoCleanup> cleanup;
  {
    std::lock_guard lock(cleanups_mu_);
    auto& slot = cleanups_[uri];
    if (!slot) slot = std::make_shared<lance::AutoCleanup>(version_retention_);
    cleanup = slot;
  }
  dataset.SetAutoCleanup(std::move(cleanup));
  return dataset;
}

uint64_t RecordsStore::Append(const std::string& table, std::span<const Record> rows) {
  std::string uri = TableUri(table);
  {
    arrow::Utf8Builder check;
    check.Append(table);  // throws InvalidArgument unless UTF-8
  }
  if (rows.empty()) return Version(table);

  // Every row is encoded (and so checked) before anything is written.
  int64_t now_us = static_cast<int64_t>(WallNanos() / 1000);
  arrow::BatchBuilder b(RecordsSchema());
  std::vector<arrow::OwnedArray> batches;
  size_t bytes = 0;
  for (const Record& r : rows) {
    if (r.item_id.empty()) {
      throw Error(Code::kInvalidArgument, "records table " + table + ": empty item id");
    }
    StoredRecord row;
    try {
      row.data = r.data.dump();
    } catch (const nlohmann::json::exception& e) {
      throw Error(Code::kInvalidArgument,
                  "records table " + table + ": data of item " + r.item_id + ": " + e.what());
    }
    row.seq = clock_->Next();
    row.run_id = r.run_id;
    row.item_id = r.item_id;
    row.created_at_us = r.created_at_us != 0 ? r.created_at_us : now_us;
    AppendRow(b, table, row);
    bytes += RowBytes(table, row);
    if (b.num_rows() >= kBatchRows || bytes >= kBatchBytes) {
      b.Finish(batches.emplace_back().get());
      bytes = 0;
    }
  }
  if (b.num_rows() > 0) b.Finish(batches.emplace_back().get());

  lance::Dataset dataset = OpenOrCreate(uri);
  arrow::OwnedStream stream;
  arrow::MakeStream(RecordsSchema(), std::move(batches), &stream);
  return dataset.Append(std::move(stream)).version;
}

std::vector<StoredRecord> RecordsStore::ReadStored(const std::string& table, const RecordQuery& q,
                                                   const Hidden& hidden) {
  CheckQuery(q);
  std::string uri = TableUri(table);
  bool pinned = q.version != 0 || !q.tag.empty();
  std::optional<lance::Dataset> dataset;
  try {
    dataset.emplace(lance::Dataset::Open(uri, options_, q.version, q.tag));
  } catch (const Error& e) {
    if (!IsNotFound(e) || pinned) throw;
    return {};  // no table yet: no rows
  }

  // One scan per (run filter, item filter) pair; chunks select disjoint rows.
  std::vector<std::string> run_filters{""}, item_filters{""};
  if (q.run_id) {
    run_filters = {"run_id = " + SqlString(*q.run_id)};
  } else if (q.run_ids) {
    run_filters = InFilters("run_id", Distinct(*q.run_ids));
  }
  if (q.item_id) {
    item_filters = {"item_id = " + SqlString(*q.item_id)};
  } else if (q.item_ids) {
    item_filters = InFilters("item_id", Distinct(*q.item_ids));
  } else if (q.item_prefix && !q.item_prefix->empty()) {
    // A range, which the BTREE index on item_id serves.
    std::string filter = "item_id >= " + SqlString(*q.item_prefix);
    if (auto upper = PrefixUpperBound(*q.item_prefix)) {
      filter += " AND item_id < " + SqlString(*upper);
    }
    item_filters = {filter};
  }

  Newest newest;
  for (const auto& run_filter : run_filters) {
    for (const auto& item_filter : item_filters) {
      lance::ScanOptions scan;
      if (!run_filter.empty() && !item_filter.empty()) {
        scan.filter = "(" + run_filter + ") AND (" + item_filter + ")";
      } else {
        scan.filter = run_filter.empty() ? item_filter : run_filter;
      }
      auto reader = dataset->Scan(scan);
      while (auto batch = reader.Next()) {
        ForEachRow(*batch, [&](StoredRecord&& row) {
          if (q.item_prefix && !row.item_id.starts_with(*q.item_prefix)) return;
          newest.Add(std::move(row));
        });
      }
    }
  }
  // A later write of this process orders after every row it has read.
  clock_->Observe(newest.max_seq());
  return newest.Take(hidden);
}

std::vector<Record> RecordsStore::Read(const std::string& table, const RecordQuery& query,
                                       const Hidden& hidden) {
  auto rows = ReadStored(table, query, hidden);
  std::vector<Record> out;
  out.reserve(rows.size());
  for (auto& row : rows) out.push_back(ToRecord(std::move(row)));
  return out;
}

void RecordsStore::ReadStream(const std::string& table, const RecordQuery& query,
                              const Hidden& hidden, ArrowArrayStream* out) {
  auto rows = std::make_shared<std::vector<StoredRecord>>(ReadStored(table, query, hidden));
  arrow::OwnedStream stream = RowsStream(table, std::move(rows));
  if (out->release != nullptr) out->release(out);
  *out = stream.release();
}

uint64_t RecordsStore::Version(const std::string& table) {
  try {
    return lance::Dataset::Open(TableUri(table), options_).version();
  } catch (const Error& e) {
    if (!IsNotFound(e)) throw;
    return 0;
  }
}

std::vector<std::string> RecordsStore::Tables() {
  std::vector<std::string> out;
  for (const auto& name : lance::ListDir(RecordsDirUri(), options_)) {
    if (!name.ends_with(kSuffix)) continue;
    auto table = UnescapeTableName(name);
    if (!table) continue;
    // Only a name holding '%' can be the directory a tag creation leaves
    // behind (see CreateTag), which is no dataset: it has no _versions.
    if (table->find('%') != std::string::npos) {
      auto entries =
          lance::ListDir(RecordsDirUri() + "/" + (IsUri(repo_uri_) ? InUri(name) : name), options_);
      if (!std::binary_search(entries.begin(), entries.end(), std::string("_versions"))) continue;
    }
    out.push_back(std::move(*table));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> RecordsStore::TableUris() {
  std::vector<std::string> out;
  for (const auto& table : Tables()) out.push_back(TableUri(table));
  return out;
}

void RecordsStore::CreateTag(const std::string& table, const std::string& tag, uint64_t version) {
  auto dataset = lance::Dataset::Open(TableUri(table), options_);
  dataset.CreateTag(tag, version != 0 ? version : dataset.version());
  RemoveTagStaging(table);
}

void RecordsStore::RemoveTagStaging(const std::string& table) const {
  // On a local file system Lance writes a tag to a staging file first, named
  // through object_store's Path::from, which escapes '%' once more: a table
  // whose directory name holds '%' leaves the empty directories
  // records/<name, '%' as %25>.lance/_refs/tags behind. Removes them; a
  // directory that is not empty (another table's) stays.
  std::string root;
  if (!IsUri(repo_uri_)) {
    root = repo_uri_;
  } else if (repo_uri_.starts_with("file://")) {
    root = repo_uri_.substr(std::string_view("file://").size());
  } else {
    return;  // object stores write tags in place
  }
  std::string dir = EscapeTableName(table);
  if (dir.find('%') == std::string::npos) return;
  std::filesystem::path stray =
      std::filesystem::path(root) / kRecordsDir / (InUri(dir) + std::string(kSuffix));
  std::error_code ignored;  // remove() deletes an empty directory only
  std::filesystem::remove(stray / "_refs" / "tags", ignored);
  std::filesystem::remove(stray / "_refs", ignored);
  std::filesystem::remove(stray, ignored);
}

void RecordsStore::DeleteTag(const std::string& table, const std::string& tag) {
  lance::Dataset::Open(TableUri(table), options_).DeleteTag(tag);
}

std::map<std::string, uint64_t> RecordsStore::Tags(const std::string& table) {
  return lance::Dataset::Open(TableUri(table), options_).Tags();
}

bool RecordsStore::HasLegacy() {
  auto names = lance::ListDir(repo_uri_, options_);
  return std::binary_search(names.begin(), names.end(), std::string(kLegacyRecordsTable));
}

void RecordsStore::MigrateLegacy() {
  std::optional<lance::Dataset> legacy;
  try {
    legacy.emplace(lance::Dataset::Open(LegacyUri(), options_));
  } catch (const Error& e) {
    if (!IsNotFound(e)) throw;
    return;
  }
  auto metadata = legacy->Metadata();
  if (auto it = metadata.find(kLegacyMigratedKey); it != metadata.end() && it->second == "1") {
    return;
  }

  // The table names first (one pass over two columns), then one scan and
  // one append per table, streamed: no table is held in memory.
  std::set<std::string> tables;
  uint64_t max_seq = 0;
  {
    lance::ScanOptions scan;
    scan.columns = {"table_name", "seq"};
    auto reader = legacy->Scan(scan);
    while (auto batch = reader.Next()) {
      arrow::Utf8Column names(*batch, "table_name");
      arrow::UInt64Column seqs(*batch, "seq");
      for (int64_t i = 0; i < batch->num_rows(); ++i) {
        tables.emplace(names.value(i));
        max_seq = std::max(max_seq, seqs.value(i));
      }
    }
  }
  clock_->Observe(max_seq);

  for (const auto& table : tables) {
    if (table.empty()) continue;  // cannot be named; earlier versions refused it too
    lance::ScanOptions scan;
    scan.columns = {"seq", "run_id", "item_id", "data", "created_at"};
    scan.filter = "table_name = " + SqlString(table);
    auto reader = std::make_shared<arrow::StreamReader>(legacy->Scan(scan));
    arrow::OwnedStream stream;
    arrow::MakeStream(
        RecordsSchema(),
        [reader, table](ArrowArray* out) {
          while (auto batch = reader->Next()) {
            if (batch->num_rows() == 0) continue;
            arrow::BatchBuilder b(RecordsSchema());
            ForEachRow(*batch, [&](StoredRecord&& row) { AppendRow(b, table, row); });
            b.Finish(out);
            return true;
          }
          return false;
        },
        &stream);
    OpenOrCreate(TableUri(table)).Append(std::move(stream));
  }
  legacy->UpdateMetadata({{kLegacyMigratedKey, "1"}});
}

void RecordsStore::DeleteRunRows(std::span<const std::string> run_ids) {
  if (run_ids.empty()) return;
  auto filters =
      InFilters("run_id", Distinct(std::vector<std::string>(run_ids.begin(), run_ids.end())));
  // records.lance too: it is kept after the migration, so it would still
  // hold the runs' rows.
  auto uris = TableUris();
  uris.push_back(LegacyUri());
  for (const auto& uri : uris) {
    std::optional<lance::Dataset> dataset;
    try {
      dataset.emplace(lance::Dataset::Open(uri, options_));
    } catch (const Error& e) {
      if (!IsNotFound(e)) throw;
      continue;  // no records.lance, or a directory without a dataset (yet)
    }
    for (const auto& filter : filters) {
      if (dataset->CountRows(filter) > 0) dataset->Delete(filter);
    }
  }
}

void RecordsStore::Optimize(const Hidden& hidden) {
  for (const auto& table : Tables()) {
    // A conflict means a concurrent delete or optimize rewrote a fragment
    // this one read: read again.
    for (int attempt = 1;; ++attempt) {
      try {
        OptimizeTable(table, hidden);
        break;
      } catch (const Error& e) {
        if (e.code() != Code::kConflict || attempt == 3) throw;
      }
    }
  }
}

void RecordsStore::OptimizeTable(const std::string& table, const Hidden& hidden) {
  std::optional<lance::Dataset> dataset;
  try {
    dataset.emplace(lance::Dataset::Open(TableUri(table), options_));
  } catch (const Error& e) {
    if (!IsNotFound(e)) throw;
    return;
  }
  auto fragments = dataset->Fragments();
  if (fragments.empty()) return;
  std::vector<uint64_t> read_ids;
  bool deletions = false;
  for (const auto& f : fragments) {
    read_ids.push_back(f.id);
    deletions = deletions || f.deleted_rows > 0;
  }

  Newest newest;
  uint64_t read = 0;
  {
    auto reader = dataset->Scan({});
    while (auto batch = reader.Next()) {
      ForEachRow(*batch, [&](StoredRecord&& row) {
        ++read;
        newest.Add(std::move(row));
      });
    }
  }
  clock_->Observe(newest.max_seq());
  auto kept = std::make_shared<std::vector<StoredRecord>>(newest.Take(hidden));

  // One fragment holding only live rows, no deletion file: nothing to do.
  bool rewrite = kept->size() < read || deletions || fragments.size() > 1;
  if (rewrite) {
    auto written = dataset->WriteFragments(RowsStream(table, kept));
    dataset->CommitUpdate(read_ids, std::move(written));
  }
  kept.reset();
  // Builds the indices, or extends them to fragments appended since; when
  // they are up to date this commits nothing.
  if (dataset->CountRows() == 0) return;
  dataset->CreateScalarIndex("item_id", kRecordsItemIndex);
  dataset->CreateScalarIndex("run_id", kRecordsRunIndex);
}

}  // namespace kv0::tracking
