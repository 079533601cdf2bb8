// kv0::tracking::Repo on local directories: runs, parameters and series
// written and read back, several handles on one repository, optimize, Arrow
// streams, tables from before the late columns, and a crash between two
// commits of a flush. Expected values are computed here from the points the
// test wrote, never taken from the library.

#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "kv0/error.h"
#include "kv0/tracking.h"
#include "lance/arrow.h"
#include "lance/dataset.h"
#include "test_util.h"
#include "tracking/levels.h"
#include "tracking/schema.h"

extern char** environ;

namespace kv0::tracking {

// Readable failure messages. They live in kv0::tracking so that gtest finds
// them by argument-dependent lookup.
static void PrintTo(const RunInfo& run, std::ostream* os) { *os << nlohmann::json(run).dump(); }
static void PrintTo(const SeriesStats& stats, std::ostream* os) {
  *os << "{count " << stats.count << ", steps " << stats.first_step << ".." << stats.last_step
      << ", last " << stats.last << ", min " << stats.min << " @" << stats.min_step << ", max "
      << stats.max << " @" << stats.max_step << ", non_finite " << stats.non_finite
      << ", last_timestamp_us " << stats.last_timestamp_us << "}";
}
static void PrintTo(const MetricData& data, std::ostream* os) {
  *os << "{" << data.size() << " points:";
  for (size_t i = 0; i < data.size(); ++i) {
    *os << " (" << data.steps[i] << ", "
        << (data.epochs[i] ? std::to_string(*data.epochs[i]) : "null") << ", "
        << data.timestamps_us[i] << ", " << data.values[i] << ")";
  }
  *os << "}";
}
static void PrintTo(const SeriesInfo& s, std::ostream* os) {
  *os << "{" << s.series_id << ", " << s.run_id << ", " << s.name << ", " << s.context.dump()
      << ", " << s.created_at_us << "}";
}
static void PrintTo(const TableVersions& v, std::ostream* os) {
  *os << "{runs " << v.runs << ", params " << v.params << ", series " << v.series << ", metrics "
      << v.metrics << "}";
}

namespace {

using nlohmann::json;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Passes if f throws kv0::Error with `code`.
template <typename F>
::testing::AssertionResult Throws(Code code, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    if (e.code() == code) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "threw " << CodeName(e.code()) << " instead of "
                                         << CodeName(code) << ": " << e.what();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-kv0 exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw " << CodeName(code);
}

// ---------------------------------------------------------------------------
// A model of one series: the points in the order they were written.

struct Pt {
  int64_t step = 0;
  double value = 0;
  int64_t ts = 0;
  std::optional<int64_t> epoch;
};

// What reads see: at each step, the last point written.
std::map<int64_t, Pt> Latest(const std::vector<Pt>& written) {
  std::map<int64_t, Pt> out;
  for (const Pt& p : written) out[p.step] = p;
  return out;
}

MetricData ToData(const std::vector<Pt>& written, StepRange range = {}) {
  MetricData d;
  for (const auto& [step, p] : Latest(written)) {
    if (step < range.start || step >= range.stop) continue;
    d.steps.push_back(step);
    d.epochs.push_back(p.epoch);
    d.timestamps_us.push_back(p.ts);
    d.values.push_back(p.value);
  }
  return d;
}

// The statistics of what reads see, computed directly from the definition in
// tracking.h (ties of min and max never arise in these tests). Timestamps
// grow with the order of writing in every test, so the newest timestamp of
// any point is that of a surviving point.
SeriesStats Expected(const std::vector<Pt>& written) {
  std::map<int64_t, Pt> latest = Latest(written);
  SeriesStats s;
  s.count = latest.size();
  s.first_step = latest.begin()->first;
  s.last_step = latest.rbegin()->first;
  s.last = latest.rbegin()->second.value;
  bool any_finite = false;
  s.last_timestamp_us = std::numeric_limits<int64_t>::min();
  for (const auto& [step, p] : latest) {
    s.last_timestamp_us = std::max(s.last_timestamp_us, p.ts);
    if (!std::isfinite(p.value)) {
      ++s.non_finite;
      continue;
    }
    if (!any_finite || p.value < s.min) s.min = p.value, s.min_step = step;
    if (!any_finite || p.value > s.max) s.max = p.value, s.max_step = step;
    any_finite = true;
  }
  if (!any_finite) s.min = s.max = kNaN;
  return s;
}

// MetricData equality that takes NaN for equal to NaN.
bool SameValue(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

::testing::AssertionResult Same(const MetricData& got, const MetricData& want) {
  bool same = got.steps == want.steps && got.epochs == want.epochs &&
              got.timestamps_us == want.timestamps_us && got.values.size() == want.values.size();
  for (size_t i = 0; same && i < got.values.size(); ++i) {
    same = SameValue(got.values[i], want.values[i]);
  }
  if (same) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "got " << ::testing::PrintToString(got) << "\nwant " << ::testing::PrintToString(want);
}

void Write(Run& run, const std::string& name, const std::vector<Pt>& points,
           const json& context = json::object()) {
  for (const Pt& p : points) {
    TrackOptions o;
    o.step = p.step;
    o.epoch = p.epoch;
    o.timestamp_us = p.ts;
    o.context = context;
    run.Track(p.value, name, o);
  }
}

std::vector<Pt> Concat(std::vector<Pt> a, const std::vector<Pt>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<uint64_t> Ids(std::initializer_list<uint64_t> ids) { return ids; }

// ---------------------------------------------------------------------------
// Raw access to the tables, with kv0::lance::Dataset.

lance::Dataset Table(const std::string& repo, std::string_view table) {
  return lance::Dataset::Open(repo + "/" + std::string(table), {});
}

struct RawRunRow {
  uint64_t seq = 0;
  std::string run_id;
  std::optional<uint32_t> fields;
};

std::vector<RawRunRow> RawRuns(const std::string& repo) {
  lance::ScanOptions options;
  options.columns = {"seq", "run_id", "fields"};
  arrow::StreamReader reader = Table(repo, kRunsTable).Scan(options);
  std::vector<RawRunRow> rows;
  while (auto batch = reader.Next()) {
    arrow::UInt64Column seq(*batch, "seq");
    arrow::Utf8Column run_id(*batch, "run_id");
    arrow::UInt32Column fields(*batch, "fields");
    for (int64_t i = 0; i < batch->num_rows(); ++i) {
      RawRunRow row{seq.value(i), std::string(run_id.value(i)), std::nullopt};
      if (!fields.is_null(i)) row.fields = fields.value(i);
      rows.push_back(row);
    }
  }
  return rows;
}

std::vector<RawRunRow> RawRunsOf(const std::string& repo, const std::string& run_id) {
  std::vector<RawRunRow> out;
  for (RawRunRow& r : RawRuns(repo)) {
    if (r.run_id == run_id) out.push_back(std::move(r));
  }
  return out;
}

// The values of a utf8 column of a table, in scan order.
std::vector<std::string> RawStrings(const std::string& repo, std::string_view table,
                                    const std::string& column) {
  lance::ScanOptions options;
  options.columns = {column};
  arrow::StreamReader reader = Table(repo, table).Scan(options);
  std::vector<std::string> out;
  while (auto batch = reader.Next()) {
    arrow::Utf8Column values(*batch, column);
    for (int64_t i = 0; i < batch->num_rows(); ++i) out.emplace_back(values.value(i));
  }
  return out;
}

// The steps of the metrics rows of one series (statistics rows excluded).
std::vector<int64_t> RawSteps(const std::string& repo, uint64_t series_id) {
  lance::ScanOptions options;
  options.columns = {"series_id", "step"};
  arrow::StreamReader reader = Table(repo, kMetricsTable).Scan(options);
  std::vector<int64_t> out;
  while (auto batch = reader.Next()) {
    arrow::UInt64Column ids(*batch, "series_id");
    arrow::Int64Column steps(*batch, "step");
    for (int64_t i = 0; i < batch->num_rows(); ++i) {
      if (ids.value(i) == series_id) out.push_back(steps.value(i));
    }
  }
  return out;
}

size_t CountEqual(const std::vector<std::string>& values, const std::string& wanted) {
  return std::count(values.begin(), values.end(), wanted);
}

bool IsMark(std::string_view run_id) { return run_id.starts_with(kWalMarkPrefix); }

// name -> (Arrow format, nullable) of a dataset's columns.
std::map<std::string, std::pair<std::string, bool>> Columns(const lance::Dataset& ds) {
  arrow::OwnedSchema schema = ds.Schema();
  std::map<std::string, std::pair<std::string, bool>> out;
  for (int64_t i = 0; i < schema->n_children; ++i) {
    const ArrowSchema* child = schema->children[i];
    out[child->name] = {child->format, (child->flags & ARROW_FLAG_NULLABLE) != 0};
  }
  return out;
}

std::string Format(arrow::Type type) {
  switch (type) {
    case arrow::Type::kUInt32:
      return "I";
    case arrow::Type::kUtf8:
      return "u";
    case arrow::Type::kBinary:
      return "z";
    default:
      return "?";
  }
}

// ---------------------------------------------------------------------------
// Arrow streams of points.

struct StreamResult {
  std::vector<uint64_t> order;  // series in the order the stream gave them
  std::map<uint64_t, MetricData> data;
  std::vector<std::pair<std::string, std::string>> columns;  // (name, format)
};

StreamResult ReadStream(arrow::OwnedStream stream) {
  arrow::StreamReader reader(std::move(stream));
  StreamResult out;
  const ArrowSchema* schema = reader.schema()->get();
  for (int64_t i = 0; i < schema->n_children; ++i) {
    out.columns.emplace_back(schema->children[i]->name, schema->children[i]->format);
  }
  while (auto batch = reader.Next()) {
    arrow::UInt64Column ids(*batch, "series_id");
    arrow::Int64Column steps(*batch, "step");
    arrow::Int64Column epochs(*batch, "epoch");
    arrow::TimestampColumn timestamps(*batch, "timestamp");
    arrow::Float64Column values(*batch, "value");
    for (int64_t i = 0; i < batch->num_rows(); ++i) {
      uint64_t id = ids.value(i);
      if (out.order.empty() || out.order.back() != id) out.order.push_back(id);
      MetricData& d = out.data[id];
      d.steps.push_back(steps.value(i));
      d.epochs.push_back(epochs.is_null(i) ? std::nullopt
                                           : std::optional<int64_t>(epochs.value(i)));
      d.timestamps_us.push_back(timestamps.value(i));
      d.values.push_back(values.value(i));
    }
  }
  return out;
}

const std::vector<std::pair<std::string, std::string>> kStreamColumns = {
    {"series_id", "L"}, {"step", "l"}, {"epoch", "l"}, {"timestamp", "tsu:UTC"}, {"value", "g"}};

// ---------------------------------------------------------------------------

class RepoTest : public ::testing::Test {
 protected:
  RepoOptions Opts() {
    RepoOptions o;
    o.wal_dir = dir_ / "wal";
    o.flush_interval = std::chrono::hours(1);  // tests flush explicitly
    return o;
  }
  std::string Uri() { return dir_ / "repo"; }
  Repo Open() { return Repo::Open(Uri(), Opts()); }

  testing::TempDir dir_;
};

// --- 1. A run written and read back, also from a second handle --------------

TEST_F(RepoTest, WriteAndReadBackFromBothHandles) {
  Repo writer = Open();
  Repo reader = Open();

  NewRun spec;
  spec.run_id = "run-a";
  spec.name = "alpha";
  spec.experiment = "exp-1";
  spec.description = "the first run";
  spec.tags = {"baseline", "gpu"};
  spec.kind = "training";
  spec.target = json{{"dataset", "mnist"}, {"size", 3}};
  spec.created_at_us = 1'700'000'000'000'000;
  tracking::Run run = writer.CreateRun(spec);
  EXPECT_EQ(run.run_id(), "run-a");

  run.SetParams({{"optimizer", {{"lr", 0.1}, {"name", "adam"}}}, {"epochs", 10}});
  run.SetParams({{"optimizer", {{"lr", 0.01}}}, {"seed", 7}});
  const json params = {
      {"optimizer", {{"lr", 0.01}, {"name", "adam"}}}, {"epochs", 10}, {"seed", 7}};

  // loss: steps 0..19, step 3 written again later (the later write wins).
  std::vector<Pt> loss;
  for (int64_t i = 0; i < 20; ++i) {
    loss.push_back(
        {i, 10.0 - 0.37 * i, 1000 + i, i % 2 == 0 ? std::optional<int64_t>(i / 5) : std::nullopt});
  }
  loss.push_back({3, 42.5, 2000, 9});
  Write(run, "loss", loss);
  const json val_context = {{"subset", "val"}, {"fold", 2}};
  std::vector<Pt> acc = {{0, 0.5, 3000}, {5, 0.75, 3001}, {10, 0.875, 3002}};
  Write(run, "acc", acc, val_context);

  const int64_t ended = 1'700'000'000'500'000;
  run.FinishAt("finished", ended);  // flushes the writer

  // Series ids, independently: xxh3 of run id, name and compact sorted context.
  auto xxh = [](const std::string& run_id, const std::string& name, const json& context) {
    std::string bytes = run_id + '\0' + name + '\0' + context.dump();
    uint64_t h = XXH3_64bits(bytes.data(), bytes.size());
    return h == 0 ? uint64_t{1} : h;
  };
  const uint64_t loss_id = SeriesId("run-a", "loss", json::object());
  const uint64_t acc_id = SeriesId("run-a", "acc", val_context);
  EXPECT_EQ(loss_id, xxh("run-a", "loss", json::object()));
  EXPECT_EQ(acc_id, xxh("run-a", "acc", val_context));
  EXPECT_NE(acc_id, SeriesId("run-a", "acc", json::object()));

  RunInfo expected;
  expected.run_id = "run-a";
  expected.name = "alpha";
  expected.experiment = "exp-1";
  expected.description = "the first run";
  expected.tags = {"baseline", "gpu"};
  expected.status = "finished";
  expected.created_at_us = spec.created_at_us.value();
  expected.ended_at_us = ended;
  expected.kind = "training";
  expected.target = spec.target;

  for (Repo* repo : {&writer, &reader}) {
    SCOPED_TRACE(repo == &writer ? "writer" : "reader");
    std::optional<RunInfo> got = repo->GetRun("run-a");
    ASSERT_TRUE(got.has_value());
    EXPECT_GT(got->updated_at_us, 0);
    expected.updated_at_us = got->updated_at_us;
    EXPECT_EQ(*got, expected);
    EXPECT_EQ(repo->Runs(), std::vector<RunInfo>{expected});
    EXPECT_EQ(repo->GetRun("no-such-run"), std::nullopt);

    EXPECT_EQ(repo->Params("run-a"), params);
    EXPECT_EQ(repo->Params("no-such-run"), json::object());
    EXPECT_EQ(repo->AllParams(), (std::map<std::string, json>{{"run-a", params}}));

    std::vector<SeriesInfo> series = repo->Series("run-a");
    std::sort(series.begin(), series.end(),
              [](const SeriesInfo& a, const SeriesInfo& b) { return a.name < b.name; });
    ASSERT_EQ(series.size(), 2u);
    EXPECT_EQ(series[0].series_id, acc_id);
    EXPECT_EQ(series[0].run_id, "run-a");
    EXPECT_EQ(series[0].name, "acc");
    EXPECT_EQ(series[0].context, val_context);
    EXPECT_GT(series[0].created_at_us, 0);
    EXPECT_EQ(series[1].series_id, loss_id);
    EXPECT_EQ(series[1].name, "loss");
    EXPECT_EQ(series[1].context, json::object());
    EXPECT_EQ(repo->AllSeries().size(), 2u);
    EXPECT_TRUE(repo->Series("no-such-run").empty());

    std::map<uint64_t, SeriesStats> stats = repo->GetSeriesStats(Ids({loss_id, acc_id, 12345}));
    EXPECT_EQ(stats, (std::map<uint64_t, SeriesStats>{{loss_id, Expected(loss)},
                                                      {acc_id, Expected(acc)}}));

    std::map<uint64_t, MetricData> all = repo->ReadMany(Ids({loss_id, acc_id, 12345}));
    EXPECT_EQ(all,
              (std::map<uint64_t, MetricData>{{loss_id, ToData(loss)}, {acc_id, ToData(acc)}}));
    ASSERT_TRUE(all.count(loss_id));
    EXPECT_EQ(all[loss_id].size(), 20u);
    EXPECT_EQ(all[loss_id].values[3], 42.5);

    // A narrow range is read without the statistics; an unknown id still
    // reads as nothing.
    StepRange range{3, 10};
    EXPECT_EQ(repo->ReadMany(Ids({loss_id, acc_id, 12345}), range),
              (std::map<uint64_t, MetricData>{{loss_id, ToData(loss, range)},
                                              {acc_id, ToData(acc, range)}}));
    // A range holding no point of acc leaves it out.
    EXPECT_EQ(repo->ReadMany(Ids({loss_id, acc_id}), {11, 15}),
              (std::map<uint64_t, MetricData>{{loss_id, ToData(loss, {11, 15})}}));
  }
}

TEST_F(RepoTest, RunsAreOrderedByCreationThenIdAndGetUuidIds) {
  Repo repo = Open();
  auto create = [&](std::optional<std::string> id, int64_t created) {
    NewRun spec;
    spec.run_id = std::move(id);
    spec.created_at_us = created;
    return repo.CreateRun(spec).run_id();
  };
  create("c", 300);
  create("b", 100);
  create("a", 300);
  std::string generated = create(std::nullopt, 200);
  std::string other = create(std::nullopt, 400);
  EXPECT_EQ(generated.size(), 32u);
  EXPECT_TRUE(std::all_of(generated.begin(), generated.end(), [](unsigned char c) {
    return std::isxdigit(c);
  })) << generated;
  EXPECT_NE(generated, other);
  std::vector<std::string> ids;
  for (const RunInfo& r : repo.Runs()) ids.push_back(r.run_id);
  EXPECT_EQ(ids, (std::vector<std::string>{"b", generated, "a", "c", other}));
  // Defaults of a run created with nothing but an id.
  std::optional<RunInfo> b = repo.GetRun("b");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->status, "running");
  EXPECT_FALSE(b->archived);
  EXPECT_EQ(b->name, std::nullopt);
  EXPECT_EQ(b->ended_at_us, std::nullopt);
  EXPECT_EQ(b->created_at_us, 100);
}

// --- 2. Default steps and ResumeRun -----------------------------------------

TEST_F(RepoTest, DefaultStepsContinueAfterTheLastAndAcrossResume) {
  const json ctx = {{"split", "train"}};
  const uint64_t loss = SeriesId("r", "loss", json::object());
  const uint64_t loss_ctx = SeriesId("r", "loss", ctx);
  {
    Repo repo = Open();
    NewRun spec;
    spec.run_id = "r";
    tracking::Run run = repo.CreateRun(spec);
    TrackOptions at;
    at.timestamp_us = 5;
    run.Track(1.0, "loss", at);  // step 0
    run.Track(2.0, "loss", at);  // step 1
    at.step = 10;
    run.Track(3.0, "loss", at);
    at.step.reset();
    run.Track(4.0, "loss", at);  // step 11
    TrackOptions in_ctx;
    in_ctx.context = ctx;
    run.Track(9.0, "loss", in_ctx);  // another series: step 0
    run.Track(8.0, "loss", in_ctx);  // step 1
    repo.Flush();
    std::map<uint64_t, MetricData> data = repo.ReadMany(Ids({loss, loss_ctx}));
    ASSERT_EQ(data.size(), 2u);
    EXPECT_EQ(data[loss].steps, (std::vector<int64_t>{0, 1, 10, 11}));
    EXPECT_EQ(data[loss].values, (std::vector<double>{1, 2, 3, 4}));
    EXPECT_EQ(data[loss_ctx].steps, (std::vector<int64_t>{0, 1}));
    repo.Close();
  }
  Repo repo = Open();
  tracking::Run resumed = repo.ResumeRun("r");
  EXPECT_EQ(resumed.run_id(), "r");
  resumed.Track(5.0, "loss");
  TrackOptions in_ctx;
  in_ctx.context = ctx;
  resumed.Track(7.0, "loss", in_ctx);
  resumed.Track(1.5, "fresh");  // a new series starts at 0
  repo.Flush();
  std::map<uint64_t, SeriesStats> stats = repo.GetSeriesStats(Ids({loss, loss_ctx}));
  ASSERT_EQ(stats.size(), 2u);
  EXPECT_EQ(stats[loss].last_step, 12);
  EXPECT_EQ(stats[loss].count, 5u);
  EXPECT_EQ(stats[loss].last, 5.0);
  EXPECT_EQ(stats[loss_ctx].last_step, 2);
  EXPECT_EQ(stats[loss_ctx].count, 3u);
  std::map<uint64_t, MetricData> data =
      repo.ReadMany(Ids({loss, SeriesId("r", "fresh", json::object())}));
  EXPECT_EQ(data[loss].steps, (std::vector<int64_t>{0, 1, 10, 11, 12}));
  EXPECT_EQ(data[SeriesId("r", "fresh", json::object())].steps, std::vector<int64_t>{0});

  EXPECT_TRUE(Throws(Code::kNotFound, [&] { repo.ResumeRun("no-such-run"); }));
  EXPECT_TRUE(Throws(Code::kNotFound, [&] { repo.UpdateRun("no-such-run", [](RunInfo&) {}); }));
}

// --- 3. Updates write only the fields they change ---------------------------

TEST_F(RepoTest, UpdatesWriteOnlyTheChangedFields) {
  Repo repo = Open();
  NewRun spec;
  spec.run_id = "u";
  spec.name = "before";
  spec.created_at_us = 1000;
  tracking::Run run = repo.CreateRun(spec);
  repo.Flush();

  auto newest = [&] {
    std::vector<RawRunRow> rows = RawRunsOf(Uri(), "u");
    EXPECT_FALSE(rows.empty());
    return *std::max_element(rows.begin(), rows.end(),
                             [](const RawRunRow& a, const RawRunRow& b) { return a.seq < b.seq; });
  };
  // A creation row sets every field.
  ASSERT_EQ(RawRunsOf(Uri(), "u").size(), 1u);
  EXPECT_EQ(newest().fields, std::optional<uint32_t>(kAllRunFields));

  RunInfo updated = repo.UpdateRun("u", [](RunInfo& r) {
    r.name = "after";
    r.tags = {"t1"};
  });
  EXPECT_EQ(updated.name, "after");
  EXPECT_EQ(updated.tags, std::vector<std::string>{"t1"});
  repo.Flush();
  EXPECT_EQ(RawRunsOf(Uri(), "u").size(), 2u);
  EXPECT_EQ(newest().fields, std::optional<uint32_t>(kFieldName | kFieldTags));
  std::optional<RunInfo> got = repo.GetRun("u");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->name, "after");
  EXPECT_EQ(got->tags, std::vector<std::string>{"t1"});
  EXPECT_EQ(got->created_at_us, 1000);

  RunInfo second = run.Update([](RunInfo& r) {
    r.archived = true;
    r.kind = "eval";
    r.target = json{{"model", "m1"}};
  });
  EXPECT_TRUE(second.archived);
  EXPECT_EQ(second.name, "after");  // the handle's update saw the repo's change
  repo.Flush();
  EXPECT_EQ(newest().fields, std::optional<uint32_t>(kFieldArchived | kFieldKind | kFieldTarget));

  // Nothing changed: nothing is written.
  size_t rows = RawRunsOf(Uri(), "u").size();
  run.Update([](RunInfo& r) { r.name = "after"; });
  repo.UpdateRun("u", [](RunInfo&) {});
  repo.Flush();
  EXPECT_EQ(RawRunsOf(Uri(), "u").size(), rows);

  run.FinishAt("failed", 5000);
  EXPECT_EQ(newest().fields, std::optional<uint32_t>(kFieldStatus | kFieldEndedAt));
  got = repo.GetRun("u");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, "failed");
  EXPECT_EQ(got->ended_at_us, 5000);
  EXPECT_TRUE(got->archived);
  EXPECT_EQ(got->kind, "eval");
  EXPECT_EQ(got->target, (json{{"model", "m1"}}));
  EXPECT_EQ(got->name, "after");
}

// --- 4. Two writers changing one run ----------------------------------------

TEST_F(RepoTest, TwoWritersChangingDifferentFieldsNeverUndoEachOther) {
  for (bool name_writer_first : {true, false}) {
    SCOPED_TRACE(name_writer_first ? "name flushed first" : "status flushed first");
    std::string id = name_writer_first ? "two-a" : "two-b";
    Repo a = Open();
    Repo b = Open();
    NewRun spec;
    spec.run_id = id;
    spec.name = "original";
    a.CreateRun(spec);
    a.Flush();

    tracking::Run b_run = b.ResumeRun(id);
    a.UpdateRun(id, [](RunInfo& r) { r.name = "renamed"; });
    b_run.Update([](RunInfo& r) { r.status = "aborted"; });
    if (name_writer_first) {
      a.Flush();
      b.Flush();
    } else {
      b.Flush();
      a.Flush();
    }
    Repo c = Open();
    for (Repo* repo : {&a, &b, &c}) {
      std::optional<RunInfo> got = repo->GetRun(id);
      ASSERT_TRUE(got);
      EXPECT_EQ(got->name, "renamed");
      EXPECT_EQ(got->status, "aborted");
    }

    // A later change of the same field wins.
    b.UpdateRun(id, [](RunInfo& r) { r.name = "by-b"; });
    b.Flush();
    a.UpdateRun(id, [](RunInfo& r) { r.name = "by-a"; });
    a.Flush();
    for (Repo* repo : {&a, &b, &c}) {
      std::optional<RunInfo> got = repo->GetRun(id);
      ASSERT_TRUE(got);
      EXPECT_EQ(got->name, "by-a");
      EXPECT_EQ(got->status, "aborted");
    }
  }
}

TEST_F(RepoTest, NewestChangeOfAFieldWinsEvenIfCommittedFirst) {
  Repo a = Open();
  Repo b = Open();
  NewRun spec;
  spec.run_id = "race";
  a.CreateRun(spec);
  a.Flush();
  // a's change is older but committed last: the newer one (b's) still wins.
  a.UpdateRun("race", [](RunInfo& r) { r.description = "older"; });
  b.UpdateRun("race", [](RunInfo& r) { r.description = "newer"; });
  b.Flush();
  a.Flush();
  Repo c = Open();
  for (Repo* repo : {&a, &b, &c}) {
    std::optional<RunInfo> got = repo->GetRun("race");
    ASSERT_TRUE(got);
    EXPECT_EQ(got->description, "newer");
  }
}

// --- 5. Two writers tracking one series -------------------------------------

TEST_F(RepoTest, TwoWritersOfOneSeriesBothCount) {
  Repo a = Open();
  Repo b = Open();
  NewRun spec;
  spec.run_id = "shared";
  tracking::Run a_run = a.CreateRun(spec);
  a.Flush();
  tracking::Run b_run = b.ResumeRun("shared");
  const json ctx = {{"a", 1}, {"b", "x"}};
  std::vector<Pt> from_a, from_b;
  for (int64_t i = 0; i < 10; ++i) from_a.push_back({i, 5.0 + i, 100 + i});
  for (int64_t i = 10; i < 20; ++i) from_b.push_back({i, 20.0 - 3 * i, 200 + i});
  from_a.push_back({25, 1000.0, 300});  // the maximum, from a
  Write(a_run, "m", from_a, ctx);
  Write(b_run, "m", from_b, ctx);
  a.Flush();
  b.Flush();
  const uint64_t id = SeriesId("shared", "m", ctx);
  const std::vector<Pt> all = Concat(from_a, from_b);
  SeriesStats expected = Expected(all);
  ASSERT_EQ(expected.count, 21u);
  for (Repo* repo : {&a, &b}) {
    std::map<uint64_t, SeriesStats> stats = repo->GetSeriesStats(Ids({id}));
    ASSERT_EQ(stats.size(), 1u);
    EXPECT_EQ(stats[id], expected);
    EXPECT_EQ(repo->ReadMany(Ids({id})), (std::map<uint64_t, MetricData>{{id, ToData(all)}}));
    EXPECT_EQ(repo->Series("shared").size(), 1u);
  }
}

// With a retention of 0, every table's 20th version starts a background
// cleanup that removes all but its newest version while both writers flush,
// optimize and read.
TEST_F(RepoTest, AutomaticCleanupKeepsEveryPoint) {
  RepoOptions o = Opts();
  o.version_retention = std::chrono::seconds(0);
  Repo a = Repo::Open(Uri(), o);
  Repo b = Repo::Open(Uri(), o);
  NewRun spec;
  spec.run_id = "shared";
  tracking::Run a_run = a.CreateRun(spec);
  a.Flush();
  tracking::Run b_run = b.ResumeRun("shared");
  const uint64_t id = SeriesId("shared", "m", json::object());
  std::vector<Pt> all;
  for (int64_t round = 0; round < 50; ++round) {
    bool by_a = round % 2 == 0;
    std::vector<Pt> points = {{round, 1.0 * round, 100 + round}};
    Write(by_a ? a_run : b_run, "m", points);
    all.push_back(points[0]);
    (by_a ? a : b).Flush();
    if (round == 30) b.Optimize();
    ASSERT_EQ(a.ReadMany(Ids({id})), (std::map<uint64_t, MetricData>{{id, ToData(all)}}))
        << "round " << round;
  }
  EXPECT_EQ(b.GetSeriesStats(Ids({id}))[id], Expected(all));
  EXPECT_LT(lance::Dataset::Open(Uri() + "/metrics.lance", {}).Versions().size(), 40u)
      << "no automatic cleanup ran";
  a.Close();
  b.Close();
  Repo again = Open();
  EXPECT_EQ(again.ReadMany(Ids({id})), (std::map<uint64_t, MetricData>{{id, ToData(all)}}));
}

// --- 6. Time ranges with overwritten steps ----------------------------------

TEST_F(RepoTest, TimeRangesChooseTheLatestPointOfEachStepFirst) {
  Repo repo = Open();
  NewRun spec;
  spec.run_id = "t";
  tracking::Run run = repo.CreateRun(spec);
  std::vector<Pt> first = {{1, 1.0, 50}, {2, 2.0, 150}, {5, 5.0, 100}, {7, 7.0, 400}};
  Write(run, "m", first);
  repo.Flush();
  std::vector<Pt> second = {{6, 6.0, 850}, {5, 55.0, 900}};
  Write(run, "m", second);
  repo.Flush();
  const uint64_t id = SeriesId("t", "m", json::object());

  auto data = [id](std::vector<std::tuple<int64_t, int64_t, double>> points) {
    MetricData d;
    for (auto [step, ts, value] : points) {
      d.steps.push_back(step);
      d.epochs.push_back(std::nullopt);
      d.timestamps_us.push_back(ts);
      d.values.push_back(value);
    }
    return std::map<uint64_t, MetricData>{{id, d}};
  };
  auto early = data({{1, 50, 1.0}, {2, 150, 2.0}, {7, 400, 7.0}});
  auto late = data({{5, 900, 55.0}, {6, 850, 6.0}});
  EXPECT_EQ(repo.ReadManyIn(Ids({id}), {0, 500}), early);
  EXPECT_EQ(repo.ReadManyIn(Ids({id}), {800, 1000}), late);
  EXPECT_EQ(repo.ReadManyIn(Ids({id}), {100, 101}), (std::map<uint64_t, MetricData>{}));
  EXPECT_EQ(repo.ReadManyIn(Ids({id}), {900, 901}), data({{5, 900, 55.0}}));

  arrow::OwnedStream stream;
  repo.ReadManyInStream(Ids({id}), {800, 1000}, stream.get());
  EXPECT_EQ(ReadStream(std::move(stream)).data, late);
}

// --- 7. Optimize --------------------------------------------------------------

TEST_F(RepoTest, OptimizeKeepsReadsFoldsRunsAndIsIdempotent) {
  Repo repo = Open();
  NewRun spec;
  spec.run_id = "opt";
  spec.name = "optimized";
  tracking::Run run = repo.CreateRun(spec);
  run.SetParams({{"lr", 0.1}, {"layers", {1, 2}}});

  std::vector<Pt> points;
  for (int64_t i = 0; i < 50; ++i) points.push_back({i, 100.0 - 0.5 * i, 1000 + i});
  points[30].value = kNaN;
  points[31].value = kInf;
  Write(run, "loss", points);
  repo.Flush();
  std::vector<Pt> more;
  for (int64_t i = 50; i < 100; ++i) more.push_back({i, 0.25 * i, 1000 + i});
  Write(run, "loss", more);
  repo.Flush();
  // Out of order, and overwrites of the maximum (step 0) and of step 20.
  std::vector<Pt> late = {{200, 7.0, 2000}, {150, -3.0, 2001}, {0, 1.0, 2002}, {20, -50.0, 2003}};
  Write(run, "loss", late);
  repo.Flush();
  points = Concat(Concat(points, more), late);
  const uint64_t loss = SeriesId("opt", "loss", json::object());
  const SeriesStats expected = Expected(points);
  ASSERT_EQ(expected.count, 102u);
  ASSERT_EQ(expected.max, 99.5);
  ASSERT_EQ(expected.non_finite, 2u);

  // A run with many updates, to fold.
  NewRun folded_spec;
  folded_spec.run_id = "folded";
  folded_spec.tags = {"x"};
  repo.CreateRun(folded_spec);
  repo.Flush();
  for (int i = 0; i < 10; ++i) {
    repo.UpdateRun("folded", [i](RunInfo& r) { r.description = "d" + std::to_string(i); });
    repo.Flush();
  }
  ASSERT_EQ(RawRunsOf(Uri(), "folded").size(), 11u);

  EXPECT_EQ(repo.GetSeriesStats(Ids({loss}))[loss], expected);
  EXPECT_TRUE(Same(repo.ReadMany(Ids({loss}))[loss], ToData(points)));
  const std::vector<RunInfo> runs = repo.Runs();
  const json params = repo.Params("opt");
  const std::vector<SeriesInfo> series = repo.Series("opt");
  ASSERT_EQ(runs.size(), 2u);
  ASSERT_EQ(series.size(), 1u);
  size_t raw_runs_before = RawRuns(Uri()).size();

  OptimizeStats first = repo.Optimize();
  EXPECT_EQ(first.run_rows_before, raw_runs_before);
  EXPECT_EQ(first.run_rows_after, RawRuns(Uri()).size());
  EXPECT_LT(first.run_rows_after, first.run_rows_before);
  // The creation row (every field) and the last description change.
  EXPECT_EQ(RawRunsOf(Uri(), "folded").size(), 2u);
  EXPECT_TRUE(first.full_rewrite);
  EXPECT_EQ(first.points_rewritten, 102u);
  // Overwritten points are gone from storage.
  EXPECT_EQ(RawSteps(Uri(), loss).size(), 102u);

  auto check_reads = [&](const char* when) {
    SCOPED_TRACE(when);
    EXPECT_EQ(repo.GetSeriesStats(Ids({loss}))[loss], expected);
    EXPECT_TRUE(Same(repo.ReadMany(Ids({loss}))[loss], ToData(points)));
    EXPECT_TRUE(Same(repo.ReadMany(Ids({loss}), {10, 31})[loss], ToData(points, {10, 31})));
    EXPECT_EQ(repo.Runs(), runs);
    EXPECT_EQ(repo.Params("opt"), params);
    EXPECT_EQ(repo.Series("opt"), series);
  };
  check_reads("after the first optimize");
  {
    Repo other = Open();
    EXPECT_EQ(other.GetSeriesStats(Ids({loss}))[loss], expected);
    EXPECT_EQ(other.Runs(), runs);
  }

  lance::Dataset metrics = Table(Uri(), kMetricsTable);
  std::map<std::string, std::string> indices = metrics.Indices();
  EXPECT_TRUE(std::any_of(indices.begin(), indices.end(), [](const auto& index) {
    return index.second == "series_id";
  })) << "no index on metrics.series_id";

  // Nothing new: nothing to do, nothing changes.
  TableVersions versions = repo.LatestVersions();
  OptimizeStats second = repo.Optimize();
  EXPECT_EQ(second.points_rewritten, 0u);
  EXPECT_FALSE(second.full_rewrite);
  EXPECT_EQ(second.run_rows_after, second.run_rows_before);
  EXPECT_EQ(repo.LatestVersions(), versions);
  check_reads("after the second optimize");

  // Rows another handle appends between two optimizes are kept; new points
  // after every sorted step rewrite only their fragment.
  std::vector<Pt> appended;
  for (int64_t i = 300; i < 310; ++i) appended.push_back({i, 0.5 * i, 3000 + i});
  {
    Repo other = Open();
    tracking::Run resumed = other.ResumeRun("opt");
    Write(resumed, "loss", appended);
    NewRun late_spec;
    late_spec.run_id = "late";
    late_spec.created_at_us = 1;
    tracking::Run late_run = other.CreateRun(late_spec);
    late_run.SetParams({{"k", "v"}});
    other.Flush();
  }
  points = Concat(points, appended);
  OptimizeStats third = repo.Optimize();
  EXPECT_FALSE(third.full_rewrite);
  EXPECT_EQ(third.points_rewritten, 10u);
  EXPECT_EQ(repo.GetSeriesStats(Ids({loss}))[loss], Expected(points));
  EXPECT_TRUE(Same(repo.ReadMany(Ids({loss}))[loss], ToData(points)));
  ASSERT_TRUE(repo.GetRun("late"));
  EXPECT_EQ(repo.Params("late"), (json{{"k", "v"}}));
  EXPECT_EQ(repo.Runs().size(), 3u);

  // A step written again below a sorted one: everything is rewritten.
  {
    Repo other = Open();
    tracking::Run resumed = other.ResumeRun("opt");
    std::vector<Pt> again = {{50, -1000.0, 5000}};
    Write(resumed, "loss", again);
    other.Flush();
    points = Concat(points, again);
  }
  EXPECT_EQ(repo.GetSeriesStats(Ids({loss}))[loss], Expected(points))
      << "a resumed handle rewrote step 50, below the stored last step: statistics must not "
         "count the overwritten point";
  OptimizeStats fourth = repo.Optimize();
  EXPECT_TRUE(fourth.full_rewrite);
  EXPECT_EQ(repo.GetSeriesStats(Ids({loss}))[loss], Expected(points));
  EXPECT_TRUE(Same(repo.ReadMany(Ids({loss}))[loss], ToData(points)));
  EXPECT_EQ(RawSteps(Uri(), loss).size(), 112u);
}

// Optimize keeps zone maps on metrics' series_id and step, and drops the
// BTREE on series_id that earlier builds made; reads find the same points.
TEST_F(RepoTest, OptimizeReplacesTheSeriesBTreeWithAZoneMap) {
  std::vector<uint64_t> ids;
  {
    Repo repo = Open();
    for (int r = 0; r < 3; ++r) {
      tracking::Run run = repo.CreateRun(NewRun{.run_id = "zr" + std::to_string(r)});
      std::vector<Pt> points;
      for (int64_t i = 0; i < 300; ++i) points.push_back({i, 1.0 * r * i, 1000 + i});
      Write(run, "loss", points);
      run.Finish();
      ids.push_back(SeriesId(run.run_id(), "loss", json::object()));
    }
    repo.Flush();
  }
  {
    lance::Dataset metrics = Table(Uri(), kMetricsTable);
    metrics.CreateScalarIndex("series_id", kOldSeriesIndexName);
    ASSERT_TRUE(metrics.Indices().count(kOldSeriesIndexName));
  }
  Repo repo = Open();
  repo.Optimize();
  auto indices = Table(Uri(), kMetricsTable).Indices();
  EXPECT_EQ(indices.count(kOldSeriesIndexName), 0u);
  EXPECT_EQ(indices[kSeriesIndexName], "series_id");
  EXPECT_EQ(indices[kStepIndexName], "step");
  auto window = repo.ReadMany(ids, StepRange{100, 110});
  ASSERT_EQ(window.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    const MetricData& data = window.at(ids[r]);
    ASSERT_EQ(data.steps.size(), 10u);
    EXPECT_EQ(data.steps.front(), 100);
    EXPECT_EQ(data.values.back(), 1.0 * r * 109);
  }
}

// Flushes merge metrics' small fragments, but never those optimize sorted
// (their levels and sort order would be lost until the next full rewrite).
TEST_F(RepoTest, FlushMergesLeaveSortedMetricsFragments) {
  RepoOptions o = Opts();
  o.max_fragments = 3;
  Repo repo = Repo::Open(Uri(), o);
  tracking::Run run = repo.CreateRun(NewRun{.run_id = "merged"});
  std::vector<Pt> points;
  for (int64_t i = 0; i < 100; ++i) points.push_back({i, 0.5 * i, 1000 + i});
  Write(run, "loss", points);
  repo.Optimize();
  std::set<uint64_t> sorted;
  for (uint64_t id : FragmentList(Table(Uri(), kMetricsTable).Metadata(), kSortedFragmentsKey)) {
    sorted.insert(id);
  }
  ASSERT_FALSE(sorted.empty());
  for (int64_t i = 100; i < 130; ++i) {
    Write(run, "loss", {{i, 0.5 * i, 1000 + i}});
    points.push_back({i, 0.5 * i, 1000 + i});
    repo.Flush();
  }
  std::set<uint64_t> present;
  size_t unsorted = 0;
  for (const auto& f : Table(Uri(), kMetricsTable).Fragments()) {
    present.insert(f.id);
    unsorted += sorted.count(f.id) ? 0 : 1;
  }
  for (uint64_t id : sorted)
    EXPECT_TRUE(present.count(id)) << "sorted fragment " << id << " merged";
  EXPECT_LE(unsorted, 4u) << "the flushes' fragments were not merged";
  const uint64_t loss = SeriesId("merged", "loss", json::object());
  auto read = repo.ReadMany(std::vector<uint64_t>{loss});
  ASSERT_EQ(read.at(loss).steps.size(), points.size());
  EXPECT_EQ(read.at(loss).values.back(), 0.5 * 129);
}

// Levels listed under the earlier layout's key (4^j widths, another cell
// format) are never decoded: reads ignore them, and the next optimize
// rewrites every fragment once, dropping their rows.
TEST_F(RepoTest, LevelsOfAnEarlierLayoutAreRewrittenOnce) {
  const uint64_t loss = SeriesId("layout", "loss", json::object());
  const std::string level_rows = "series_id = 0 AND value >= 2";
  uint64_t rows_of_levels = 0;
  {
    Repo repo = Open();
    tracking::Run run = repo.CreateRun(NewRun{.run_id = "layout"});
    std::vector<Pt> points;
    for (int64_t i = 0; i < 5000; ++i) points.push_back({i, std::sin(0.01 * i), 1000 + i});
    Write(run, "loss", points);
    EXPECT_GT(repo.Optimize().level_cells, 0u);
    rows_of_levels = Table(Uri(), kMetricsTable).CountRows(level_rows);
    ASSERT_GT(rows_of_levels, 0u);
  }
  {
    // What an earlier build left: its list under its key, none under ours.
    lance::Dataset metrics = Table(Uri(), kMetricsTable);
    const auto metadata = metrics.Metadata();
    metrics.UpdateMetadata({{"kv0.levelled_fragments", metadata.at(kLevelledFragmentsKey)},
                            {kLevelledFragmentsKey, std::nullopt}});
  }
  Repo repo = Open();
  const DownsampleOptions chart{.buckets = 20};
  const auto before = repo.ReadDownsampled(std::vector<uint64_t>{loss}, chart).at(loss);
  const OptimizeStats rewrite = repo.Optimize();
  EXPECT_TRUE(rewrite.full_rewrite);
  EXPECT_EQ(rewrite.points_rewritten, 5000u);
  EXPECT_FALSE(FragmentList(Table(Uri(), kMetricsTable).Metadata(), kLevelledFragmentsKey).empty());
  EXPECT_EQ(Table(Uri(), kMetricsTable).CountRows(level_rows), rows_of_levels);
  const auto after = repo.ReadDownsampled(std::vector<uint64_t>{loss}, chart).at(loss);
  ASSERT_EQ(after.buckets.size(), before.buckets.size());
  for (size_t i = 0; i < before.buckets.size(); ++i) {
    EXPECT_EQ(after.buckets[i].count, before.buckets[i].count) << i;
    EXPECT_EQ(after.buckets[i].max, before.buckets[i].max) << i;
    EXPECT_EQ(after.buckets[i].last_step, before.buckets[i].last_step) << i;
  }
  EXPECT_FALSE(repo.Optimize().full_rewrite);
}

TEST_F(RepoTest, OptimizeKeepsPointsAppendedConcurrently) {
  Repo repo = Open();
  NewRun spec;
  spec.run_id = "busy";
  tracking::Run run = repo.CreateRun(spec);
  std::vector<Pt> base;
  for (int64_t i = 0; i < 200; ++i) base.push_back({i, std::sin(0.1 * i), 10 + i});
  Write(run, "base", base);
  repo.Flush();

  Repo other = Open();
  tracking::Run writer = other.ResumeRun("busy");
  std::vector<Pt> appended;
  for (int64_t i = 0; i < 100; ++i) appended.push_back({i, 1.0 + i, 1000 + i});
    // Under TSan a commit takes seconds (428 s for 20 flushes beside 3
    // optimizes); 10 flushes still overlap every optimize.
#ifdef __SANITIZE_THREAD__
  constexpr int64_t kFlushes = 10;
#else
  constexpr int64_t kFlushes = 20;
#endif
  constexpr int64_t kPerFlush = 100 / kFlushes;
  std::atomic<bool> failed = false;
  std::thread thread([&] {
    try {
      for (int64_t flush = 0; flush < kFlushes; ++flush) {
        Write(writer, "side",
              std::vector<Pt>(appended.begin() + flush * kPerFlush,
                              appended.begin() + (flush + 1) * kPerFlush));
        other.Flush();
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << "writer: " << e.what();
      failed = true;
    }
  });
  for (int i = 0; i < 3; ++i) repo.Optimize();
  thread.join();
  ASSERT_FALSE(failed);
  repo.Optimize();
  const uint64_t base_id = SeriesId("busy", "base", json::object());
  const uint64_t side_id = SeriesId("busy", "side", json::object());
  for (Repo* r : {&repo, &other}) {
    std::map<uint64_t, SeriesStats> stats = r->GetSeriesStats(Ids({base_id, side_id}));
    EXPECT_EQ(stats[base_id], Expected(base));
    EXPECT_EQ(stats[side_id], Expected(appended));
    std::map<uint64_t, MetricData> data = r->ReadMany(Ids({base_id, side_id}));
    EXPECT_EQ(data[base_id], ToData(base));
    EXPECT_EQ(data[side_id], ToData(appended));
  }
  EXPECT_EQ(RawSteps(Uri(), side_id).size(), 100u);
}

// --- 8. Arrow streams -----------------------------------------------------------

TEST_F(RepoTest, ReadManyStreamEqualsReadManyAndOutlivesTheRepo) {
  const uint64_t a = SeriesId("s", "a", json::object());
  const uint64_t b = SeriesId("s", "b", json::object());
  const uint64_t none = SeriesId("s", "none", json::object());
  const std::vector<uint64_t> ids = {b, none, a};
  std::vector<Pt> a_points, b_points;
  for (int64_t i = 0; i < 5000; ++i) a_points.push_back({i, 0.5 * i, 100 + i});
  for (int64_t i = 0; i < 3000; ++i) {
    b_points.push_back(
        {2 * i, -1.0 * i, 100 + i, i % 3 == 0 ? std::optional<int64_t>(i / 100) : std::nullopt});
  }
  b_points.push_back({10, 77.0, 9000});  // an overwrite
  const StepRange range{100, 2500};

  arrow::OwnedStream all, ranged, after_close;
  std::map<uint64_t, MetricData> expected_all, expected_range;
  {
    Repo repo = Open();
    NewRun spec;
    spec.run_id = "s";
    tracking::Run run = repo.CreateRun(spec);
    Write(run, "a", std::vector<Pt>(a_points.begin(), a_points.begin() + 2500));
    Write(run, "b", b_points);
    repo.Flush();
    Write(run, "a", std::vector<Pt>(a_points.begin() + 2500, a_points.end()));
    repo.Flush();

    expected_all = repo.ReadMany(ids);
    expected_range = repo.ReadMany(ids, range);
    EXPECT_EQ(expected_all,
              (std::map<uint64_t, MetricData>{{a, ToData(a_points)}, {b, ToData(b_points)}}));
    EXPECT_EQ(expected_range, (std::map<uint64_t, MetricData>{{a, ToData(a_points, range)},
                                                              {b, ToData(b_points, range)}}));

    repo.ReadManyStream(ids, {}, all.get());
    repo.ReadManyStream(ids, range, ranged.get());
    {
      // A stream already in *out is released first, then *out is filled.
      bool released = false;
      ArrowArrayStream held{};
      held.private_data = &released;
      held.release = [](ArrowArrayStream* self) {
        *static_cast<bool*>(self->private_data) = true;
        self->release = nullptr;
      };
      arrow::OwnedStream reused(&held);
      repo.ReadManyStream(ids, {}, reused.get());
      EXPECT_TRUE(released) << "the stream *out held was not released";
      ASSERT_TRUE(reused);
      StreamResult got = ReadStream(std::move(reused));
      EXPECT_EQ(got.data, expected_all);
    }
    repo.ReadManyStream(ids, range, after_close.get());
    repo.Close();
    StreamResult got = ReadStream(std::move(after_close));
    EXPECT_EQ(got.columns, kStreamColumns);
    EXPECT_EQ(got.order, (std::vector<uint64_t>{b, a}));
    EXPECT_EQ(got.data, expected_range);
  }
  // The repo is gone.
  StreamResult got_all = ReadStream(std::move(all));
  EXPECT_EQ(got_all.columns, kStreamColumns);
  EXPECT_EQ(got_all.order, (std::vector<uint64_t>{b, a}));
  EXPECT_EQ(got_all.data, expected_all);
  StreamResult got_range = ReadStream(std::move(ranged));
  EXPECT_EQ(got_range.order, (std::vector<uint64_t>{b, a}));
  EXPECT_EQ(got_range.data, expected_range);
}

// --- 9. Tables from before the late columns -----------------------------------

arrow::Schema Without(const arrow::Schema& schema, const arrow::Schema& late) {
  arrow::Schema out;
  for (const arrow::Field& f : schema) {
    bool is_late = std::any_of(late.begin(), late.end(),
                               [&](const arrow::Field& l) { return l.name == f.name; });
    if (!is_late) out.push_back(f);
  }
  return out;
}

size_t Col(const arrow::Schema& schema, const std::string& name) {
  for (size_t i = 0; i < schema.size(); ++i) {
    if (schema[i].name == name) return i;
  }
  throw std::runtime_error("no column " + name);
}

arrow::OwnedStream OneBatch(arrow::BatchBuilder& builder) {
  std::vector<arrow::OwnedArray> batches(1);
  builder.Finish(batches[0].get());
  arrow::OwnedStream stream;
  arrow::MakeStream(builder.schema(), std::move(batches), &stream);
  return stream;
}

class OldTablesTest : public RepoTest {
 protected:
  // runs.lance and metrics.lance as kv0 wrote them before the late columns,
  // each with one row, and series.lance naming the old point's series.
  void SetUp() override {
    const arrow::Schema runs = Without(RunsSchema(), RunsLateColumns());
    ASSERT_EQ(runs.size(), RunsSchema().size() - 3);
    arrow::BatchBuilder run(runs);
    run.uint64(Col(runs, "seq")).Append(1000);
    run.utf8(Col(runs, "run_id")).Append("old-run");
    run.utf8(Col(runs, "name")).Append("legacy");
    run.utf8(Col(runs, "experiment")).Append("exp");
    run.utf8(Col(runs, "description")).AppendNull();
    run.list_utf8(Col(runs, "tags")).Append({"a", "b"});
    run.utf8(Col(runs, "status")).Append("finished");
    run.boolean(Col(runs, "archived")).Append(true);
    run.timestamp(Col(runs, "created_at")).Append(5'000'000);
    run.timestamp(Col(runs, "updated_at")).Append(6'000'000);
    run.timestamp(Col(runs, "ended_at")).Append(7'000'000);
    CreateAsEarlierBuilds(Uri() + "/runs.lance", runs).Append(OneBatch(run));

    const arrow::Schema metrics = Without(MetricsSchema(), MetricsLateColumns());
    ASSERT_EQ(metrics.size(), MetricsSchema().size() - MetricsLateColumns().size());
    arrow::BatchBuilder point(metrics);
    point.uint64(Col(metrics, "series_id")).Append(series_id_);
    point.int64(Col(metrics, "step")).Append(3);
    point.int64(Col(metrics, "epoch")).AppendNull();
    point.timestamp(Col(metrics, "timestamp")).Append(6'500'000);
    point.float64(Col(metrics, "value")).Append(2.5);
    CreateAsEarlierBuilds(Uri() + "/metrics.lance", metrics).Append(OneBatch(point));

    const arrow::Schema& series = SeriesSchema();
    arrow::BatchBuilder s(series);
    s.uint64(Col(series, "series_id")).Append(series_id_);
    s.utf8(Col(series, "run_id")).Append("old-run");
    s.utf8(Col(series, "name")).Append("loss");
    s.utf8(Col(series, "context")).Append("{}");
    s.timestamp(Col(series, "created_at")).Append(5'500'000);
    CreateAsEarlierBuilds(Uri() + "/series.lance", series).Append(OneBatch(s));
  }

  // Earlier builds had Lance clean up inside every 20th commit.
  static lance::Dataset CreateAsEarlierBuilds(const std::string& uri, const arrow::Schema& schema) {
    auto dataset = lance::Dataset::Create(uri, {}, schema);
    dataset.UpdateConfig(
        {{"lance.auto_cleanup.interval", "20"}, {"lance.auto_cleanup.older_than", "7days"}});
    return dataset;
  }

  RunInfo OldRun() {
    RunInfo r;
    r.run_id = "old-run";
    r.name = "legacy";
    r.experiment = "exp";
    r.tags = {"a", "b"};
    r.status = "finished";
    r.archived = true;
    r.created_at_us = 5'000'000;
    r.updated_at_us = 6'000'000;
    r.ended_at_us = 7'000'000;
    return r;
  }

  const uint64_t series_id_ = SeriesId("old-run", "loss", json::object());
};

TEST_F(OldTablesTest, OpenAddsLateColumnsAndOldRowsSetEveryField) {
  Repo repo = Open();

  auto runs = Columns(Table(Uri(), kRunsTable));
  for (const arrow::Field& f : RunsLateColumns()) {
    ASSERT_TRUE(runs.count(f.name)) << "runs.lance lacks " << f.name;
    EXPECT_EQ(runs[f.name].first, Format(f.type)) << f.name;
    EXPECT_TRUE(runs[f.name].second) << f.name << " is not nullable";
  }
  EXPECT_EQ(runs.size(), RunsSchema().size());
  auto metrics = Columns(Table(Uri(), kMetricsTable));
  ASSERT_TRUE(metrics.count("stats")) << "metrics.lance lacks stats";
  EXPECT_EQ(metrics["stats"].first, "z");
  EXPECT_TRUE(metrics["stats"].second);
  EXPECT_EQ(metrics.size(), MetricsSchema().size());

  // The old row is still there, with a null mask.
  std::vector<RawRunRow> raw = RawRunsOf(Uri(), "old-run");
  ASSERT_EQ(raw.size(), 1u);
  EXPECT_EQ(raw[0].seq, 1000u);
  EXPECT_EQ(raw[0].fields, std::nullopt);

  EXPECT_EQ(repo.GetRun("old-run"), OldRun());
  EXPECT_EQ(repo.Runs(), std::vector<RunInfo>{OldRun()});
  EXPECT_EQ(repo.ReadMany(Ids({series_id_})),
            (std::map<uint64_t, MetricData>{
                {series_id_, MetricData{{3}, {std::nullopt}, {6'500'000}, {2.5}}}}));

  // A change of one field keeps the others the old row set.
  repo.UpdateRun("old-run", [](RunInfo& r) { r.name = "renamed"; });
  repo.Flush();
  RunInfo expected = OldRun();
  expected.name = "renamed";
  std::optional<RunInfo> got = repo.GetRun("old-run");
  ASSERT_TRUE(got);
  expected.updated_at_us = got->updated_at_us;
  EXPECT_EQ(*got, expected);

  // Lance no longer cleans up inside commits (kv0 does, after them).
  for (std::string_view table : {kRunsTable, kMetricsTable, kSeriesTable}) {
    for (const auto& [key, value] : Table(Uri(), table).Config()) {
      EXPECT_FALSE(key.starts_with("lance.auto_cleanup")) << table << " keeps " << key;
    }
  }

  // Opening again finds the columns in place.
  repo.Close();
  Repo again = Open();
  EXPECT_EQ(again.GetRun("old-run"), expected);
}

TEST_F(OldTablesTest, OldPointsWithoutStatisticsRowsHaveStatistics) {
  Repo repo = Open();
  SeriesStats expected;
  expected.count = 1;
  expected.first_step = expected.last_step = 3;
  expected.last = expected.min = expected.max = 2.5;
  expected.min_step = expected.max_step = 3;
  expected.last_timestamp_us = 6'500'000;
  std::map<uint64_t, SeriesStats> stats = repo.GetSeriesStats(Ids({series_id_}));
  EXPECT_EQ(stats, (std::map<uint64_t, SeriesStats>{{series_id_, expected}}))
      << "the series has a point, so it must have statistics";

  // Resuming continues after the stored last step.
  tracking::Run run = repo.ResumeRun("old-run");
  TrackOptions at;
  at.timestamp_us = 7'000'000;
  run.Track(1.0, "loss", at);
  repo.Flush();
  std::map<uint64_t, MetricData> data = repo.ReadMany(Ids({series_id_}));
  EXPECT_EQ(data[series_id_].steps, (std::vector<int64_t>{3, 4}));
}

// --- 10. LatestVersions ---------------------------------------------------------

TEST_F(RepoTest, LatestVersionsMoveWithCommitsNotWithReads) {
  Repo a = Open();
  Repo b = Open();
  const TableVersions start = a.LatestVersions();
  EXPECT_EQ(b.LatestVersions(), start);
  a.Runs();
  a.AllParams();
  a.AllSeries();
  EXPECT_EQ(a.LatestVersions(), start);

  NewRun spec;
  spec.run_id = "v";
  tracking::Run run = b.CreateRun(spec);
  run.Track(1.0, "m");
  b.Flush();
  const TableVersions after = a.LatestVersions();
  EXPECT_GT(after.runs, start.runs);
  EXPECT_GT(after.series, start.series);
  EXPECT_GT(after.metrics, start.metrics);
  EXPECT_EQ(after.params, start.params);  // nothing to commit there
  EXPECT_EQ(b.LatestVersions(), after);

  const uint64_t id = SeriesId("v", "m", json::object());
  a.Runs();
  a.AllParams();
  a.AllSeries();
  a.GetSeriesStats(Ids({id}));
  a.ReadMany(Ids({id}));
  EXPECT_EQ(a.LatestVersions(), after);
  // a read every table at its newest version.
  EXPECT_EQ(a.Versions(), after);
  EXPECT_EQ(b.Versions().runs, after.runs);
  EXPECT_EQ(b.Versions().metrics, after.metrics);

  run.SetParams({{"p", 1}});
  b.Flush();
  const TableVersions params_only = a.LatestVersions();
  EXPECT_GT(params_only.params, after.params);
  EXPECT_EQ(params_only.metrics, after.metrics);
  EXPECT_EQ(params_only.series, after.series);
}

// --- 11. A crash before the metrics commit of a flush ---------------------------

TEST_F(RepoTest, CrashBeforeTheMetricsCommitReplaysTheRest) {
  int status = testing::RunChild({testing::CrashChildPath(), Uri(), dir_ / "wal"});
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of a signal: " << status;
  ASSERT_EQ(WEXITSTATUS(status), 0) << "3: the flush hook never fired";

  const std::string id = "crashed";
  const uint64_t loss = SeriesId(id, "loss", json::object());
  // Where the child stopped: runs, params and series committed, metrics not.
  ASSERT_EQ(RawRunsOf(Uri(), id).size(), 1u);
  ASSERT_EQ(CountEqual(RawStrings(Uri(), kParamsTable, "run_id"), id), 3u);
  ASSERT_EQ(CountEqual(RawStrings(Uri(), kSeriesTable, "run_id"), id), 1u);
  ASSERT_TRUE(RawSteps(Uri(), loss).empty());

  std::vector<Pt> points;
  for (int64_t i = 0; i < 100; ++i) points.push_back({i, i * 0.5, 1'000'000 + i});
  const json params = {{"lr", 0.5}, {"model", {{"act", "relu"}, {"layers", 4}}}};

  for (int open = 0; open < 2; ++open) {
    SCOPED_TRACE(open == 0 ? "first open (replays)" : "second open");
    Repo repo = Open();
    // Each row exactly once: replay skipped what the marks cover.
    EXPECT_EQ(RawRunsOf(Uri(), id).size(), 1u);
    EXPECT_EQ(CountEqual(RawStrings(Uri(), kParamsTable, "run_id"), id), 3u);
    EXPECT_EQ(CountEqual(RawStrings(Uri(), kSeriesTable, "run_id"), id), 1u);
    std::vector<int64_t> steps = RawSteps(Uri(), loss);
    EXPECT_EQ(steps.size(), 100u);
    EXPECT_EQ(std::set<int64_t>(steps.begin(), steps.end()).size(), 100u);

    std::optional<RunInfo> run = repo.GetRun(id);
    ASSERT_TRUE(run);
    EXPECT_EQ(run->name, "crash");
    EXPECT_EQ(run->created_at_us, 1'000'000);
    EXPECT_EQ(repo.Params(id), params);
    std::vector<SeriesInfo> series = repo.Series(id);
    ASSERT_EQ(series.size(), 1u);
    EXPECT_EQ(series[0].series_id, loss);
    EXPECT_EQ(repo.GetSeriesStats(Ids({loss})),
              (std::map<uint64_t, SeriesStats>{{loss, Expected(points)}}));
    EXPECT_EQ(repo.ReadMany(Ids({loss})), (std::map<uint64_t, MetricData>{{loss, ToData(points)}}));

    // Mark rows exist and no read takes them for runs, params or series.
    std::vector<RawRunRow> raw = RawRuns(Uri());
    EXPECT_TRUE(std::any_of(raw.begin(), raw.end(), [](const RawRunRow& r) {
      return IsMark(r.run_id);
    })) << "no WAL mark row in runs.lance";
    std::vector<RunInfo> runs = repo.Runs();
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_EQ(runs[0].run_id, id);
    std::map<std::string, json> all_params = repo.AllParams();
    EXPECT_EQ(all_params.size(), 1u);
    EXPECT_EQ(all_params.count(id), 1u);
    std::vector<SeriesInfo> all_series = repo.AllSeries();
    ASSERT_EQ(all_series.size(), 1u);
    EXPECT_EQ(all_series[0].run_id, id);
  }
}

// --- 12. Errors -------------------------------------------------------------------

TEST_F(RepoTest, InvalidArgumentsAreRejectedAndWriteNothing) {
  Repo repo = Open();
  NewRun spec;
  spec.run_id = "e";
  tracking::Run run = repo.CreateRun(spec);

  EXPECT_TRUE(Throws(Code::kInvalidArgument, [&] { run.Track(1.0, ""); }));
  for (const json& context : {json::array({1, 2}), json(5), json("text"), json(nullptr)}) {
    TrackOptions o;
    o.context = context;
    EXPECT_TRUE(Throws(Code::kInvalidArgument, [&] { run.Track(1.0, "m", o); })) << context.dump();
  }
  EXPECT_TRUE(Throws(Code::kInvalidArgument, [&] { SeriesId("e", "m", json::array()); }));
  EXPECT_TRUE(Throws(Code::kInvalidArgument, [&] { run.SetParams(json::array({1})); }));
  EXPECT_TRUE(Throws(Code::kInvalidArgument, [&] { run.SetParams({{"a.b", 1}}); }));
  EXPECT_TRUE(Throws(Code::kInvalidArgument, [&] { run.Finish("done"); }));
  EXPECT_TRUE(Throws(Code::kInvalidArgument, [&] { run.FinishAt("bogus", 10); }));

  repo.Flush();
  EXPECT_TRUE(repo.Series("e").empty());
  EXPECT_EQ(repo.Params("e"), json::object());
  std::optional<RunInfo> got = repo.GetRun("e");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, "running");
  EXPECT_EQ(got->ended_at_us, std::nullopt);
}

TEST_F(RepoTest, CallsAfterCloseAreNotSupported) {
  Repo repo = Open();
  NewRun spec;
  spec.run_id = "closed";
  tracking::Run run = repo.CreateRun(spec);
  run.Track(1.0, "m");
  tracking::Run copy = run;
  repo.Close();

  const uint64_t id = SeriesId("closed", "m", json::object());
  const Code kNS = Code::kNotSupported;
  EXPECT_TRUE(Throws(kNS, [&] { repo.Runs(); }));
  EXPECT_TRUE(Throws(kNS, [&] { repo.GetRun("closed"); }));
  EXPECT_TRUE(Throws(kNS, [&] { repo.Params("closed"); }));
  EXPECT_TRUE(Throws(kNS, [&] { repo.AllParams(); }));
  EXPECT_TRUE(Throws(kNS, [&] { repo.Series("closed"); }));
  EXPECT_TRUE(Throws(kNS, [&] { repo.AllSeries(); }));
  EXPECT_TRUE(Throws(kNS, [&] { repo.GetSeriesStats(Ids({id})); }));
  EXPECT_TRUE(Throws(kNS, [&] { repo.ReadMany(Ids({id})); }));
  EXPECT_TRUE(Throws(kNS, [&] { repo.ReadManyIn(Ids({id}), {}); }));
  EXPECT_TRUE(Throws(kNS, [&] {
    arrow::OwnedStream s;
    repo.ReadManyStream(Ids({id}), {}, s.get());
  }));
  EXPECT_TRUE(Throws(kNS, [&] { repo.CreateRun(NewRun{}); }));
  EXPECT_TRUE(Throws(kNS, [&] { repo.ResumeRun("closed"); }));
  EXPECT_TRUE(Throws(kNS, [&] { repo.UpdateRun("closed", [](RunInfo& r) { r.name = "x"; }); }));
  EXPECT_TRUE(Throws(kNS, [&] { repo.Flush(); }));
  EXPECT_TRUE(Throws(kNS, [&] { repo.Optimize(); }));
  EXPECT_TRUE(Throws(kNS, [&] { repo.LatestVersions(); }));
  EXPECT_TRUE(Throws(kNS, [&] { run.Track(2.0, "m"); }));
  EXPECT_TRUE(Throws(kNS, [&] { copy.SetParams({{"a", 1}}); }));
  EXPECT_TRUE(Throws(kNS, [&] { run.Update([](RunInfo& r) { r.name = "x"; }); }));
  EXPECT_TRUE(Throws(kNS, [&] { run.Finish(); }));
  EXPECT_EQ(run.run_id(), "closed");

  // Close flushed: a new handle sees the point.
  Repo reopened = Open();
  EXPECT_EQ(reopened.ReadMany(Ids({id}))[id].steps, std::vector<int64_t>{0});
}

// --- A failed flush keeps what it did not commit -----------------------------

// Fails the flush's series commit: the runs, in the same round, are
// committed; params and points, in the round after, are not tried.
void FailSeriesCommits(const std::string& uri, std::string_view, bool committed) {
  if (!committed && uri.ends_with("/series.lance")) throw Error(Code::kIOError, "injected failure");
}

TEST_F(RepoTest, FailedFlushKeepsTheRowsItDidNotCommit) {
  Repo repo = Open();
  tracking::Run run = repo.CreateRun(NewRun{.name = "r"});
  run.SetParams({{"lr", 0.5}});
  for (int i = 0; i < 20; ++i) run.Track(i, "loss");
  uint64_t id = SeriesId(run.run_id(), "loss", nlohmann::json::object());

  lance::SetCommitHookForTesting(FailSeriesCommits);
  EXPECT_THROW(repo.Flush(), Error);
  lance::SetCommitHookForTesting(nullptr);
  auto stored_rows_of = [&](std::string_view table) {
    return CountEqual(RawStrings(Uri(), table, "run_id"), run.run_id());
  };
  EXPECT_EQ(RawRunsOf(Uri(), run.run_id()).size(), 1u);
  EXPECT_EQ(stored_rows_of(kParamsTable), 0u);
  EXPECT_EQ(stored_rows_of(kSeriesTable), 0u);
  EXPECT_TRUE(RawSteps(Uri(), id).empty());

  repo.Flush();
  std::vector<int64_t> steps = RawSteps(Uri(), id);
  std::sort(steps.begin(), steps.end());
  std::vector<int64_t> expected(20);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(steps, expected);  // each point once
  EXPECT_EQ(RawRunsOf(Uri(), run.run_id()).size(), 1u);
  EXPECT_EQ(repo.Params(run.run_id()), nlohmann::json({{"lr", 0.5}}));
  EXPECT_EQ(repo.GetSeriesStats(std::vector<uint64_t>{id}).at(id).count, 20u);
}

// A flush commits in two rounds, each round's tables at once: runs beside
// series, then params beside metrics. The runs' commit waits (up to a minute)
// for the series' to begin, which a flush committing one table after another
// never does; and no commit of the second round begins before both of the
// first have ended, whatever their speed.
TEST_F(RepoTest, FlushCommitsRunsBesideSeriesThenParamsBesideMetrics) {
  Repo repo = Open();
  tracking::Run run = repo.CreateRun(NewRun{.name = "r"});
  run.SetParams({{"lr", 0.5}});
  for (int i = 0; i < 20; ++i) run.Track(i, "loss");

  std::mutex mu;
  std::condition_variable changed;
  std::vector<std::string> events;  // "<table> begins" or "<table> ends"
  bool runs_met_series = false;
  lance::SetCommitHookForTesting([&](const std::string& uri, std::string_view, bool committed) {
    std::string table = std::filesystem::path(uri).stem().string();
    std::unique_lock lock(mu);
    events.push_back(table + (committed ? " ends" : " begins"));
    changed.notify_all();
    if (table == "runs" && !committed) {
      runs_met_series = changed.wait_for(lock, std::chrono::minutes(1), [&] {
        return std::ranges::count(events, "series begins") > 0;
      });
    }
  });
  repo.Flush();
  lance::SetCommitHookForTesting(nullptr);

  EXPECT_TRUE(runs_met_series);
  auto at = [&](const std::string& event) {
    auto it = std::ranges::find(events, event);
    EXPECT_NE(it, events.end()) << event;
    return it - events.begin();
  };
  for (const char* second : {"params begins", "metrics begins"}) {
    EXPECT_LT(at("runs ends"), at(second)) << second;
    EXPECT_LT(at("series ends"), at(second)) << second;
  }
  EXPECT_EQ(events.size(), 8u);
  EXPECT_EQ(repo.Params(run.run_id()), nlohmann::json({{"lr", 0.5}}));
}

// TryTrack refuses the point that would make the caller wait for a flush,
// counting as buffered the points of failed flushes (put back) and of a
// flush under way (a failure would put them back); Track takes it.
TEST_F(RepoTest, TryTrackWritesNothingWhenTheCallWouldWaitForAFlush) {
  RepoOptions options = Opts();
  options.flush_rows = 5;
  Repo repo = Repo::Open(Uri(), options);
  tracking::Run run = repo.CreateRun(NewRun{.name = "r"});
  uint64_t id = SeriesId(run.run_id(), "loss", nlohmann::json::object());

  lance::SetCommitHookForTesting(FailSeriesCommits);
  for (int i = 0; i < 9; ++i) EXPECT_TRUE(run.TryTrack(i, "loss"));
  // Once this returns no flush is under way, and every flush after it
  // starts with the nine points.
  EXPECT_THROW(repo.Flush(), Error);
  EXPECT_FALSE(run.TryTrack(9, "loss"));

  std::optional<bool> accepted;  // TryTrack while a flush commits the nine
  lance::SetCommitHookForTesting([&](const std::string& uri, std::string_view, bool committed) {
    if (!committed && uri.ends_with("/series.lance") && !accepted) {
      accepted = run.TryTrack(9, "loss");
    }
  });
  repo.Flush();
  lance::SetCommitHookForTesting(nullptr);
  ASSERT_TRUE(accepted.has_value());
  EXPECT_FALSE(*accepted);
  EXPECT_EQ(RawSteps(Uri(), id).size(), 9u);  // the refused points were not written

  run.Track(9, "loss");
  repo.Flush();
  std::vector<int64_t> steps = RawSteps(Uri(), id);
  std::sort(steps.begin(), steps.end());
  std::vector<int64_t> expected(10);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(steps, expected);
}

// --- finish_waits = false ------------------------------------------------------

// A finish that does not wait is committed by the background flush it
// starts: a second handle sees the status and the points without any other
// flush of the writer's.
TEST_F(RepoTest, FinishWithoutWaitingIsCommittedByTheFlushItStarts) {
  RepoOptions options = Opts();  // flush_interval of an hour: no timed flush
  options.finish_waits = false;
  Repo writer = Repo::Open(Uri(), options);
  tracking::Run run = writer.CreateRun(NewRun{.name = "r"});
  for (int i = 0; i < 3; ++i) run.Track(i, "loss");
  run.Finish();

  RepoOptions reader_options = Opts();
  reader_options.wal_dir = dir_ / "reader-wal";
  Repo reader = Repo::Open(Uri(), reader_options);
  // Eventually, not within a time: the loop's bound only stops a hang. The
  // points are committed last (runs, params, series, metrics), so once they
  // are seen the whole flush is.
  uint64_t id = SeriesId(run.run_id(), "loss", nlohmann::json::object());
  auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  while (RawSteps(Uri(), id).size() < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(RawSteps(Uri(), id).size(), 3u);
  std::optional<RunInfo> seen = reader.GetRun(run.run_id());
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->status, "finished");
  EXPECT_EQ(seen->name, "r");  // the finish's row sets two fields only
}

// A finish writes the status and the end time only: what another handle
// changed meanwhile, and every field it leaves alone, is kept, also once
// optimize has folded the rows.
TEST_F(RepoTest, FinishKeepsTheFieldsItDoesNotSet) {
  for (bool waits : {true, false}) {
    RepoOptions options = Opts();
    options.finish_waits = waits;
    Repo writer = Repo::Open(Uri(), options);
    tracking::Run run = writer.CreateRun(
        NewRun{.name = "r", .experiment = "e", .tags = {"a"}, .created_at_us = 1000});
    writer.Flush();
    RepoOptions other_options = Opts();
    other_options.wal_dir = dir_ / "other-wal";
    {
      Repo other = Repo::Open(Uri(), other_options);
      other.UpdateRun(run.run_id(), [](RunInfo& info) { info.name = "renamed"; });
    }
    run.FinishAt("failed", 5000);
    writer.Close();

    Repo reader = Open();
    for (int pass = 0; pass < 2; ++pass) {
      std::optional<RunInfo> info = reader.GetRun(run.run_id());
      ASSERT_TRUE(info.has_value());
      EXPECT_EQ(info->name, "renamed");
      EXPECT_EQ(info->experiment, "e");
      EXPECT_EQ(info->tags, std::vector<std::string>{"a"});
      EXPECT_EQ(info->created_at_us, 1000);
      EXPECT_EQ(info->status, "failed");
      EXPECT_EQ(info->ended_at_us, 5000);
      reader.Optimize();
    }
  }
}

// Its commit failing, a finish that waits throws; one that does not wait
// has acknowledged the status, which the WAL keeps through the failed
// close for the next open to commit.
TEST_F(RepoTest, FinishWithoutWaitingSurvivesItsCommitFailing) {
  auto fail_all = [](const std::string&, std::string_view, bool committed) {
    if (!committed) throw Error(Code::kIOError, "injected failure");
  };
  std::string waited_id, id;
  {
    Repo repo = Open();
    tracking::Run waited = repo.CreateRun(NewRun{.name = "waits"});
    waited_id = waited.run_id();
    lance::SetCommitHookForTesting(fail_all);
    EXPECT_THROW(waited.Finish(), Error);
    lance::SetCommitHookForTesting(nullptr);
  }
  {
    RepoOptions options = Opts();
    options.finish_waits = false;
    Repo repo = Repo::Open(Uri(), options);
    tracking::Run run = repo.CreateRun(NewRun{.name = "does not wait"});
    id = run.run_id();
    run.Track(0.5, "loss");
    lance::SetCommitHookForTesting(fail_all);
    EXPECT_NO_THROW(run.Finish());
  }  // the close fails too, leaving the WAL for the next open
  lance::SetCommitHookForTesting(nullptr);

  Repo reopened = Open();
  for (const std::string& run_id : {waited_id, id}) {
    std::optional<RunInfo> info = reopened.GetRun(run_id);
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->status, "finished");  // the WAL kept the finish that threw, too
  }
  EXPECT_EQ(RawSteps(Uri(), SeriesId(id, "loss", nlohmann::json::object())).size(), 1u);
}

