// The kv0 command-line tool: inspect and edit databases and repositories.
// Keys and values are UTF-8 text, or hex when written 0x...; output shows
// bytes that are not printable text as 0x-prefixed hex.

#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/kv_bench.h"
#include "kv0/error.h"
#include "kv0/kv.h"
#include "lance/dataset.h"

namespace {

const char kUsage[] =
    "usage: kv0 <command> [arguments]\n"
    "\n"
    "commands:\n"
    "  --version             print kv0's and Lance's versions\n"
    "  info URI              print a dataset's versions, fragments and schema\n"
    "\n"
    "key-value databases (DB is a path or URI; K and V are text or 0x-hex):\n"
    "  put DB K V            store V under K (committed before returning)\n"
    "  get DB K              print the value of K\n"
    "  delete DB K           delete K\n"
    "  delete-range DB A B   delete every key in [A, B)\n"
    "  scan DB [--start K] [--end K] [--reverse] [--limit N]\n"
    "                        print keys and values in order\n"
    "  versions DB           list the database's versions\n"
    "  compact DB            rewrite the database as its live rows\n"
    "\n"
    "benchmarks:\n"
    "  bench kv [--keys N] [--wal-keys N] [--json FILE] [--dir DIR]\n"
    "                        kv0 against RocksDB, db_bench style (N: 1000000)\n"
    "\n"
    "options:\n"
    "  --storage-option K=V  pass an object-store option to Lance (repeatable)\n";

struct Args {
  std::vector<std::string> positional;
  kv0::lance::StorageOptions storage;
  // --start, --end, --limit, --reverse; bench: --keys, --wal-keys, --json, --dir
  std::map<std::string, std::string> flags;
};

Args Parse(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--storage-option") {
      if (i + 1 >= argc)
        throw kv0::Error(kv0::Code::kInvalidArgument, "--storage-option needs K=V");
      std::string kv = argv[++i];
      auto eq = kv.find('=');
      if (eq == std::string::npos) {
        throw kv0::Error(kv0::Code::kInvalidArgument, "--storage-option needs K=V, got " + kv);
      }
      args.storage[kv.substr(0, eq)] = kv.substr(eq + 1);
    } else if (arg == "--start" || arg == "--end" || arg == "--limit" || arg == "--keys" ||
               arg == "--wal-keys" || arg == "--json" || arg == "--dir") {
      if (i + 1 >= argc) throw kv0::Error(kv0::Code::kInvalidArgument, arg + " needs a value");
      args.flags[arg] = argv[++i];
    } else if (arg == "--reverse") {
      args.flags[arg] = "1";
    } else {
      args.positional.push_back(arg);
    }
  }
  return args;
}

// A readable name for an Arrow format string.
std::string TypeOf(const ArrowSchema& field) {
  std::string format = field.format;
  if (format == "C") return "uint8";
  if (format == "I") return "uint32";
  if (format == "L") return "uint64";
  if (format == "l") return "int64";
  if (format == "g") return "float64";
  if (format == "b") return "bool";
  if (format == "z" || format == "Z") return "binary";
  if (format == "u" || format == "U") return "utf8";
  if (format.rfind("tsu:", 0) == 0) return "timestamp[us, " + format.substr(4) + "]";
  if ((format == "+l" || format == "+L") && field.n_children == 1) {
    return "list<" + TypeOf(*field.children[0]) + ">";
  }
  return format;
}

// "0x..." is hex; anything else is the text's bytes.
std::string Bytes(const std::string& arg) {
  if (arg.size() < 2 || arg.compare(0, 2, "0x") != 0) return arg;
  if (arg.size() % 2 != 0) throw kv0::Error(kv0::Code::kInvalidArgument, "odd-length hex: " + arg);
  std::string out;
  for (size_t i = 2; i < arg.size(); i += 2) {
    auto nibble = [&](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      throw kv0::Error(kv0::Code::kInvalidArgument, "not hex: " + arg);
    };
    out.push_back(static_cast<char>(nibble(arg[i]) * 16 + nibble(arg[i + 1])));
  }
  return out;
}

