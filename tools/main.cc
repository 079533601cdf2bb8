// The kv0 command-line tool: inspect and edit databases and repositories.
//
//   kv0 --version
//   kv0 info URI [--storage-option KEY=VALUE]...

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "kv0/error.h"
#include "lance/dataset.h"

namespace {

const char kUsage[] =
    "usage: kv0 <command> [arguments]\n"
    "\n"
    "commands:\n"
    "  --version             print kv0's and Lance's versions\n"
    "  info URI              print a dataset's versions, fragments and schema\n"
    "\n"
    "options:\n"
    "  --storage-option K=V  pass an object-store option to Lance (repeatable)\n";

struct Args {
  std::vector<std::string> positional;
  kv0::lance::StorageOptions storage;
};

Args Parse(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--storage-option") {
      if (i + 1 >= argc) throw kv0::Error(kv0::Code::kInvalidArgument, "--storage-option needs K=V");
      std::string kv = argv[++i];
      auto eq = kv.find('=');
      if (eq == std::string::npos) {
        throw kv0::Error(kv0::Code::kInvalidArgument, "--storage-option needs K=V, got " + kv);
      }
      args.storage[kv.substr(0, eq)] = kv.substr(eq + 1);
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
    std::cerr << "kv0: unknown command " << command << "\n\n" << kUsage;
    return 2;
  } catch (const kv0::Error& e) {
    std::cerr << "kv0: " << e.what() << "\n";
    return e.code() == kv0::Code::kInvalidArgument ? 2 : 1;
  }
}