// --- optimize() within a memory bound -----------------------------------------

// The (series_id, step) pairs of the metrics points in storage order.
std::vector<std::pair<uint64_t, int64_t>> StoredOrder(const std::string& repo) {
  lance::ScanOptions options;
  options.columns = {"series_id", "step"};
  options.filter = "series_id <> 0";
  arrow::StreamReader reader = Table(repo, kMetricsTable).Scan(options);
  std::vector<std::pair<uint64_t, int64_t>> out;
  while (auto batch = reader.Next()) {
    arrow::UInt64Column ids(*batch, "series_id");
    arrow::Int64Column steps(*batch, "step");
    for (int64_t i = 0; i < batch->num_rows(); ++i) out.emplace_back(ids.value(i), steps.value(i));
  }
  return out;
}

TEST_F(RepoTest, OptimizeSortsInPassesThatFitItsMemoryBound) {
  RepoOptions options = Opts();
  options.optimize_memory = 1 << 20;  // about 16 000 points per pass
  Repo repo = Repo::Open(Uri(), options);
  tracking::Run run = repo.CreateRun(NewRun{.name = "big"});
  // Interleaved writes, so storage order is far from sorted; "huge" alone
  // exceeds one pass and is split by steps.
  std::map<std::string, std::vector<Pt>> written;
  for (int64_t step = 0; step < 40000; ++step) {
    for (const char* name : {"a", "b", "huge"}) {
      if (std::string(name) != "huge" && step >= 9000) continue;
      int64_t s = step % 2 == 0 ? step : 40000 - step;  // out of order
      double value = static_cast<double>((step * 7919) % 1000);
      run.Track(value, name, TrackOptions{.step = s, .timestamp_us = 1000 + step});
      written[name].push_back(Pt{s, value, 1000 + step});
    }
    if (step % 5000 == 4999) repo.Flush();
  }
  run.Finish();
  OptimizeStats stats = repo.Optimize();
  EXPECT_TRUE(stats.full_rewrite);

  auto order = StoredOrder(Uri());
  EXPECT_TRUE(std::is_sorted(order.begin(), order.end()));
  for (const auto& [name, points] : written) {
    uint64_t id = SeriesId(run.run_id(), name, nlohmann::json::object());
    EXPECT_EQ(repo.GetSeriesStats(std::vector<uint64_t>{id}).at(id), Expected(points)) << name;
    EXPECT_EQ(repo.ReadMany(std::vector<uint64_t>{id}, StepRange{100, 200}).at(id),
              ToData(points, StepRange{100, 200}))
        << name;
  }
}

