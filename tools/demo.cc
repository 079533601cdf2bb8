// The main job's demo: writes a Lance dataset through libkv0 on a local
// directory, reads it back and prints what it read.
//
//   kv0_demo [DIRECTORY]   (default: ./kv0-demo)

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "kv0/error.h"
#include "lance/dataset.h"

namespace {

using kv0::arrow::Type;

const kv0::arrow::Schema kSchema = {
    {"step", Type::kInt64, false},
    {"loss", Type::kFloat64, false},
    {"phase", Type::kUtf8, true},
    {"at", Type::kTimestampUs, false},
};

kv0::arrow::OwnedStream Steps(int64_t first, int64_t count) {
  kv0::arrow::BatchBuilder builder(kSchema);
  int64_t now = std::chrono::duration_cast<std::chrono::microseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  for (int64_t step = first; step < first + count; ++step) {
    builder.int64(0).Append(step);
    builder.float64(1).Append(2.0 * std::exp(-0.05 * static_cast<double>(step)));
    if (step % 10 == 0) {
      builder.utf8(2).Append("eval");
    } else {
      builder.utf8(2).AppendNull();
    }
    builder.timestamp(3).Append(now + step * 1000);
  }
  std::vector<kv0::arrow::OwnedArray> batches(1);
  builder.Finish(batches[0].get());
  kv0::arrow::OwnedStream stream;
  kv0::arrow::MakeStream(kSchema, std::move(batches), &stream);
  return stream;
}

}  // namespace

int main(int argc, char** argv) {
  std::filesystem::path dir = argc > 1 ? argv[1] : "kv0-demo";
  std::filesystem::create_directories(dir);
  std::string uri = std::filesystem::absolute(dir / "steps.lance").string();
  std::filesystem::remove_all(uri);
  try {
    std::cout << "kv0 demo: " << kv0::lance::LanceVersion() << "\n";
    auto ds = kv0::lance::Dataset::Create(uri, {}, kSchema, {});
    std::cout << "created " << uri << " (version " << ds.version() << ")\n";
    for (int64_t first : {0, 20, 40}) {
      auto commit = ds.Append(Steps(first, 20));
      std::cout << "appended steps " << first << ".." << first + 19 << " as fragment "
                << commit.fragment_ids.at(0) << " in version " << commit.version << "\n";
    }

    kv0::lance::ScanOptions options;
    options.filter = "step % 10 = 0 OR step >= 57";
    auto reader = ds.Scan(options);
    std::cout << "\nread back (" << options.filter << "):\n";
    std::printf("  %5s  %8s  %-5s\n", "step", "loss", "phase");
    while (auto batch = reader.Next()) {
      kv0::arrow::Int64Column step(*batch, "step");
      kv0::arrow::Float64Column loss(*batch, "loss");
      kv0::arrow::Utf8Column phase(*batch, "phase");
      for (int64_t i = 0; i < batch->num_rows(); ++i) {
        std::string p = phase.is_null(i) ? "-" : std::string(phase.value(i));
        std::printf("  %5lld  %8.4f  %-5s\n", static_cast<long long>(step.value(i)), loss.value(i),
                    p.c_str());
      }
    }

    auto compacted = ds.Compact({});
    std::cout << "\ncompacted " << compacted.removed.size() << " fragments into "
              << compacted.added.size() << "; version " << ds.version() << ", " << ds.CountRows()
              << " rows\n";
    return 0;
  } catch (const kv0::Error& e) {
    std::cerr << "demo failed: " << e.what() << "\n";
    return 1;
  }
}
