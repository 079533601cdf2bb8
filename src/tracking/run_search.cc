// Repo::SearchRuns: which runs a query selects, found in storage.
//
// The steps, in order:
//  1. Parse the query (run_query.h); a bad one fails before any read.
//  2. Flush, move runs, params and metrics to their latest versions, and
//     bring the handle's SearchCache (search_cache.h) up to them: the runs
//     table's rows merged run by run (the live runs and their attributes);
//     per parameter key the query names, the rows of params.lance filtered
//     on that key and the keys on its path, merged per run exactly as
//     Params() merges them; per metric, the statistics rows of the series
//     of every run the handle has seen (SeriesId needs no read), merged as
//     GetSeriesStats() merges them. Each reads only the fragments committed
//     since the last search of this handle, and keeps its values by run slot
//     (RunSlots), so that the steps below index arrays.
//  3. Evaluate the filter per run, keep the runs after the page token's
//     sort key, and take the first `limit` by the order (a partial sort).
//  4. Only for the page's runs: their parameters and series, for columns.
// docs/design.md ("Run search") gives the costs.

#include <algorithm>
#include <cmath>
#include <set>
#include <unordered_map>

#include "tracking/params.h"
#include "tracking/repo_impl.h"
#include "tracking/run_query.h"
#include "tracking/search_cache.h"