// --- Deleting runs ------------------------------------------------------------

TEST_F(RepoTest, DeletedRunsVanishFromEveryReadAndTable) {
  Repo repo = Open();
  tracking::Run gone = repo.CreateRun(NewRun{.name = "gone"});
  tracking::Run kept = repo.CreateRun(NewRun{.name = "kept"});
  for (tracking::Run* run : {&gone, &kept}) {
    run->SetParams({{"lr", 0.1}});
    for (int i = 0; i < 10; ++i) run->Track(i, "loss");
  }
  repo.Flush();
  uint64_t gone_series = SeriesId(gone.run_id(), "loss", nlohmann::json::object());
  uint64_t kept_series = SeriesId(kept.run_id(), "loss", nlohmann::json::object());

  std::vector<std::string> ids = {gone.run_id(), "no-such-run"};
  repo.DeleteRuns(ids);

  ASSERT_EQ(repo.Runs().size(), 1u);
  EXPECT_EQ(repo.Runs()[0].run_id, kept.run_id());
  EXPECT_FALSE(repo.GetRun(gone.run_id()));
  EXPECT_EQ(repo.AllParams().count(gone.run_id()), 0u);
  EXPECT_EQ(repo.Params(gone.run_id()), nlohmann::json::object());
  EXPECT_TRUE(repo.Series(gone.run_id()).empty());
  EXPECT_EQ(repo.AllSeries().size(), 1u);
  EXPECT_TRUE(RawSteps(Uri(), gone_series).empty());
  EXPECT_EQ(RawSteps(Uri(), kept_series).size(), 10u);
  EXPECT_EQ(repo.GetSeriesStats(std::vector<uint64_t>{gone_series}).count(gone_series), 0u);
  // Only the tombstone is left of the run.
  auto rows = RawRunsOf(Uri(), gone.run_id());
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].fields, std::optional<uint32_t>(kFieldDeleted));
  EXPECT_EQ(CountEqual(RawStrings(Uri(), kParamsTable, "run_id"), gone.run_id()), 0u);
  EXPECT_EQ(CountEqual(RawStrings(Uri(), kSeriesTable, "run_id"), gone.run_id()), 0u);

  // The handle's next write to the run fails.
  try {
    gone.Track(1, "loss");
    FAIL() << "tracking a deleted run succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kNotFound);
  }
  EXPECT_THROW(gone.Finish(), Error);
  EXPECT_THROW(repo.UpdateRun(gone.run_id(), [](RunInfo& r) { r.name = "x"; }), Error);
}

