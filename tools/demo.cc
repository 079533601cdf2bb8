// The main job's demo: both layers of kv0 on a local directory.
//
//   kv0_demo [DIRECTORY]   (default: ./kv0-demo)
//
// DIRECTORY/tracking is an experiment-tracking repository holding one
// simulated training run, DIRECTORY/kv a key-value database; both are
// recreated on every run and keep their write-ahead logs in DIRECTORY/wal.

#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kv0/error.h"
#include "kv0/kv.h"
#include "kv0/tracking.h"
#include "lance/dataset.h"

namespace {

namespace tracking = kv0::tracking;
using nlohmann::json;

std::string Time(int64_t us) {
  std::time_t seconds = static_cast<std::time_t>(us / 1000000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &utc);
  return buf;
}

// Logs a short simulated training: loss and accuracy on the training set at
// every step, and on the validation set every 50 steps.
std::string Train(tracking::Repo& repo) {
  tracking::NewRun spec;
  spec.name = "mlp-baseline";
  spec.experiment = "digits";
  spec.kind = "training";
  spec.tags = {"demo", "baseline"};
  spec.target = {{"dataset", "digits"}, {"model", "mlp"}};
  tracking::Run run = repo.CreateRun(spec);
  run.SetParams({{"lr", 0.01},
                 {"batch_size", 64},
                 {"optimizer", {{"name", "sgd"}, {"momentum", 0.9}}},
                 {"model", {{"hidden", {128, 64}}, {"dropout", 0.2}}}});

  tracking::TrackOptions train, val;
  train.context = {{"subset", "train"}};
  val.context = {{"subset", "val"}};
  for (int64_t step = 0; step < 500; ++step) {
    double t = static_cast<double>(step);
    double loss = 2.3 * std::exp(-t / 120) + 0.05 + 0.02 * std::sin(t);
    train.step = val.step = step;
    train.epoch = val.epoch = step / 100;
    run.Track(loss, "loss", train);
    run.Track(1 - 0.9 * std::exp(-t / 100), "accuracy", train);
    if (step % 50 == 49) {
      run.Track(loss * 1.1, "loss", val);
      run.Track(0.97 - 0.9 * std::exp(-t / 100), "accuracy", val);
    }
  }
  run.Finish();
  return run.run_id();
}

void ShowRun(tracking::Repo& repo, const std::string& run_id) {
  tracking::RunInfo info = *repo.GetRun(run_id);
  std::cout << "\nrun " << info.run_id << "\n"
            << "  name:       " << info.name.value_or("-") << "\n"
            << "  experiment: " << info.experiment.value_or("-") << "\n"
            << "  kind:       " << info.kind.value_or("-") << "\n"
            << "  target:     " << (info.target ? info.target->dump() : "-") << "\n"
            << "  status:     " << info.status << "\n"
            << "  created:    " << Time(info.created_at_us) << "\n"
            << "  ended:      " << (info.ended_at_us ? Time(*info.ended_at_us) : "-") << "\n";
  std::cout << "\nparameters:\n" << repo.Params(run_id).dump(2) << "\n";

  auto series = repo.Series(run_id);
  std::vector<uint64_t> ids;
  for (const auto& s : series) ids.push_back(s.series_id);
  auto stats = repo.GetSeriesStats(ids);
  std::cout << "\nseries:\n";
  std::printf("  %-9s %-19s %6s %9s %9s %9s\n", "name", "context", "points", "last", "min", "max");
  for (const auto& s : series) {
    const tracking::SeriesStats& st = stats.at(s.series_id);
    std::printf("  %-9s %-19s %6llu %9.4f %9.4f %9.4f\n", s.name.c_str(), s.context.dump().c_str(),
                static_cast<unsigned long long>(st.count), st.last, st.min, st.max);
  }

  // Steps 100..104 of the training loss.
  uint64_t loss_id = tracking::SeriesId(run_id, "loss", {{"subset", "train"}});
  std::vector<uint64_t> one{loss_id};
  auto points = repo.ReadMany(one, {.start = 100, .stop = 105}).at(loss_id);
  std::cout << "\ntraining loss, steps 100..104:\n";
  for (size_t i = 0; i < points.size(); ++i) {
    std::printf("  step %3lld  epoch %lld  loss %.4f\n", static_cast<long long>(points.steps[i]),
                static_cast<long long>(points.epochs[i].value_or(-1)), points.values[i]);
  }
}

void KeyValue(const std::string& uri, const std::string& wal_dir) {
  kv0::kv::Options options;
  options.wal_dir = wal_dir;
  auto db = kv0::kv::DB::Open(uri, options);
  std::cout << "\nkey-value database " << uri << "\n";
  for (const char* fruit : {"apple", "banana", "cherry", "damson", "elderberry"}) {
    db->Put(std::string("fruit/") + fruit, std::to_string(std::strlen(fruit)) + " letters");
  }
  db->Put("veg/carrot", "orange");
  std::cout << "  get fruit/cherry -> " << db->Get("fruit/cherry").value_or("(none)") << "\n";
  db->Delete("fruit/banana");
  std::cout << "  deleted fruit/banana; get -> " << db->Get("fruit/banana").value_or("(none)")
            << "\n";
  db->Flush();
  std::cout << "  scan [fruit/, fruit0):\n";
  auto it = db->NewIterator();
  for (it->Seek("fruit/"); it->Valid() && it->key() < "fruit0"; it->Next()) {
    std::cout << "    " << it->key() << " = " << it->value() << "\n";
  }
  db->Close();
}

}  // namespace

int main(int argc, char** argv) {
  std::filesystem::path dir = argc > 1 ? argv[1] : "kv0-demo";
  dir = std::filesystem::absolute(dir);
  std::string repo_uri = (dir / "tracking").string(), kv_uri = (dir / "kv").string();
  std::string wal_dir = (dir / "wal").string();
  for (const auto& path : {repo_uri, kv_uri, wal_dir}) std::filesystem::remove_all(path);
  std::filesystem::create_directories(dir);
  try {
    std::cout << "kv0 demo: " << kv0::lance::LanceVersion() << "\n";
    tracking::RepoOptions options;
    options.wal_dir = wal_dir;
    auto repo = tracking::Repo::Open(repo_uri, options);
    std::string run_id = Train(repo);
    std::cout << "logged run " << run_id << " into " << repo_uri << "\n";
    ShowRun(repo, run_id);
    repo.Close();
    KeyValue(kv_uri, wal_dir);
    return 0;
  } catch (const kv0::Error& e) {
    std::cerr << "demo failed: " << e.what() << "\n";
    return 1;
  }
}
