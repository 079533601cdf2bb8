// The kv0 command-line tool: inspect and edit databases and repositories.
// Keys and values are UTF-8 text, or hex when written 0x...; output shows
// bytes that are not printable text as 0x-prefixed hex.

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "bench/charts_bench.h"
#include "bench/kv_bench.h"
#include "bench/search_bench.h"
#include "bench/tracking_bench.h"
#include "bench/versions_bench.h"
#include "kv0/error.h"
#include "kv0/kv.h"
#include "kv0/tracking.h"
#include "lance/dataset.h"
#include "tools/chart_svg.h"
#include "tools/stress.h"
#include "tracking/params.h"

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
    "experiment-tracking repositories (REPO is a path or URI):\n"
    "  runs REPO             list the runs\n"
    "  runs REPO [--where FILTER] [--order-by TERMS] [--limit N] [--page-token T]\n"
    "                        search runs: FILTER and TERMS in the language of\n"
    "                        docs/tracking.md, e.g. --where \"params.lr < 0.01\"\n"
    "                        --order-by \"metrics.acc DESC\" (N: 100)\n"
    "  run REPO RUN_ID       print a run's record\n"
    "  params REPO RUN_ID    print a run's parameters (dotted keys; nested with --json)\n"
    "  metrics REPO RUN_ID [NAME] [--steps A:B]\n"
    "                        without NAME: the run's series and their statistics;\n"
    "                        with NAME: the points of that series (every context)\n"
    "                        with a step in [A, B) (A or B may be left out)\n"
    "  optimize REPO         fold runs, sort the metrics, update the index\n"
    "  plot REPO RUN METRIC... [--runs R2,R3] [--start A] [--stop B] [--buckets N]\n"
    "       --out FILE       draw the metrics of the runs (every context) as an SVG\n"
    "                        line chart, exact min/max per pixel (N: 800)\n"
    "\n"
    "both:\n"
    "  purge REPO|DB [--force]\n"
    "                        rewrite deleted rows away and remove every untagged old\n"
    "                        version; --force deletes tags that hold deleted data\n"
    "\n"
    "benchmarks:\n"
    "  bench kv [--keys N] [--wal-keys N] [--json FILE] [--dir DIR]\n"
    "                        kv0 against RocksDB, db_bench style (N: 1000000)\n"
    "  bench tracking [--runs N] [--points N] [--json FILE] [--dir DIR]\n"
    "                        the tracking layer at scale (runs: 2000, points: 5000000)\n"
    "  bench search [--runs N] [--repeat R] [--slow-repeat R] [--no-brute-force]\n"
    "               [--json FILE] [--dir DIR]\n"
    "                        run search beside the brute-force path (runs: 100000)\n"
    "  bench charts [--runs N] [--points N] [--tail N] [--buckets N] [--repeat R]\n"
    "               [--json FILE] [--dir DIR]\n"
    "                        downsampled reads beside raw ones (200 runs x 200000)\n"
    "  bench versions [--versions N] [--lance-versions N] [--retention S] [--uri URI]\n"
    "                 [--json FILE] [--dir DIR]\n"
    "                        commit times as versions accumulate (versions: 100000,\n"
    "                        retention: 604800 s)\n"
    "  stress [--dir DIR] [--duration S] [--threads N] [--seed N] [--faults]\n"
    "                        random operations on both layers in a child that is\n"
    "                        killed at random; every acknowledged write is checked\n"
    "\n"
    "options:\n"
    "  --storage-option K=V  pass an object-store option to Lance (repeatable)\n"
    "  --wal-sync MODE       how a writing command's WAL reaches the disk: none, batch\n"
    "                        (the default) or always\n"
    "  --json                (runs, run, params, metrics, optimize, purge) print JSON\n";

struct Args {
  std::vector<std::string> positional;
  kv0::lance::StorageOptions storage;
  // --start, --end, --limit, --reverse; --steps, --json, --wal-sync; runs:
  // --where, --order-by, --page-token; bench:
  // --keys, --wal-keys, --runs, --points, --json FILE, --dir
  std::map<std::string, std::string> flags;

  bool Has(const std::string& flag) const { return flags.count(flag) != 0; }
};