TEST_F(RepoTest, AWriterRacingADeleteCommitsAtMostOneHiddenFlush) {
  Repo writer = Open();
  Repo deleter = Open();
  tracking::Run run = writer.CreateRun(NewRun{.name = "raced"});
  for (int i = 0; i < 5; ++i) run.Track(i, "loss");
  writer.Flush();  // the writer has just looked for tombstones
  uint64_t series = SeriesId(run.run_id(), "loss", nlohmann::json::object());

  std::vector<std::string> ids = {run.run_id()};
  deleter.DeleteRuns(ids);
  // Unless a second has passed since its last look (a slow machine), the
  // writer does not see the tombstone yet: this flush commits rows that
  // every read hides. Either way it commits at most this one flush.
  for (int i = 5; i < 8; ++i) run.Track(i, "loss");
  writer.Flush();
  size_t hidden = RawSteps(Uri(), series).size();
  EXPECT_TRUE(hidden == 0 || hidden == 3) << hidden;
  EXPECT_TRUE(deleter.Runs().empty());
  EXPECT_TRUE(deleter.AllSeries().empty());
  EXPECT_TRUE(writer.Runs().empty());
  // Reads by series id hide those rows too: the deleter knows neither the
  // series nor its row (deleted), the writer knows both.
  std::vector<uint64_t> series_ids = {series};
  for (Repo* reader : {&deleter, &writer}) {
    EXPECT_TRUE(reader->ReadMany(series_ids).empty());
    EXPECT_TRUE(reader->ReadMany(series_ids, {0, 10}).empty());
    EXPECT_TRUE(reader->ReadManyIn(series_ids, TimeRange{}).empty());
    EXPECT_TRUE(reader->GetSeriesStats(series_ids).empty());
  }

  // A second later the writer's flush finds the tombstone (if the last one
  // did not), drops its buffered rows and refuses the run's next write.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  try {
    for (int i = 8; i < 10; ++i) run.Track(i, "loss");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kNotFound);
  }
  writer.Flush();
  EXPECT_EQ(RawSteps(Uri(), series).size(), hidden);
  EXPECT_THROW(run.Track(10, "loss"), Error);

  // optimize removes the hidden rows; the tombstone stays.
  deleter.Optimize();
  EXPECT_TRUE(RawSteps(Uri(), series).empty());
  auto rows = RawRunsOf(Uri(), run.run_id());
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].fields, std::optional<uint32_t>(kFieldDeleted));
}

