#include "kv/snapshot.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <utility>

#include "kv0/error.h"

namespace kv0::kv {
namespace {

constexpr char kMagic[8] = {'K', 'V', '0', 'S', 'N', 'A', 'P', '1'};
// 1 was written before views were saved only when equal to storage at their
// version (a view saved then could hold keys storage had lost), so such files
// are refused; 2 was never used.
constexpr uint32_t kFormatVersion = 3;
constexpr size_t kBufferSize = size_t{1} << 20;
constexpr size_t kChecksumSize = 8;

enum Kind : uint8_t { kValue = 0, kLazy = 1, kTombstone = 2 };

// Fixed parts of the variable-length records, for bounds on counts and the
// one-shot decode of an entry's prefix.
constexpr size_t kEntryPrefix = 8 + 1 + 4 + 4;  // seq, kind, key size, value size
constexpr size_t kPiecePrefix = 4 + 4 + 8;      // begin size, end size, seq
constexpr size_t kMinFragment = 8 + 4 + 8 + 4 + 8;
constexpr size_t kMinMark = 4 + 8;
// Magic, version, dataset version, threshold, the four counts, checksum.
constexpr size_t kMinFileSize = 8 + 4 + 8 + 8 + 4 + 4 + 8 + 8 + kChecksumSize;

template <typename T>
T ToLittle(T v) {
  if constexpr (std::endian::native == std::endian::big) {
    if constexpr (sizeof(T) == 8) return __builtin_bswap64(v);
    if constexpr (sizeof(T) == 4) return __builtin_bswap32(v);
  }
  return v;
}

template <typename T>
void Store(char* p, T v) {
  v = ToLittle(v);
  std::memcpy(p, &v, sizeof(T));
}

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return ToLittle(v);
}

std::string ErrnoText(int err) { return std::strerror(err); }

struct HashStateFree {
  void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
};
using HashState = std::unique_ptr<XXH3_state_t, HashStateFree>;

HashState NewHashState() {
  HashState state(XXH3_createState());
  if (state == nullptr) throw std::bad_alloc();
  XXH3_64bits_reset(state.get());
  return state;
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // Closes now and reports close's result; the descriptor is gone either way.
  int Close() {
    int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

// --- Writing ----------------------------------------------------------------

// Streams bytes to a file through a fixed buffer, hashing them on the way.
class Writer {
 public:
  Writer(int fd, const std::string& path)
      : fd_(fd), path_(path), buf_(new char[kBufferSize]), hash_(NewHashState()) {}

  void Put(const void* data, size_t n) {
    if (n <= kBufferSize - len_) {
      std::memcpy(buf_.get() + len_, data, n);
      len_ += n;
      return;
    }
    PutSlow(data, n);
  }
  void PutU32(uint32_t v) {
    char b[4];
    Store(b, v);
    Put(b, sizeof(b));
  }
  void PutU64(uint64_t v) {
    char b[8];
    Store(b, v);
    Put(b, sizeof(b));
  }
  void PutString(std::string_view s, const char* what) {
    PutU32(CheckedSize(s.size(), what));
    Put(s.data(), s.size());
  }

  // Writes out the buffer and appends the checksum of everything put so far.
  void Finish() {
    Flush();
    char b[kChecksumSize];
    Store<uint64_t>(b, XXH3_64bits_digest(hash_.get()));
    WriteRaw(b, sizeof(b));
  }

  uint32_t CheckedSize(size_t n, const char* what) const {
    if (n > UINT32_MAX) {
      throw Error(Code::kInvalidArgument, "cannot write snapshot " + path_ + ": " + what + " of " +
                                              std::to_string(n) +
                                              " bytes is over the format's 4 GiB limit");
    }
    return static_cast<uint32_t>(n);
  }

 private:
  void PutSlow(const void* data, size_t n) {
    Flush();
    if (n < kBufferSize) {
      std::memcpy(buf_.get(), data, n);
      len_ = n;
    } else {  // larger than the buffer: straight to the file
      XXH3_64bits_update(hash_.get(), data, n);
      WriteRaw(static_cast<const char*>(data), n);
    }
  }

  void Flush() {
    if (len_ == 0) return;
    XXH3_64bits_update(hash_.get(), buf_.get(), len_);
    WriteRaw(buf_.get(), len_);
    len_ = 0;
  }

  void WriteRaw(const char* p, size_t n) {
    while (n > 0) {
      ssize_t w = ::write(fd_, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        throw Error(Code::kIOError, "cannot write snapshot " + path_ + ": " + ErrnoText(errno));
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
  }

  int fd_;
  const std::string& path_;
  std::unique_ptr<char[]> buf_;
  size_t len_ = 0;
  HashState hash_;
};

void WriteBody(Writer& w, const SnapshotHeader& header, const View& view) {
  w.Put(kMagic, sizeof(kMagic));
  w.PutU32(kFormatVersion);
  w.PutU64(header.dataset_version);
  w.PutU64(header.lazy_value_threshold);

  w.PutU32(w.CheckedSize(header.fragments.size(), "the fragment list"));
  for (const lance::FragmentInfo& f : header.fragments) {
    w.PutU64(f.id);
    w.PutString(f.data_file, "a data file name");
    w.PutU64(f.physical_rows);
    w.PutString(f.deletion_file, "a deletion file name");
    w.PutU64(f.deleted_rows);
  }

  w.PutU32(w.CheckedSize(header.marks.size(), "the mark list"));
  for (const auto& [writer, seq] : header.marks) {
    w.PutString(writer, "a writer id");
    w.PutU64(seq);
  }

  w.PutU64(view.ranges().size());
  for (const auto& [begin, piece] : view.ranges().pieces()) {
    char b[kPiecePrefix];
    Store(b, w.CheckedSize(begin.size(), "a range bound"));
    Store(b + 4, w.CheckedSize(piece.end.size(), "a range bound"));
    Store(b + 8, piece.seq);
    w.Put(b, sizeof(b));
    w.Put(begin.data(), begin.size());
    w.Put(piece.end.data(), piece.end.size());
  }

  w.PutU64(view.entries().size());
  for (const Entry* e : view.entries()) {
    std::string_view key = e->key();
    char b[kEntryPrefix];
    Store(b, e->seq());
    b[8] = static_cast<char>(e->is_tombstone() ? kTombstone : e->is_lazy() ? kLazy : kValue);
    Store(b + 9, static_cast<uint32_t>(key.size()));  // an Entry's key fits in u32
    Store(b + 13, e->is_tombstone() ? uint32_t{0} : e->value_size());
    w.Put(b, sizeof(b));
    w.Put(key.data(), key.size());
    if (e->is_lazy()) {
      LazyRef ref = e->lazy_ref();
      char r[16];
      Store(r, ref.version);
      Store(r + 8, ref.address);
      w.Put(r, sizeof(r));
    } else if (!e->is_tombstone()) {
      std::string_view value = e->value();
      w.Put(value.data(), value.size());
    }
  }
  w.Finish();
}

// --- Reading ----------------------------------------------------------------

// Streams a file through a buffer that holds at least the record being
// decoded, hashing every byte before the trailing checksum as it arrives.
class Reader {
 public:
  Reader(int fd, const std::string& path, uint64_t file_size)
      : fd_(fd),
        path_(path),
        file_size_(file_size),
        limit_(file_size - kChecksumSize),
        cap_(kBufferSize),
        buf_(new char[cap_]),
        hash_(NewHashState()) {}

  // File offset of the next byte to decode.
  uint64_t offset() const { return buf_offset_ + pos_; }

  // Makes n bytes available at the returned pointer, valid until the next
  // Need. Asking for bytes past the current limit (the checksum, while the
  // body is decoded) is reported as corruption.
  const char* Need(size_t n) {
    if (end_ - pos_ >= n) return buf_.get() + pos_;
    return NeedSlow(n);
  }
  void Skip(size_t n) { pos_ += n; }

  uint32_t U32() {
    uint32_t v = Load<uint32_t>(Need(4));
    Skip(4);
    return v;
  }
  uint64_t U64() {
    uint64_t v = Load<uint64_t>(Need(8));
    Skip(8);
    return v;
  }
  std::string String() {
    uint32_t n = U32();
    const char* p = Need(n);
    std::string s(p, n);
    Skip(n);
    return s;
  }

  // Reads a count (u32 or u64) of records that are each at least min_size
  // bytes and so must fit in the rest of the body.
  template <typename T>
  uint64_t Count(const char* what, size_t min_size) {
    uint64_t at = offset();
    uint64_t n = sizeof(T) == 8 ? U64() : U32();
    if (n > (limit_ - offset()) / min_size) Fail(at, std::string(what) + " count too large");
    return n;
  }

  // After the body: checks that it ended where the checksum starts and that
  // the checksum matches.
  void FinishAndVerify() {
    if (offset() != limit_) {
      Fail(offset(), std::to_string(limit_ - offset()) + " unexpected bytes after the entries");
    }
    limit_ = file_size_;
    uint64_t stored = Load<uint64_t>(Need(kChecksumSize));
    Skip(kChecksumSize);
    uint64_t computed = XXH3_64bits_digest(hash_.get());
    if (stored != computed) Fail(offset() - kChecksumSize, "checksum mismatch");
  }

  [[noreturn]] void Fail(uint64_t at, const std::string& what) const {
    throw Error(Code::kCorruption,
                "snapshot " + path_ + " is damaged: " + what + " at offset " + std::to_string(at));
  }

 private:
  const char* NeedSlow(size_t n) {
    uint64_t at = offset();
    if (n > limit_ - at) {
      Fail(at, "a record of " + std::to_string(n) + " bytes runs past the end of the data (" +
                   std::to_string(limit_ - at) + " bytes left)");
    }
    // Keep the unread bytes, at the front of a buffer large enough for n.
    size_t left = end_ - pos_;
    if (n > cap_) {
      size_t cap = (n + kBufferSize - 1) / kBufferSize * kBufferSize;
      std::unique_ptr<char[]> bigger(new char[cap]);
      std::memcpy(bigger.get(), buf_.get() + pos_, left);
      buf_ = std::move(bigger);
      cap_ = cap;
    } else if (pos_ > 0) {
      std::memmove(buf_.get(), buf_.get() + pos_, left);
    }
    buf_offset_ += pos_;
    pos_ = 0;
    end_ = left;
    while (end_ < n) {
      // Never read past the limit, so the buffer holds no checksum bytes
      // while the body is decoded.
      size_t want = static_cast<size_t>(std::min<uint64_t>(cap_ - end_, limit_ - read_offset_));
      ssize_t r = ::read(fd_, buf_.get() + end_, want);
      if (r < 0) {
        if (errno == EINTR) continue;
        throw Error(Code::kIOError, "cannot read snapshot " + path_ + ": " + ErrnoText(errno));
      }
      if (r == 0) Fail(read_offset_, "the file ended before its size said it would");
      // Hash what lies before the checksum.
      uint64_t hashed_end = file_size_ - kChecksumSize;
      if (read_offset_ < hashed_end) {
        uint64_t h = std::min<uint64_t>(static_cast<uint64_t>(r), hashed_end - read_offset_);
        XXH3_64bits_update(hash_.get(), buf_.get() + end_, h);
      }
      read_offset_ += static_cast<uint64_t>(r);
      end_ += static_cast<size_t>(r);
    }
    return buf_.get();
  }

  int fd_;
  const std::string& path_;
  const uint64_t file_size_;
  uint64_t limit_;            // decoding may not go past this offset
  uint64_t buf_offset_ = 0;   // file offset of buf_[0]
  uint64_t read_offset_ = 0;  // file offset of the next byte to read()
  size_t cap_;
  std::unique_ptr<char[]> buf_;
  size_t pos_ = 0;  // next byte to decode
  size_t end_ = 0;  // end of the bytes read into buf_
  HashState hash_;
};

void ReadRanges(Reader& r, View* view) {
  uint64_t count = r.Count<uint64_t>("range piece", kPiecePrefix + 1);
  std::string prev_end;
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t at = r.offset();
    const char* p = r.Need(kPiecePrefix);
    uint32_t begin_size = Load<uint32_t>(p);
    uint32_t end_size = Load<uint32_t>(p + 4);
    uint64_t seq = Load<uint64_t>(p + 8);
    r.Skip(kPiecePrefix);
    p = r.Need(size_t{begin_size} + end_size);
    std::string_view begin(p, begin_size);
    std::string_view end(p + begin_size, end_size);
    if (!(begin < end)) r.Fail(at, "range piece " + std::to_string(i) + " is empty");
    if (i > 0 && begin < std::string_view(prev_end)) {
      r.Fail(at, "range piece " + std::to_string(i) + " overlaps or precedes the one before");
    }
    // The view is still empty, so this only records the piece (pieces that do
    // not overlap are kept as they are) and raises the view's max_seq.
    view->ApplyDeleteRange(seq, begin, end);
    prev_end.assign(end);
    r.Skip(size_t{begin_size} + end_size);
  }
}

// Builds the view's index on a thread of its own while the file is read
// (the index costs about a fifth of a load done on one thread). Runs are
// handed over once they are in the ordered set, so the entries live as long
// as the view; the destructor stops the thread before the view can go.
class IndexThread {
 public:
  explicit IndexThread(View* view) : view_(view), thread_([this] { Run(); }) {}
  ~IndexThread() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }

  void Push(std::vector<Entry*> run) {
    {
      std::lock_guard lock(mu_);
      runs_.push_back(std::move(run));
    }
    cv_.notify_one();
  }

  // Waits until every run pushed is indexed; rethrows what indexing threw.
  void Finish() {
    {
      std::lock_guard lock(mu_);
      finishing_ = true;
    }
    cv_.notify_one();
    std::unique_lock lock(mu_);
    done_cv_.wait(lock, [&] { return (runs_.empty() && !busy_) || error_; });
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void Run() {
    std::unique_lock lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stop_ || !runs_.empty() || finishing_; });
      if (stop_ || error_) return;
      if (runs_.empty()) {
        done_cv_.notify_all();
        if (finishing_) return;
        continue;
      }
      std::vector<Entry*> run = std::move(runs_.front());
      runs_.pop_front();
      busy_ = true;
      lock.unlock();
      std::exception_ptr error;
      try {
        view_->IndexSorted(run);
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      busy_ = false;
      if (error) {
        error_ = error;
        done_cv_.notify_all();
        return;
      }
      if (runs_.empty()) done_cv_.notify_all();
    }
  }

  View* const view_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<std::vector<Entry*>> runs_;
  bool stop_ = false, finishing_ = false, busy_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: starts once the rest is set up
};

void ReadEntries(Reader& r, View* view) {
  uint64_t count = r.Count<uint64_t>("entry", kEntryPrefix);
  view->Reserve(count);  // bounded by the file's size (Count checks)
  IndexThread indexer(view);
  // Entries go to the view a run at a time; the run frees what it holds if
  // the file turns out damaged before it is handed over.
  std::vector<Entry*> run;
  struct FreeRun {
    std::vector<Entry*>& run;
    ~FreeRun() {
      for (Entry* e : run) Entry::Free(e);
    }
  } free_run{run};
  constexpr size_t kRun = 4096;
  run.reserve(std::min<uint64_t>(count, kRun));
  const Entry* prev = nullptr;
  for (uint64_t i = 0; i < count; ++i) {
    const char* p = r.Need(kEntryPrefix);
    uint64_t seq = Load<uint64_t>(p);
    uint8_t kind = static_cast<uint8_t>(p[8]);
    uint32_t key_size = Load<uint32_t>(p + 9);
    uint32_t value_size = Load<uint32_t>(p + 13);
    size_t payload = 0;
    if (kind == kValue) {
      payload = value_size;
    } else if (kind == kLazy) {
      payload = 16;
    } else if (kind != kTombstone) {
      r.Fail(r.offset(),
             "entry " + std::to_string(i) + " has unknown kind " + std::to_string(kind));
    }
    if (kind == kTombstone ? value_size != 0 : value_size > Entry::kMaxValueSize) {
      r.Fail(r.offset(), "entry " + std::to_string(i) + " has an impossible value size of " +
                             std::to_string(value_size));
    }
    uint64_t at = r.offset();
    r.Skip(kEntryPrefix);
    p = r.Need(size_t{key_size} + payload);
    std::string_view key(p, key_size);
    if (prev != nullptr && !(prev->key() < key)) {
      r.Fail(at, "entry " + std::to_string(i) + " is not in ascending key order");
    }
    Entry* e;
    switch (kind) {
      case kValue:
        e = Entry::NewValue(seq, key, {p + key_size, payload});
        break;
      case kLazy:
        e = Entry::NewLazy(seq, key, value_size,
                           LazyRef{Load<uint64_t>(p + key_size), Load<uint64_t>(p + key_size + 8)});
        break;
      default:
        e = Entry::NewTombstone(seq, key);
        break;
    }
    r.Skip(size_t{key_size} + payload);
    run.push_back(e);  // reserved: cannot throw
    prev = e;
    if (run.size() == kRun || i + 1 == count) {
      try {
        view->AppendSorted(run);
      } catch (...) {
        run.clear();  // the view freed them
        throw;
      }
      std::vector<Entry*> handed;
      handed.swap(run);  // the view owns them now: `run` must not free them
      run.reserve(kRun);
      indexer.Push(std::move(handed));
    }
  }
  indexer.Finish();
}

}  // namespace

void WriteSnapshot(const std::string& path, const SnapshotHeader& header, const View& view) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  std::string tmp = path + ".tmp-XXXXXX";
  Fd fd(::mkostemp(tmp.data(), O_CLOEXEC));
  if (fd.get() < 0) {
    throw Error(Code::kIOError,
                "cannot create a temporary file for snapshot " + path + ": " + ErrnoText(errno));
  }
  auto fail = [&](const std::string& step, int err) {
    throw Error(Code::kIOError,
                "cannot write snapshot " + path + ": " + step + ": " + ErrnoText(err));
  };
  try {
    Writer w(fd.get(), path);
    WriteBody(w, header, view);
    if (::fsync(fd.get()) != 0) fail("fsync", errno);
    if (fd.Close() != 0) fail("close", errno);
    if (::rename(tmp.c_str(), path.c_str()) != 0) fail("rename", errno);
  } catch (...) {
    if (fd.get() >= 0) fd.Close();
    ::unlink(tmp.c_str());
    throw;
  }
  // The new snapshot is in place; make the rename itself durable.
  Fd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() < 0) fail("open directory " + dir.string(), errno);
  if (::fsync(dir_fd.get()) != 0) fail("fsync directory " + dir.string(), errno);
}