Args Parse(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    // `bench` writes its JSON to a file (--json FILE); other commands print it.
    bool bench = !args.positional.empty() && args.positional[0] == "bench";
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
               arg == "--wal-keys" || arg == "--runs" || arg == "--points" || arg == "--dir" ||
               arg == "--repeat" || arg == "--stop" || arg == "--out" || arg == "--buckets" ||
               arg == "--steps" || arg == "--wal-sync" || arg == "--where" || arg == "--order-by" ||
               arg == "--page-token" || arg == "--versions" || arg == "--lance-versions" ||
               arg == "--uri" || arg == "--tail" || arg == "--slow-repeat" ||
               arg == "--retention" || (arg == "--json" && bench)) {
      if (i + 1 >= argc) throw kv0::Error(kv0::Code::kInvalidArgument, arg + " needs a value");
      args.flags[arg] = argv[++i];
    } else if (arg == "--reverse" || arg == "--json" || arg == "--force" ||
               arg == "--no-brute-force") {
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
  if (args.Has("--wal-sync")) options.wal_sync = kv0::ParseWalSync(args.flags.at("--wal-sync"));
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

// ---------------------------------------------------------------------------
// Experiment tracking.

namespace tracking = kv0::tracking;
using nlohmann::json;

// Microseconds since the epoch as "YYYY-MM-DD HH:MM:SS" UTC.
std::string Time(int64_t us) {
  std::time_t seconds = static_cast<std::time_t>(us / 1000000 - (us % 1000000 < 0 ? 1 : 0));
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &utc);
  return buf;
}

std::string OrDash(const std::optional<std::string>& s) { return s && !s->empty() ? *s : "-"; }

// A value as short text: strings bare, everything else as JSON.
std::string Text(const json& value) {
  return value.is_string() ? value.get<std::string>() : value.dump();
}

// %g with enough digits to tell close values apart; NaN and infinities by name.
std::string Number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// Opens a repository for reading: NotFound, rather than a new empty
// repository, when nothing is at the URI.
tracking::Repo OpenRepo(const Args& args, bool must_exist) {
  const std::string& uri = args.positional[1];
  if (must_exist) {
    std::string runs = uri;
    if (!runs.empty() && runs.back() != '/') runs += '/';
    runs += "runs.lance";
    try {
      kv0::lance::Dataset::Open(runs, args.storage);
    } catch (const kv0::Error& e) {
      if (e.code() != kv0::Code::kNotFound) throw;
      throw kv0::Error(kv0::Code::kNotFound, "no tracking repository at " + uri);
    }
  }
  tracking::RepoOptions options;
  options.storage_options = args.storage;
  if (args.Has("--wal-sync")) options.wal_sync = kv0::ParseWalSync(args.flags.at("--wal-sync"));
  return tracking::Repo::Open(uri, options);
}

void PrintJson(const json& j) { std::cout << j.dump(2) << "\n"; }

tracking::RunInfo GetRunOrThrow(tracking::Repo& repo, const std::string& run_id) {
  auto info = repo.GetRun(run_id);
  if (!info) throw kv0::Error(kv0::Code::kNotFound, "run " + run_id + " not found");
  return *info;
}

uint64_t CountFlag(const Args& args, const std::string& name, uint64_t fallback);

// The terms of an order-by text, split at commas outside quotes and
// brackets, without their ASC or DESC.
std::vector<std::string> OrderTerms(const std::string& order_by) {
  std::vector<std::string> out(1);
  int depth = 0;
  char quote = 0;
  for (char c : order_by) {
    if (quote) {
      quote = c == quote ? 0 : quote;
    } else if (c == '\'' || c == '"' || c == '`') {
      quote = c;
    } else if (c == '[' || c == '{') {
      ++depth;
    } else if (c == ']' || c == '}') {
      --depth;
    } else if (c == ',' && depth == 0) {
      out.emplace_back();
      continue;
    }
    out.back() += c;
  }
  for (auto& term : out) {
    while (!term.empty() && std::isspace(static_cast<unsigned char>(term.back()))) term.pop_back();
    for (const char* suffix : {" DESC", " desc", " ASC", " asc"}) {
      if (term.ends_with(suffix)) term.resize(term.size() - std::strlen(suffix));
    }
  }
  return out;
}