TEST_F(RepoTest, OptimizeDropsTombstonesOlderThanMarkTtl) {
  RepoOptions options = Opts();
  options.mark_ttl = std::chrono::seconds(1);
  Repo repo = Repo::Open(Uri(), options);
  tracking::Run run = repo.CreateRun(NewRun{.name = "old"});
  run.Track(1, "loss");
  repo.Flush();
  std::vector<std::string> ids = {run.run_id()};
  repo.DeleteRuns(ids);
  repo.Optimize();
  EXPECT_EQ(RawRunsOf(Uri(), run.run_id()).size(), 1u);  // young: kept
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  repo.Optimize();
  EXPECT_TRUE(RawRunsOf(Uri(), run.run_id()).empty());
  EXPECT_TRUE(repo.Runs().empty());
}

// --- Threads ------------------------------------------------------------------

TEST_F(RepoTest, ConcurrentTrackersReadersAndBackgroundFlushes) {
  RepoOptions options = Opts();
  options.flush_rows = 100;  // background flushes while the threads write
  options.flush_interval = std::chrono::milliseconds(50);
  Repo repo = Repo::Open(Uri(), options);
#ifdef __SANITIZE_THREAD__
  constexpr int kThreads = 3, kPoints = 300;  // Lance runs ~100x slower under TSan
#else
  constexpr int kThreads = 3, kPoints = 1200;
#endif
  std::vector<tracking::Run> runs;
  for (int t = 0; t < kThreads; ++t) {
    runs.push_back(repo.CreateRun(NewRun{.name = "t" + std::to_string(t)}));
  }
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done) {
      auto series = repo.AllSeries();
      std::vector<uint64_t> ids;
      for (const auto& s : series) ids.push_back(s.series_id);
      for (const auto& [id, stats] : repo.GetSeriesStats(ids)) {
        EXPECT_LE(stats.count, static_cast<uint64_t>(kPoints));
      }
    }
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < kPoints; ++i) {
        runs[t].Track(i, "loss");
        if (i % 100 == 0) runs[t].SetParams({{"at", i}});
      }
    });
  }
  for (auto& w : writers) w.join();
  done = true;
  reader.join();
  for (auto& run : runs) run.Finish();
  for (const auto& run : runs) {
    uint64_t id = SeriesId(run.run_id(), "loss", nlohmann::json::object());
    SeriesStats stats = repo.GetSeriesStats(std::vector<uint64_t>{id}).at(id);
    EXPECT_EQ(stats.count, static_cast<uint64_t>(kPoints));
    EXPECT_EQ(stats.last_step, kPoints - 1);
    EXPECT_EQ(repo.Params(run.run_id()), nlohmann::json({{"at", (kPoints - 1) / 100 * 100}}));
    EXPECT_EQ(repo.GetRun(run.run_id())->status, "finished");
  }
}