namespace kv0::tracking {
namespace {

using query::Attribute;
using query::Stat;
using query::Term;
using query::Value;

// The runs a SQL IN list names at most; longer lists are split.
constexpr size_t kRunsPerFilter = 500;

Value AttributeValue(const RunInfo& run, Attribute a) {
  auto text = [](const std::optional<std::string>& s) { return s ? Value::Text(*s) : Value{}; };
  switch (a) {
    case Attribute::kRunId:
      return Value::Text(run.run_id);
    case Attribute::kName:
      return text(run.name);
    case Attribute::kExperiment:
      return text(run.experiment);
    case Attribute::kDescription:
      return text(run.description);
    case Attribute::kStatus:
      return Value::Text(run.status);
    case Attribute::kKind:
      return text(run.kind);
    case Attribute::kArchived:
      return Value::Flag(run.archived);
    case Attribute::kCreatedAt:
      return Value::Number(static_cast<double>(run.created_at_us));
    case Attribute::kUpdatedAt:
      return Value::Number(static_cast<double>(run.updated_at_us));
    case Attribute::kEndedAt:
      return run.ended_at_us ? Value::Number(static_cast<double>(*run.ended_at_us)) : Value{};
  }
  return Value{};
}

// A statistic as a value; min_step and max_step are missing with min and max
// when the series has no finite value.
Value StatValue(const SeriesStats& s, Stat stat) {
  auto number = [](auto v) { return Value::Number(static_cast<double>(v)); };
  bool finite = !std::isnan(s.min);
  switch (stat) {
    case Stat::kLast:
      return number(s.last);
    case Stat::kMin:
      return number(s.min);
    case Stat::kMax:
      return number(s.max);
    case Stat::kCount:
      return number(s.count);
    case Stat::kFirstStep:
      return number(s.first_step);
    case Stat::kLastStep:
      return number(s.last_step);
    case Stat::kMinStep:
      return finite ? number(s.min_step) : Value{};
    case Stat::kMaxStep:
      return finite ? number(s.max_step) : Value{};
    case Stat::kNonFinite:
      return number(s.non_finite);
  }
  return Value{};
}

// The value at a dotted key of a run's parameters, or null.
nlohmann::json ParamAt(const nlohmann::json& params, std::string_view key) {
  const nlohmann::json* at = &params;
  while (true) {
    size_t dot = key.find('.');
    std::string part(key.substr(0, dot));
    if (!at->is_object()) return nullptr;
    auto found = at->find(part);
    if (found == at->end()) return nullptr;
    at = &*found;
    if (dot == std::string_view::npos) return *at;
    key.remove_prefix(dot + 1);
  }
}

// The scan filter for the rows that can decide the value at key: the key
// itself, each key on its path (a newer write of "a" replaces "a.b") and the
// keys below it (a newer "a.b.c" turns "a.b" into an object).
std::string KeyFilter(const std::string& key) {
  std::string out = "key IN (";
  for (size_t dot = key.find('.'); dot != std::string::npos; dot = key.find('.', dot + 1)) {
    out += SqlString(key.substr(0, dot)) + ", ";
  }
  out += SqlString(key) + ") OR (key >= " + SqlString(key + ".") + " AND key < " +
         SqlString(key + "/") + ")";  // '/' follows '.'
  return out;
}

std::vector<std::vector<std::string>> RunIdChunks(const std::vector<const RunInfo*>& runs) {
  std::vector<std::vector<std::string>> out;
  for (size_t i = 0; i < runs.size(); ++i) {
    if (i % kRunsPerFilter == 0) out.emplace_back();
    out.back().push_back(runs[i]->run_id);
  }
  return out;
}

std::string RunIdIn(const std::vector<std::string>& ids) {
  std::string out = "run_id IN (";
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + SqlString(ids[i]);
  return out + ")";
}

nlohmann::json ToJson(const Value& v, const Term& term) {
  if (v.missing()) return nullptr;
  switch (v.kind) {
    case Value::Kind::kNumber:
      if (term.IsIntegerStat()) return static_cast<int64_t>(v.number);
      return v.number;
    case Value::Kind::kText:
      return v.text;
    case Value::Kind::kFlag:
      return v.flag;
    case Value::Kind::kMissing:
      break;
  }
  return nullptr;
}

// Every term an expression names.
void CollectTerms(const query::Expr& e, std::vector<bool>* used) {
  if (e.kind == query::Expr::Kind::kCompare) (*used)[e.term] = true;
  for (const auto& c : e.children) CollectTerms(c, used);
}

// Adds the leaves below `prefix` of a parameters object (arrays, scalars,
// null and empty objects are leaves) to `keys`.
void LeafKeys(const nlohmann::json& object, const std::string& prefix,
              std::set<std::string>* keys) {
  for (const auto& [name, value] : object.items()) {
    std::string key = prefix.empty() ? name : prefix + "." + name;
    if (value.is_object() && !value.empty()) {
      LeafKeys(value, key, keys);
    } else {
      keys->insert(key);
    }
  }
}

// Runs `refresh`; if it throws, `drop` forgets the part it was updating, so
// that no half-read part is used again.
template <typename Refresh, typename Drop>
void Guarded(Refresh&& refresh, Drop&& drop) {
  try {
    refresh();
  } catch (...) {
    drop();
    throw;
  }
}

// Sorts *slots and drops repeats.
void SortUnique(std::vector<uint32_t>* slots) {
  std::sort(slots->begin(), slots->end());
  slots->erase(std::unique(slots->begin(), slots->end()), slots->end());
}

void RefreshRuns(lance::Dataset& table, RunSlots& slots, RunsPart& part) {
  bool restart = false;
  std::vector<uint64_t> fragments = part.fragments.ToRead(table, &restart);
  if (restart) {
    part.rows.clear();
    part.by_slot.clear();
  }
  if (!fragments.empty()) {
    lance::ScanOptions scan;
    scan.fragment_ids = fragments;
    std::vector<RunRow> rows;
    std::vector<uint32_t> touched;
    auto reader = table.Scan(scan);
    while (auto batch = reader.Next()) {
      rows.clear();
      DecodeRunRows(*batch, &rows);
      for (auto& row : rows) {
        uint32_t slot = slots.Of(row.record.run_id);
        if (slot >= part.rows.size()) part.rows.resize(slot + 1);
        part.rows[slot].push_back(std::move(row));
        touched.push_back(slot);
      }
    }
    SortUnique(&touched);
    part.by_slot.resize(slots.size());
    for (uint32_t slot : touched) {
      std::vector<RunRow>& kept = part.rows[slot];
      part.by_slot[slot] = MergeRun(kept);  // none when the run is deleted
      // Folded, a run's rows stay two or three however often it changes,
      // and merge with later rows exactly as the originals would.
      kept = FoldRun(std::move(kept));
    }
  }
  if (restart || !fragments.empty()) {
    part.live.clear();
    for (uint32_t slot = 0; slot < part.by_slot.size(); ++slot) {
      if (part.by_slot[slot]) part.live.push_back(slot);
    }
  }
  part.fragments.Done();
}

// The parts, by the fragments of `table` each has still to read: parts with
// the same ones share a read. `reset` empties a part that must read the
// table again; a part with nothing to read is done.
template <typename Part, typename Reset>
std::map<std::vector<uint64_t>, std::vector<Part*>> ByFragmentsToRead(
    lance::Dataset& table, const std::vector<Part*>& parts, Reset reset) {
  std::map<std::vector<uint64_t>, std::vector<Part*>> out;
  for (Part* part : parts) {
    bool restart = false;
    std::vector<uint64_t> fragments = part->fragments.ToRead(table, &restart);
    if (restart) reset(*part);
    if (fragments.empty()) {
      part->fragments.Done();
    } else {
      out[std::move(fragments)].push_back(part);
    }
  }
  return out;
}

// True if a row of params.lance at leaf_key can decide the value at key: in
// memory, what KeyFilter says to the scan.
bool Decides(std::string_view key, std::string_view leaf_key) {
  if (leaf_key == key) return true;
  const std::string_view& shorter = leaf_key.size() < key.size() ? leaf_key : key;
  const std::string_view& longer = leaf_key.size() < key.size() ? key : leaf_key;
  return longer.starts_with(shorter) && longer[shorter.size()] == '.';
}

// Brings the parts up to the current version of `table`. Parts with the same
// fragments to read share one scan, filtered for all their keys at once.
void RefreshParams(lance::Dataset& table, const std::vector<ParamPart*>& parts, RunSlots& slots) {
  auto by_fragments = ByFragmentsToRead(table, parts, [](ParamPart& part) {
    part.leaves.clear();
    part.values.clear();
  });
  for (auto& [fragments, group] : by_fragments) {
    lance::ScanOptions scan;
    scan.columns = {"seq", "run_id", "key", "value", "text", "flag"};
    for (ParamPart* part : group) {
      scan.filter += (scan.filter.empty() ? "(" : " OR (") + KeyFilter(part->key) + ")";
    }
    scan.fragment_ids = fragments;
    std::vector<std::vector<uint32_t>> touched(group.size());
    auto reader = table.Scan(scan);
    while (auto batch = reader.Next()) {
      arrow::UInt64Column seq(*batch, "seq");
      arrow::Utf8Column run_id(*batch, "run_id"), key_column(*batch, "key"), value(*batch, "value"),
          text(*batch, "text");
      arrow::BoolColumn flag(*batch, "flag");
      for (int64_t r = 0; r < batch->num_rows(); ++r) {
        if (IsMarkRunId(run_id.value(r))) continue;
        // The typed columns spare parsing the JSON of strings and flags;
        // numbers are parsed, which keeps 1 apart from 1.0.
        nlohmann::json leaf;
        if (!text.is_null(r)) {
          leaf = std::string(text.value(r));
        } else if (!flag.is_null(r)) {
          leaf = flag.value(r);
        } else {
          leaf = nlohmann::json::parse(value.value(r), nullptr, false);
        }
        uint32_t slot = slots.Of(run_id.value(r));
        for (size_t i = 0; i < group.size(); ++i) {
          ParamPart& part = *group[i];
          if (!Decides(part.key, key_column.value(r))) continue;
          if (slot >= part.leaves.size()) part.leaves.resize(slot + 1);
          part.leaves[slot].push_back(Leaf{std::string(key_column.value(r)), leaf, seq.value(r)});
          touched[i].push_back(slot);
        }
      }
    }
    for (size_t i = 0; i < group.size(); ++i) {
      ParamPart& part = *group[i];
      SortUnique(&touched[i]);
      part.values.resize(slots.size());
      for (uint32_t slot : touched[i]) {
        const std::vector<Leaf>& leaves = part.leaves[slot];
        if (leaves.size() == 1 && leaves[0].key == part.key) {
          part.values[slot] = Value::FromJson(leaves[0].value);
        } else {
          part.values[slot] = Value::FromJson(ParamAt(Unflatten(leaves), part.key));
        }
      }
      part.fragments.Done();
    }
  }
}

// Brings the parts up to the current version of metrics for the series of
// every run in slots.
//
// Statistics rows of a series are committed after its run's row (a flush
// commits runs and series, then params and metrics: RepoImpl::Commit), and `metrics` is a
// handle SearchRuns took at the latest version before it read the runs
// table: every run with statistics in the fragments read here has a slot
// by now, so its series was asked for when those fragments were read. (The
// repository's own handle would not do: a flush racing the search moves it
// on, to fragments holding statistics of runs this search has not seen,
// which would then count as read.)
//
// The statistics rows of all series share the fragments, and beyond
// kMaxFilterIds series a read takes every statistics row of a fragment and
// picks in memory. So parts with the same fragments to read (every part of
// a new handle, or parts that have kept up alike) share one read: a query
// naming two metrics costs a new process one pass over the statistics, not
// two.
void RefreshMetrics(lance::Dataset& metrics, const std::vector<MetricPart*>& parts,
                    const RunSlots& slots) {
  auto by_fragments = ByFragmentsToRead(metrics, parts, [](MetricPart& part) {
    part.deltas.clear();
    part.clean.clear();
    part.dirty.clear();
  });
  for (MetricPart* part : parts) {
    for (uint32_t slot = static_cast<uint32_t>(part->series.size()); slot < slots.size(); ++slot) {
      uint64_t id = SeriesId(slots.id(slot), part->name, part->context);
      part->series.push_back(id);
      part->slot_of.emplace(id, slot);
    }
    part->clean.resize(slots.size());
  }
  for (auto& [fragments, group] : by_fragments) {
    std::vector<uint64_t> ids;
    for (MetricPart* part : group) ids.insert(ids.end(), part->series.begin(), part->series.end());
    for (MetricPart* part : group) part->deltas.resize(part->series.size());
    std::vector<std::pair<MetricPart*, uint32_t>> changed;
    RepoImpl::ForEachDeltaIn(metrics, ids, fragments, [&](uint64_t id, std::string_view encoded) {
      for (MetricPart* part : group) {
        auto found = part->slot_of.find(id);
        if (found == part->slot_of.end()) continue;
        part->deltas[found->second].Merge(StatsDelta::Decode(encoded));
        changed.emplace_back(part, found->second);
        break;
      }
    });
    for (auto [part, slot] : changed) {
      const StatsDelta& merged = part->deltas[slot];
      part->clean[slot].reset();
      part->dirty.erase(slot);
      if (merged.dirty()) {
        part->dirty.insert(slot);
      } else if (!merged.empty()) {
        part->clean[slot] = merged.Finish();
      }
    }
    for (MetricPart* part : group) part->fragments.Done();
  }
}

}  // namespace

RunPage RepoImpl::SearchRuns(const RunQuery& run_query) {
  const query::Query q = query::Parse(run_query);
  std::lock_guard search_lock(search_mu_);
  Flush();
  if (!search_cache_) search_cache_ = std::make_unique<SearchCache>();
  SearchCache& cache = *search_cache_;
  // params and metrics first, then runs: see RefreshMetrics.
  bool any_param = false, any_metric = false;
  for (const Term& term : q.terms) {
    any_param |= term.kind == Term::Kind::kParam;
    any_metric |= term.kind == Term::Kind::kMetric;
  }
  // Handles of their own, held at these versions while the runs are read
  // at a later one (see RefreshMetrics).
  std::optional<lance::Dataset> params_at, metrics_at;
  if (any_param) params_at = Latest(kParams).Clone();
  if (any_metric) metrics_at = Latest(kMetrics).Clone();
  Guarded([&] { RefreshRuns(Latest(kRuns), cache.slots, cache.runs); },
          [&] { cache.runs = RunsPart{}; });
  const std::vector<uint32_t>& live = cache.runs.live;
  std::vector<const RunInfo*> runs;
  runs.reserve(live.size());
  for (uint32_t slot : live) runs.push_back(&*cache.runs.by_slot[slot]);

  // The values of the filter's and the order's terms, a column per term.
  std::vector<bool> used(q.terms.size(), false);
  CollectTerms(q.filter, &used);
  for (const auto& o : q.order) used[o.term] = true;
  // The parts of the parameters and metrics the query names, each kind
  // read together (see RefreshParams and RefreshMetrics). The cache drops
  // none of them before the search ends (SearchCache::Trim).
  std::vector<ParamPart*> param_of(q.terms.size());
  std::vector<MetricPart*> metric_of(q.terms.size());
  std::vector<ParamPart*> param_parts;
  std::vector<MetricPart*> metric_parts;
  for (size_t t = 0; t < q.terms.size(); ++t) {
    const Term& term = q.terms[t];
    if (!used[t]) continue;
    if (term.kind == Term::Kind::kParam) {
      param_of[t] = &cache.Param(term.key);
      if (std::ranges::find(param_parts, param_of[t]) == param_parts.end()) {
        param_parts.push_back(param_of[t]);
      }
    } else if (term.kind == Term::Kind::kMetric) {
      metric_of[t] = &cache.Metric(term.key, term.context);
      if (std::ranges::find(metric_parts, metric_of[t]) == metric_parts.end()) {
        metric_parts.push_back(metric_of[t]);
      }
    }
  }
  if (!param_parts.empty()) {
    Guarded([&] { RefreshParams(*params_at, param_parts, cache.slots); },
            [&] {
              for (ParamPart* part : param_parts) cache.Drop(*part);
            });
  }
  if (!metric_parts.empty()) {
    Guarded([&] { RefreshMetrics(*metrics_at, metric_parts, cache.slots); },
            [&] {
              for (MetricPart* part : metric_parts) cache.Drop(*part);
            });
  }

  // A column per term of the filter and the order. Parameter values are
  // the cache's own; attributes and statistics are computed once into
  // `computed`, which is sized before any column points into it.
  const Value* missing = &query::MissingValue();
  std::vector<query::Column> values(q.terms.size());
  std::vector<std::vector<Value>> computed(q.terms.size());
  for (size_t t = 0; t < q.terms.size(); ++t) {
    if (!used[t]) continue;
    const Term& term = q.terms[t];
    query::Column& column = values[t];
    column.assign(runs.size(), missing);
    if (term.kind == Term::Kind::kAttribute) {
      computed[t].resize(runs.size());
      for (size_t i = 0; i < runs.size(); ++i) {
        computed[t][i] = AttributeValue(*runs[i], term.attribute);
        column[i] = &computed[t][i];
      }
    } else if (term.kind == Term::Kind::kParam) {
      const ParamPart& part = *param_of[t];
      for (size_t i = 0; i < runs.size(); ++i) {
        if (live[i] < part.values.size()) column[i] = &part.values[live[i]];
      }
    } else {
      const MetricPart& part = *metric_of[t];
      std::map<uint64_t, SeriesStats> from_points;  // the dirty series, exact
      if (!part.dirty.empty()) {
        std::map<uint64_t, StatsDelta> dirty;
        for (uint32_t slot : part.dirty) dirty.emplace(part.series[slot], part.deltas[slot]);
        from_points = FinishStats(dirty);
      }
      computed[t].resize(runs.size());
      for (size_t i = 0; i < runs.size(); ++i) {
        const SeriesStats* stats = nullptr;
        if (const auto& clean = part.clean[live[i]]) {
          stats = &*clean;
        } else if (!from_points.empty()) {
          auto exact = from_points.find(part.series[live[i]]);
          if (exact != from_points.end()) stats = &exact->second;
        }
        if (stats) {
          computed[t][i] = StatValue(*stats, term.stat);
          column[i] = &computed[t][i];
        }
      }
    }
  }

  // Filter, then the page: the runs after the token's key, first by order.
  std::vector<size_t> matched;
  for (size_t i = 0; i < runs.size(); ++i) {
    if (query::Matches(q.filter, values, i)) matched.push_back(i);
  }
  RunPage page;
  page.matched = matched.size();
  auto compare = [&](size_t a, size_t b) {
    for (const auto& o : q.order) {
      int c = query::CompareForOrder(*values[o.term][a], *values[o.term][b], o.descending);
      if (c) return c;
    }
    return runs[a]->run_id.compare(runs[b]->run_id);
  };
  if (q.after) {
    // The token's key as one more row of the columns, at index runs.size().
    for (size_t k = 0; k < q.order.size(); ++k) {
      values[q.order[k].term].push_back(&(*q.after)[k]);
    }
    RunInfo after;
    after.run_id = q.after_run_id;
    runs.push_back(&after);
    std::erase_if(matched, [&](size_t i) { return compare(i, runs.size() - 1) <= 0; });
    runs.pop_back();
  }
  size_t take = std::min(q.limit, matched.size());
  std::partial_sort(matched.begin(), matched.begin() + take, matched.end(),
                    [&](size_t a, size_t b) { return compare(a, b) < 0; });
  if (matched.size() > take) {
    size_t last = matched[take - 1];
    std::vector<Value> key;
    for (const auto& o : q.order) key.push_back(*values[o.term][last]);
    page.next_page_token = query::PageToken(q, key, runs[last]->run_id);
  }
  matched.resize(take);
  // Only now: the columns point into the parts, which Trim may drop.
  cache.Trim();

  // The columns, for the page's runs only.
  std::vector<const RunInfo*> page_runs;
  for (size_t i : matched) page_runs.push_back(runs[i]);
  std::vector<Term> columns;
  for (size_t t : q.columns) columns.push_back(q.terms[t]);
  bool need_params = q.default_columns;
  for (const auto& c : columns) need_params |= c.kind == Term::Kind::kParam;
  std::map<std::string, nlohmann::json> params;
  std::vector<SeriesInfo> page_series;
  if (!page_runs.empty() && (need_params || q.default_columns)) {
    for (const auto& ids : RunIdChunks(page_runs)) {
      if (need_params) params.merge(ReadParams(RunIdIn(ids)));
      if (q.default_columns) {
        auto part = ReadSeries(RunIdIn(ids));
        page_series.insert(page_series.end(), part.begin(), part.end());
      }
    }
  }
  if (q.default_columns) {
    std::set<std::string> keys;
    for (const auto& [id, p] : params) LeafKeys(p, "", &keys);
    for (const auto& key : keys) {
      Term term;
      term.kind = Term::Kind::kParam;
      term.key = key;
      columns.push_back(std::move(term));
    }
    std::map<std::string, Term> metrics;  // by column name, then context
    for (const auto& s : page_series) {
      Term term;
      term.kind = Term::Kind::kMetric;
      term.key = s.name;
      term.context = s.context;
      metrics.try_emplace(term.ColumnName() + '\0' + s.context.dump(), std::move(term));
    }
    for (auto& [name, term] : metrics) columns.push_back(std::move(term));
  }
  std::map<uint64_t, SeriesStats> page_stats;
  std::vector<uint64_t> page_ids;
  for (const auto& c : columns) {
    if (c.kind != Term::Kind::kMetric) continue;
    for (const RunInfo* run : page_runs)
      page_ids.push_back(SeriesId(run->run_id, c.key, c.context));
  }
  if (!page_ids.empty()) {
    Latest(kMetrics);
    page_stats = StatsAtCurrentVersion(Unique(page_ids));
  }
  for (const auto& c : columns) page.columns.push_back(c.ColumnName());
  for (const RunInfo* run : page_runs) {
    std::vector<nlohmann::json> row;
    for (const auto& c : columns) {
      if (c.kind == Term::Kind::kParam) {
        auto p = params.find(run->run_id);
        row.push_back(p == params.end() ? nlohmann::json() : ParamAt(p->second, c.key));
      } else {
        auto s = page_stats.find(SeriesId(run->run_id, c.key, c.context));
        row.push_back(s == page_stats.end() ? nlohmann::json()
                                            : ToJson(StatValue(s->second, c.stat), c));
      }
    }
    page.values.push_back(std::move(row));
    page.runs.push_back(*run);
  }
  return page;
}

}  // namespace kv0::tracking