// kv0 runs REPO --where ... --order-by ... --limit N: a page of a run search,
// with a column for each parameter or metric the order names.
int SearchRuns(const Args& args) {
  tracking::RunQuery query;
  if (args.Has("--where")) query.filter = args.flags.at("--where");
  if (args.Has("--order-by")) query.order_by = {args.flags.at("--order-by")};
  query.limit = CountFlag(args, "--limit", 100);
  if (args.Has("--page-token")) query.page_token = args.flags.at("--page-token");
  if (!args.Has("--json")) {
    query.columns.emplace();
    if (args.Has("--order-by")) {
      for (const auto& term : OrderTerms(args.flags.at("--order-by"))) {
        if (term.find("params") != std::string::npos || term.find("metric") != std::string::npos) {
          query.columns->push_back(term);
        }
      }
    }
  }
  auto repo = OpenRepo(args, true);
  tracking::RunPage page = repo.SearchRuns(query);
  if (args.Has("--json")) {
    json out = {{"runs", page.runs},
                {"columns", page.columns},
                {"values", page.values},
                {"matched", page.matched},
                {"next_page_token", page.next_page_token}};
    PrintJson(out);
    return 0;
  }
  std::printf("%-32s  %-20s  %-9s  %-19s", "run_id", "name", "status", "created (UTC)");
  for (const auto& c : page.columns) std::printf("  %s", c.c_str());
  std::printf("\n");
  for (size_t i = 0; i < page.runs.size(); ++i) {
    const auto& r = page.runs[i];
    std::printf("%-32s  %-20s  %-9s  %-19s", r.run_id.c_str(), OrDash(r.name).c_str(),
                r.status.c_str(), Time(r.created_at_us).c_str());
    for (const auto& v : page.values[i]) {
      std::printf("  %s", v.is_null()     ? "-"
                          : v.is_number() ? Number(v.get<double>()).c_str()
                                          : Text(v).c_str());
    }
    std::printf("\n");
  }
  std::printf("%zu of %llu matching runs\n", page.runs.size(),
              static_cast<unsigned long long>(page.matched));
  if (!page.next_page_token.empty()) {
    std::printf("next page: --page-token %s\n", page.next_page_token.c_str());
  }
  return 0;
}

int Runs(const Args& args) {
  Need(args, 2, "runs REPO [--where FILTER] [--order-by TERMS] [--limit N] [--json]");
  if (args.Has("--where") || args.Has("--order-by") || args.Has("--limit") ||
      args.Has("--page-token")) {
    return SearchRuns(args);
  }
  auto repo = OpenRepo(args, true);
  auto runs = repo.Runs();
  if (args.Has("--json")) {
    PrintJson(runs);
    return 0;
  }
  std::printf("%-32s  %-20s  %-16s  %-9s  %-19s  %-19s  %s\n", "run_id", "name", "experiment",
              "status", "created (UTC)", "ended (UTC)", "kind");
  for (const auto& r : runs) {
    std::string ended = r.ended_at_us ? Time(*r.ended_at_us) : "-";
    std::printf("%-32s  %-20s  %-16s  %-9s  %-19s  %-19s  %s\n", r.run_id.c_str(),
                OrDash(r.name).c_str(), OrDash(r.experiment).c_str(), r.status.c_str(),
                Time(r.created_at_us).c_str(), ended.c_str(), OrDash(r.kind).c_str());
  }
  return 0;
}