// --- Recomputing statistics ---------------------------------------------------

TEST_F(RepoTest, RecomputeSeriesStatsRepairsDoubleCountedSteps) {
  Repo a = Open();
  tracking::Run run = a.CreateRun(NewRun{.name = "r"});
  for (int i = 0; i < 5; ++i) run.Track(i, "loss");
  a.Flush();
  // Both handles know step 4 as the last one; each then writes step 5, so
  // neither sees an overwrite and both deltas count a point at step 5.
  Repo b = Open();
  tracking::Run resumed = b.ResumeRun(run.run_id());
  run.Track(50, "loss");
  a.Flush();
  resumed.Track(60, "loss");
  b.Flush();
  uint64_t id = SeriesId(run.run_id(), "loss", nlohmann::json::object());
  std::vector<uint64_t> ids = {id};
  EXPECT_EQ(a.GetSeriesStats(ids).at(id).count, 7u);  // counted twice

  a.RecomputeSeriesStats(ids);
  SeriesStats stats = a.GetSeriesStats(ids).at(id);
  EXPECT_EQ(stats.count, 6u);
  EXPECT_EQ(stats.last, 60);  // the later write of step 5
  EXPECT_EQ(stats.max, 60);
  // Also for another handle, and until optimize stores exact statistics.
  EXPECT_EQ(b.GetSeriesStats(ids).at(id).count, 6u);
  a.Optimize();
  EXPECT_EQ(b.GetSeriesStats(ids).at(id), stats);
}