std::optional<SnapshotHeader> ReadSnapshot(const std::string& path, View* view) {
  if (view == nullptr || !view->entries().empty() || !view->ranges().empty()) {
    throw Error(Code::kInvalidArgument, "a snapshot loads only into an empty view");
  }
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) return std::nullopt;
    throw Error(Code::kIOError, "cannot open snapshot " + path + ": " + ErrnoText(errno));
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    throw Error(Code::kIOError, "cannot stat snapshot " + path + ": " + ErrnoText(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    throw Error(Code::kCorruption, "snapshot " + path + " is not a regular file");
  }
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < kMinFileSize) {
    throw Error(Code::kCorruption, "snapshot " + path + " is damaged: " + std::to_string(size) +
                                       " bytes is too short for a snapshot");
  }
  ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);

  Reader r(fd.get(), path, size);
  const char* p = r.Need(sizeof(kMagic) + 4);
  if (std::memcmp(p, kMagic, sizeof(kMagic)) != 0) r.Fail(0, "wrong magic");
  uint32_t version = Load<uint32_t>(p + sizeof(kMagic));
  if (version != kFormatVersion) {
    r.Fail(sizeof(kMagic), "format version " + std::to_string(version) + " (this build reads " +
                               std::to_string(kFormatVersion) + ")");
  }
  r.Skip(sizeof(kMagic) + 4);

  SnapshotHeader header;
  header.dataset_version = r.U64();
  header.lazy_value_threshold = r.U64();

  uint64_t fragments = r.Count<uint32_t>("fragment", kMinFragment);
  header.fragments.reserve(fragments);
  for (uint64_t i = 0; i < fragments; ++i) {
    lance::FragmentInfo& f = header.fragments.emplace_back();
    f.id = r.U64();
    f.data_file = r.String();
    f.physical_rows = r.U64();
    f.deletion_file = r.String();
    f.deleted_rows = r.U64();
  }

  uint64_t marks = r.Count<uint32_t>("mark", kMinMark);
  for (uint64_t i = 0; i < marks; ++i) {
    uint64_t at = r.offset();
    std::string writer = r.String();
    uint64_t seq = r.U64();
    if (!header.marks.emplace(std::move(writer), seq).second) {
      r.Fail(at, "mark " + std::to_string(i) + " repeats a writer id");
    }
  }

  ReadRanges(r, view);
  ReadEntries(r, view);
  r.FinishAndVerify();
  return header;
}

}  // namespace kv0::kv