// kv0 plot REPO RUN METRIC... [--runs R2,R3] [--start A] [--stop B]
// [--buckets N] --out FILE: every series of those metrics (any context) of
// those runs, downsampled, drawn as an SVG line chart.
int Plot(const Args& args) {
  const char* usage =
      "plot REPO RUN METRIC [METRIC...] [--runs R2,R3] [--start A] [--stop B] [--buckets N] "
      "--out FILE";
  Need(args, 4, usage);
  if (!args.Has("--out")) throw kv0::Error(kv0::Code::kInvalidArgument, usage);
  std::vector<std::string> run_ids = {args.positional[2]};
  if (args.Has("--runs")) {
    std::stringstream more(args.flags.at("--runs"));
    for (std::string id; std::getline(more, id, ',');) {
      if (!id.empty()) run_ids.push_back(id);
    }
  }
  std::set<std::string> metrics(args.positional.begin() + 3, args.positional.end());
  auto repo = OpenRepo(args, true);
  tracking::DownsampleOptions options;
  options.buckets = static_cast<int64_t>(CountFlag(args, "--buckets", 800));
  auto step = [&](const char* flag) -> std::optional<int64_t> {
    if (!args.Has(flag)) return std::nullopt;
    try {
      return std::stoll(args.flags.at(flag));
    } catch (const std::exception&) {
      throw kv0::Error(kv0::Code::kInvalidArgument,
                       std::string(flag) + " needs a step, got " + args.flags.at(flag));
    }
  };
  options.start = step("--start");
  options.stop = step("--stop");

  kv0::tools::Chart chart;
  std::map<std::string, uint64_t> by_label;  // the legend in a stable order
  for (const auto& run_id : run_ids) {
    tracking::RunInfo run = GetRunOrThrow(repo, run_id);
    for (const auto& s : repo.Series(run_id)) {
      if (!metrics.count(s.name)) continue;
      by_label.emplace((run.name ? *run.name : run_id) + " / " + s.name +
                           (s.context.empty() ? "" : " " + s.context.dump()),
                       s.series_id);
    }
  }
  if (by_label.empty()) throw kv0::Error(kv0::Code::kNotFound, "no such metric in those runs");
  std::vector<uint64_t> ids;
  for (const auto& [label, id] : by_label) ids.push_back(id);
  auto series = repo.ReadDownsampled(ids, options);
  for (const auto& [label, id] : by_label) chart.lines.push_back({label, series[id].buckets});
  for (const auto& m : metrics) chart.title += (chart.title.empty() ? "" : ", ") + m;
  chart.y_label = chart.title;
  std::ofstream out(args.flags.at("--out"), std::ios::binary);
  out << kv0::tools::RenderSvg(chart);
  if (!out.flush()) {
    throw kv0::Error(kv0::Code::kIOError, "cannot write " + args.flags.at("--out"));
  }
  std::printf("wrote %s: %zu series\n", args.flags.at("--out").c_str(), chart.lines.size());
  return 0;
}

int RunRecord(const Args& args) {
  Need(args, 3, "run REPO RUN_ID [--json]");
  auto repo = OpenRepo(args, true);
  auto r = GetRunOrThrow(repo, args.positional[2]);
  if (args.Has("--json")) {
    PrintJson(r);
    return 0;
  }
  auto line = [](const char* key, const std::string& value) {
    std::printf("%-12s %s\n", key, value.c_str());
  };
  line("run_id", r.run_id);
  line("name", OrDash(r.name));
  line("experiment", OrDash(r.experiment));
  line("description", OrDash(r.description));
  std::string tags;
  for (const auto& t : r.tags) tags += (tags.empty() ? "" : ", ") + t;
  line("tags", tags.empty() ? "-" : tags);
  line("status", r.status + (r.archived ? " (archived)" : ""));
  line("kind", OrDash(r.kind));
  line("target", r.target ? r.target->dump() : "-");
  line("created", Time(r.created_at_us) + " UTC");
  line("updated", Time(r.updated_at_us) + " UTC");
  line("ended", r.ended_at_us ? Time(*r.ended_at_us) + " UTC" : "-");
  return 0;
}

int Params(const Args& args) {
  Need(args, 3, "params REPO RUN_ID [--json]");
  auto repo = OpenRepo(args, true);
  GetRunOrThrow(repo, args.positional[2]);
  json params = repo.Params(args.positional[2]);
  if (args.Has("--json")) {
    PrintJson(params);
    return 0;
  }
  for (const auto& row : tracking::Flatten(params)) {
    std::cout << row.key << " = " << row.value_json << "\n";
  }
  return 0;
}