// --- The later point of a step wins wherever compaction moves the earlier ----

// Points carry their seq: row addresses alone would let a compaction that
// rewrites an older fragment (giving its rows new, higher addresses) revive
// a point that a newer one, in a fragment it left alone, overwrote.
TEST_F(RepoTest, LaterPointWinsAfterCompactionMovesTheEarlierOne) {
  RepoOptions options = Opts();
  options.flush_rows = size_t{4} << 20;  // each flush below is one commit
  Repo first = Repo::Open(Uri(), options);
  tracking::Run run = first.CreateRun(NewRun{.run_id = "r"});
  run.Track(1.0, "loss", {.step = 0});
  first.Flush();
  run.Track(3.0, "other", {.step = 0});
  first.Flush();
  {
    // Another handle overwrites step 0 in a fragment too large for
    // compaction to touch.
    Repo second = Repo::Open(Uri(), options);
    tracking::Run again = second.ResumeRun("r");
    again.Track(2.0, "loss", {.step = 0});
    for (int64_t i = 0; i < static_cast<int64_t>(lance::kCompactTargetRows); ++i) {
      again.Track(0.5, "filler", {.step = i});
    }
    second.Close();
  }
  // Compaction merges the two small fragments, the one holding the first
  // point included, into a new one after the large fragment.
  lance::Dataset metrics = Table(Uri(), kMetricsTable);
  lance::CompactResult compacted = metrics.Compact({});
  ASSERT_GE(compacted.removed.size(), 2u);

  uint64_t loss = SeriesId("r", "loss", json::object());
  Repo reader = Open();
  auto read = reader.ReadMany(Ids({loss}))[loss];
  EXPECT_EQ(read.values, std::vector<double>{2.0});
  reader.RecomputeSeriesStats(Ids({loss}));
  EXPECT_EQ(reader.GetSeriesStats(Ids({loss})).at(loss).last, 2.0);
  reader.Optimize();
  EXPECT_EQ(reader.ReadMany(Ids({loss}))[loss].values, std::vector<double>{2.0});
  EXPECT_EQ(reader.GetSeriesStats(Ids({loss})).at(loss).last, 2.0);
}

}  // namespace
}  // namespace kv0::tracking