// Printable ASCII stays text; anything else is shown as 0x-hex.
std::string Show(std::string_view bytes) {
  bool printable = true;
  for (unsigned char c : bytes) printable &= (c >= 0x20 && c < 0x7f);
  if (printable && bytes.rfind("0x", 0) != 0) return std::string(bytes);
  static const char kHex[] = "0123456789abcdef";
  std::string out = "0x";
  for (unsigned char c : bytes) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

void Need(const Args& args, size_t n, const char* usage) {
  if (args.positional.size() != n) {
    throw kv0::Error(kv0::Code::kInvalidArgument, std::string("usage: kv0 ") + usage);
  }
}

std::unique_ptr<kv0::kv::DB> OpenDb(const Args& args, bool read_only) {
  kv0::kv::Options options;
  options.storage_options = args.storage;
  options.read_only = read_only;
  return kv0::kv::DB::Open(args.positional[1], options);
}

int KvCommand(const std::string& command, const Args& args) {
  kv0::kv::WriteOptions sync{.sync = true};
  if (command == "put") {
    Need(args, 4, "put DB KEY VALUE");
    OpenDb(args, false)->Put(Bytes(args.positional[2]), Bytes(args.positional[3]), sync);
  } else if (command == "get") {
    Need(args, 3, "get DB KEY");
    auto value = OpenDb(args, true)->Get(Bytes(args.positional[2]));
    if (!value) {
      std::cerr << "kv0: " << args.positional[2] << " not found\n";
      return 1;
    }
    std::cout << Show(*value) << "\n";
  } else if (command == "delete") {
    Need(args, 3, "delete DB KEY");
    OpenDb(args, false)->Delete(Bytes(args.positional[2]), sync);
  } else if (command == "delete-range") {
    Need(args, 4, "delete-range DB START END");
    OpenDb(args, false)->DeleteRange(Bytes(args.positional[2]), Bytes(args.positional[3]), sync);
  } else if (command == "scan") {
    Need(args, 2, "scan DB [--start K] [--end K] [--reverse] [--limit N]");
    auto db = OpenDb(args, true);
    auto flag = [&](const char* name) -> const std::string* {
      auto it = args.flags.find(name);
      return it == args.flags.end() ? nullptr : &it->second;
    };
    std::optional<std::string> start, end;
    if (auto* s = flag("--start")) start = Bytes(*s);
    if (auto* e = flag("--end")) end = Bytes(*e);
    long long limit = flag("--limit") ? std::stoll(*flag("--limit")) : -1;
    bool reverse = flag("--reverse") != nullptr;
    auto it = db->NewIterator();
    // [start, end) in either direction.
    if (!reverse) {
      start ? it->Seek(*start) : it->SeekToFirst();
    } else if (end) {
      it->SeekForPrev(*end);
      if (it->Valid() && it->key() == *end) it->Prev();
    } else {
      it->SeekToLast();
    }
    for (; it->Valid() && limit != 0; reverse ? it->Prev() : it->Next(), --limit) {
      if (!reverse && end && it->key() >= *end) break;
      if (reverse && start && it->key() < *start) break;
      std::cout << Show(it->key()) << "\t" << Show(it->value()) << "\n";
    }
  } else if (command == "versions") {
    Need(args, 2, "versions DB");
    for (const auto& v : OpenDb(args, true)->Versions()) {
      std::cout << v.version << "\t" << v.timestamp_us << "\n";
    }
  } else if (command == "compact") {
    Need(args, 2, "compact DB");
    auto db = OpenDb(args, false);
    db->CompactRange();
    std::cout << "compacted to version " << db->version() << "\n";
  } else {
    return -1;
  }
  return 0;
}

// A positive count from a flag, or fallback when the flag is absent.
uint64_t CountFlag(const Args& args, const std::string& name, uint64_t fallback) {
  auto it = args.flags.find(name);
  if (it == args.flags.end()) return fallback;
  const std::string& text = it->second;
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) {
    throw kv0::Error(kv0::Code::kInvalidArgument, name + " needs a positive number, got " + text);
  }
  try {
    return std::stoull(text);
  } catch (const std::exception&) {
    throw kv0::Error(kv0::Code::kInvalidArgument, name + " is out of range: " + text);
  }
}

int Bench(const Args& args) {
  const char* usage = "usage: kv0 bench kv [--keys N] [--wal-keys N] [--json FILE] [--dir DIR]";
  if (args.positional.size() != 2 || args.positional[1] != "kv") {
    throw kv0::Error(kv0::Code::kInvalidArgument, usage);
  }
  kv0::bench::KvBenchArgs bench;
  bench.keys = CountFlag(args, "--keys", bench.keys);
  bench.wal_keys = CountFlag(args, "--wal-keys", 0);
  if (auto it = args.flags.find("--json"); it != args.flags.end()) bench.json_path = it->second;
  if (auto it = args.flags.find("--dir"); it != args.flags.end()) bench.dir = it->second;
  return kv0::bench::RunKvBench(bench);
}

int Info(const Args& args) {
  if (args.positional.size() != 2) throw kv0::Error(kv0::Code::kInvalidArgument, "info needs URI");
  auto ds = kv0::lance::Dataset::Open(args.positional[1], args.storage);
  std::cout << ds.uri() << "\n";
  std::cout << "version " << ds.version() << ", " << ds.CountRows() << " rows\n";

  std::cout << "\nschema:\n";
  auto schema = ds.Schema();
  for (int64_t i = 0; i < schema->n_children; ++i) {
    const ArrowSchema& field = *schema->children[i];
    bool nullable = field.flags & ARROW_FLAG_NULLABLE;
    std::cout << "  " << field.name << ": " << TypeOf(field) << (nullable ? "?" : "") << "\n";
  }

  std::cout << "\nversions:\n";
  for (const auto& v : ds.Versions()) {
    std::cout << "  " << v.version << "  (" << v.timestamp_us << " us)\n";
  }

  std::cout << "\nfragments:\n";
  for (const auto& f : ds.Fragments()) {
    std::cout << "  " << f.id << "  " << f.physical_rows << " rows  " << f.data_file;
    if (!f.deletion_file.empty()) {
      std::cout << "  deletions " << f.deletion_file << " (" << f.deleted_rows << " rows)";
    }
    std::cout << "\n";
  }

  auto tags = ds.Tags();
  if (!tags.empty()) {
    std::cout << "\ntags:\n";
    for (const auto& [name, version] : tags) std::cout << "  " << name << " -> " << version << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Args args = Parse(argc, argv);
    if (args.positional.empty()) {
      std::cerr << kUsage;
      return 2;
    }
    const std::string& command = args.positional[0];
    if (command == "--version" || command == "version") {
      std::cout << "kv0 " << KV0_VERSION << " (" << kv0::lance::LanceVersion() << ")\n";
      return 0;
    }
    if (command == "--help" || command == "help") {
      std::cout << kUsage;
      return 0;
    }
    if (command == "info") return Info(args);
    if (command == "bench") return Bench(args);
    if (int status = KvCommand(command, args); status >= 0) return status;
    std::cerr << "kv0: unknown command " << command << "\n\n" << kUsage;
    return 2;
  } catch (const kv0::Error& e) {
    std::cerr << "kv0: " << e.what() << "\n";
    return e.code() == kv0::Code::kInvalidArgument ? 2 : 1;
  }
}