// "A:B", ":B", "A:" or ":" as [A, B).
tracking::StepRange ParseSteps(const std::string& text) {
  auto colon = text.find(':');
  if (colon == std::string::npos) {
    throw kv0::Error(kv0::Code::kInvalidArgument, "--steps needs A:B, got " + text);
  }
  auto bound = [&](const std::string& part, int64_t fallback) -> int64_t {
    if (part.empty()) return fallback;
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != part.size()) {
      throw kv0::Error(kv0::Code::kInvalidArgument, "--steps needs integers A:B, got " + text);
    }
    return v;
  };
  tracking::StepRange range;
  range.start = bound(text.substr(0, colon), range.start);
  range.stop = bound(text.substr(colon + 1), range.stop);
  return range;
}

int Metrics(const Args& args) {
  if (args.positional.size() != 3 && args.positional.size() != 4) {
    Need(args, 3, "metrics REPO RUN_ID [NAME] [--steps A:B] [--json]");
  }
  auto repo = OpenRepo(args, true);
  const std::string& run_id = args.positional[2];
  GetRunOrThrow(repo, run_id);
  auto series = repo.Series(run_id);
  bool as_json = args.Has("--json");

  if (args.positional.size() == 3) {
    if (args.Has("--steps")) {
      throw kv0::Error(kv0::Code::kInvalidArgument, "--steps needs a series NAME");
    }
    std::vector<uint64_t> ids;
    for (const auto& s : series) ids.push_back(s.series_id);
    auto stats = repo.GetSeriesStats(ids);
    if (as_json) {
      json out = json::array();
      for (const auto& s : series) {
        json row = s;
        auto it = stats.find(s.series_id);
        row["stats"] = it == stats.end() ? json(nullptr) : json(it->second);
        out.push_back(std::move(row));
      }
      PrintJson(out);
      return 0;
    }
    std::printf("%-20s  %-24s  %9s  %15s  %12s  %12s  %12s\n", "name", "context", "points", "steps",
                "last", "min", "max");
    for (const auto& s : series) {
      auto it = stats.find(s.series_id);
      if (it == stats.end()) {
        std::printf("%-20s  %-24s  %9s\n", s.name.c_str(), s.context.dump().c_str(), "0");
        continue;
      }
      const auto& st = it->second;
      std::string steps = std::to_string(st.first_step) + ".." + std::to_string(st.last_step);
      std::printf("%-20s  %-24s  %9llu  %15s  %12s  %12s  %12s\n", s.name.c_str(),
                  s.context.dump().c_str(), static_cast<unsigned long long>(st.count),
                  steps.c_str(), Number(st.last).c_str(), Number(st.min).c_str(),
                  Number(st.max).c_str());
    }
    return 0;
  }

  const std::string& name = args.positional[3];
  tracking::StepRange range;
  if (auto it = args.flags.find("--steps"); it != args.flags.end()) range = ParseSteps(it->second);
  std::vector<const tracking::SeriesInfo*> named;
  std::vector<uint64_t> ids;
  for (const auto& s : series) {
    if (s.name != name) continue;
    named.push_back(&s);
    ids.push_back(s.series_id);
  }
  if (named.empty()) {
    throw kv0::Error(kv0::Code::kNotFound, "run " + run_id + " has no series named " + name);
  }
  auto data = repo.ReadMany(ids, range);
  json out = json::array();
  for (const auto* s : named) {
    auto it = data.find(s->series_id);
    tracking::MetricData points = it == data.end() ? tracking::MetricData{} : it->second;
    if (as_json) {
      out.push_back({{"series_id", s->series_id},
                     {"name", s->name},
                     {"context", s->context},
                     {"points", points}});
      continue;
    }
    std::cout << s->name << " " << s->context.dump() << ": " << points.size() << " points\n";
    if (points.size() == 0) continue;
    std::printf("  %12s  %8s  %14s  %s\n", "step", "epoch", "value", "time (UTC)");
    for (size_t i = 0; i < points.size(); ++i) {
      std::string epoch = points.epochs[i] ? std::to_string(*points.epochs[i]) : "-";
      std::printf("  %12lld  %8s  %14s  %s\n", static_cast<long long>(points.steps[i]),
                  epoch.c_str(), Number(points.values[i]).c_str(),
                  Time(points.timestamps_us[i]).c_str());
    }
  }
  if (as_json) PrintJson(out);
  return 0;
}

int Optimize(const Args& args) {
  Need(args, 2, "optimize REPO [--json]");
  auto repo = OpenRepo(args, true);
  auto stats = repo.Optimize();
  repo.Close();
  if (args.Has("--json")) {
    PrintJson({{"run_rows_before", stats.run_rows_before},
               {"run_rows_after", stats.run_rows_after},
               {"points_rewritten", stats.points_rewritten},
               {"full_rewrite", stats.full_rewrite},
               {"level_cells", stats.level_cells},
               {"level_bytes", stats.level_bytes}});
    return 0;
  }
  std::cout << "run rows: " << stats.run_rows_before << " -> " << stats.run_rows_after << "\n"
            << "points rewritten: " << stats.points_rewritten
            << (stats.full_rewrite ? " (every metrics fragment)" : "") << "\n"
            << "chart levels: " << stats.level_cells << " cells, " << stats.level_bytes
            << " bytes\n";
  return 0;
}

// A repository holds runs.lance; anything else is taken for a key-value
// database.
bool IsRepository(const Args& args) {
  std::string uri = args.positional[1];
  if (!uri.empty() && uri.back() != '/') uri += '/';
  return kv0::lance::Dataset::Exists(uri + "runs.lance", args.storage);
}

int Purge(const Args& args) {
  Need(args, 2, "purge REPO|DB [--force] [--json]");
  bool force = args.Has("--force");
  uint64_t versions, bytes;
  std::vector<std::string> tags;
  if (IsRepository(args)) {
    auto repo = OpenRepo(args, true);
    auto stats = repo.Purge(force);
    repo.Close();
    versions = stats.versions_removed;
    bytes = stats.bytes_removed;
    tags = stats.tags_deleted;
  } else {
    kv0::kv::Options options;
    options.storage_options = args.storage;
    options.create_if_missing = false;
    auto db = kv0::kv::DB::Open(args.positional[1], options);
    auto stats = db->Purge(force);
    db->Close();
    versions = stats.versions_removed;
    bytes = stats.bytes_removed;
    tags = stats.tags_deleted;
  }
  if (args.Has("--json")) {
    PrintJson({{"versions_removed", versions}, {"bytes_removed", bytes}, {"tags_deleted", tags}});
    return 0;
  }
  std::cout << "versions removed: " << versions << "\nbytes removed: " << bytes << "\n";
  for (const auto& tag : tags) std::cout << "tag deleted: " << tag << "\n";
  return 0;
}

int TrackingCommand(const std::string& command, const Args& args) {
  if (command == "purge") return Purge(args);
  if (command == "runs") return Runs(args);
  if (command == "run") return RunRecord(args);
  if (command == "params") return Params(args);
  if (command == "metrics") return Metrics(args);
  if (command == "optimize") return Optimize(args);
  if (command == "plot") return Plot(args);
  return -1;
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
  const char* usage =
      "usage: kv0 bench kv [--keys N] [--wal-keys N] [--json FILE] [--dir DIR]\n"
      "       kv0 bench tracking [--runs N] [--points N] [--json FILE] [--dir DIR]\n"
      "       kv0 bench search [--runs N] [--repeat R] [--slow-repeat R] [--no-brute-force]\n"
      "                        [--json FILE] [--dir DIR]\n"
      "       kv0 bench versions [--versions N] [--lance-versions N] [--uri URI] [--json FILE]\n"
      "                          [--dir DIR]\n"
      "       kv0 bench charts [--runs N] [--points N] [--tail N] [--buckets N] [--repeat R]\n"
      "                        [--json FILE] [--dir DIR]";
  std::string which = args.positional.size() >= 2 ? args.positional[1] : "";
  if (which == "tracking" && args.positional.size() == 2) {
    kv0::bench::TrackingBenchArgs bench;
    bench.runs = CountFlag(args, "--runs", bench.runs);
    bench.points = CountFlag(args, "--points", bench.points);
    if (auto it = args.flags.find("--json"); it != args.flags.end()) bench.json_path = it->second;
    if (auto it = args.flags.find("--dir"); it != args.flags.end()) bench.dir = it->second;
    return kv0::bench::RunTrackingBench(bench);
  }
  if (which == "search" && args.positional.size() == 2) {
    kv0::bench::SearchBenchArgs bench;
    bench.runs = CountFlag(args, "--runs", bench.runs);
    bench.repeat = CountFlag(args, "--repeat", bench.repeat);
    bench.slow_repeat = CountFlag(args, "--slow-repeat", bench.slow_repeat);
    bench.brute_force = !args.flags.count("--no-brute-force");
    if (bench.repeat == 0 || bench.slow_repeat == 0) {
      throw kv0::Error(kv0::Code::kInvalidArgument,
                       "--repeat and --slow-repeat must be at least 1");
    }
    if (auto it = args.flags.find("--json"); it != args.flags.end()) bench.json_path = it->second;
    if (auto it = args.flags.find("--dir"); it != args.flags.end()) bench.dir = it->second;
    return kv0::bench::RunSearchBench(bench);
  }
  if (which == "versions" && args.positional.size() == 2) {
    kv0::bench::VersionsBenchArgs bench;
    bench.versions = CountFlag(args, "--versions", bench.versions);
    bench.lance_versions = CountFlag(args, "--lance-versions", bench.lance_versions);
    bench.retention_s = CountFlag(args, "--retention", bench.retention_s);
    if (bench.retention_s == 0) {
      throw kv0::Error(kv0::Code::kInvalidArgument, "--retention needs at least 1 second");
    }
    bench.storage = args.storage;
    if (auto it = args.flags.find("--uri"); it != args.flags.end()) bench.uri = it->second;
    if (auto it = args.flags.find("--json"); it != args.flags.end()) bench.json_path = it->second;
    if (auto it = args.flags.find("--dir"); it != args.flags.end()) bench.dir = it->second;
    return kv0::bench::RunVersionsBench(bench);
  }
  if (which == "charts" && args.positional.size() == 2) {
    kv0::bench::ChartsBenchArgs bench;
    bench.runs = CountFlag(args, "--runs", bench.runs);
    bench.points = CountFlag(args, "--points", bench.points);
    bench.tail = CountFlag(args, "--tail", bench.tail);
    bench.buckets = CountFlag(args, "--buckets", bench.buckets);
    bench.repeat = CountFlag(args, "--repeat", bench.repeat);
    if (auto it = args.flags.find("--json"); it != args.flags.end()) bench.json_path = it->second;
    if (auto it = args.flags.find("--dir"); it != args.flags.end()) bench.dir = it->second;
    return kv0::bench::RunChartsBench(bench);
  }
  if (which == "search-query" && args.positional.size() == 4) {
    // Internal: the search benchmark's new-process reader (REPO QUERY).
    auto it = args.flags.find("--dir");
    return kv0::bench::RunSearchQuery(args.positional[2], it == args.flags.end() ? "" : it->second,
                                      std::stoi(args.positional[3]));
  }
  if (which == "tracking-refresh" && args.positional.size() == 3) {
    // Internal: the tracking benchmark's reader process.
    auto it = args.flags.find("--dir");
    return kv0::bench::RunTrackingRefresh(args.positional[2],
                                          it == args.flags.end() ? "" : it->second);
  }
  if (args.positional.size() != 2 || which != "kv") {
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
    // stress parses its own options.
    if (argc > 1 && std::string_view(argv[1]) == "stress") return kv0::tools::Stress(argc, argv);
    if (argc > 1 && std::string_view(argv[1]) == "stress-child") {
      return kv0::tools::StressChild(argc, argv);
    }
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
    if (int status = TrackingCommand(command, args); status >= 0) return status;
    if (int status = KvCommand(command, args); status >= 0) return status;
    std::cerr << "kv0: unknown command " << command << "\n\n" << kUsage;
    return 2;
  } catch (const kv0::Error& e) {
    std::cerr << "kv0: " << e.what() << "\n";
    return e.code() == kv0::Code::kInvalidArgument ? 2 : 1;
  } catch (const std::exception& e) {
    std::cerr << "kv0: " << e.what() << "\n";
    return 1;
  }
}
