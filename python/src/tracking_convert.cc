// Conversions between Python values and kv0::tracking's arguments and
// results, for the files that bind kv0.tracking (tracking.cc,
// tracking_run.cc). See tracking_convert.h.

#include "tracking_convert.h"

#include <nanobind/stl/string.h>

#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "json_convert.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace kv0::python {

// --- Arguments --------------------------------------------------------------

namespace {

// datetime.datetime, timezone.utc, the epoch as an aware datetime and
// timedelta(microseconds=1), looked up once when the module is imported.
// Never freed: they must outlive every call, interpreter shutdown included.
struct TimeTypes {
  PyObject* datetime;
  PyObject* utc;
  PyObject* epoch;
  PyObject* one_us;
};
TimeTypes* g_time = nullptr;

}  // namespace

void InitTimeTypes() {
  nb::module_ dt = nb::module_::import_("datetime");
  nb::object datetime = dt.attr("datetime");
  nb::object utc = dt.attr("timezone").attr("utc");
  nb::object epoch = datetime(1970, 1, 1, "tzinfo"_a = utc);
  nb::object one_us = dt.attr("timedelta")("microseconds"_a = 1);
  g_time = new TimeTypes{datetime.release().ptr(), utc.release().ptr(), epoch.release().ptr(),
                         one_us.release().ptr()};
}

[[noreturn]] void ThrowPython(PyObject* type, const std::string& message) {
  PyErr_SetString(type, message.c_str());
  throw nb::python_error();
}

std::string TypeName(nb::handle obj) { return nb::type_name(obj.type()).c_str(); }

// A time argument: an int of microseconds since the Unix epoch (UTC), or a
// datetime, naive ones taken as UTC. A float is refused rather than guessed
// at (seconds from time.time(), or microseconds?).
int64_t Micros(nb::handle obj, const char* what) {
  PyObject* o = obj.ptr();
  if (PyLong_Check(o) && !PyBool_Check(o)) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow != 0) ThrowPython(PyExc_OverflowError, std::string(what) + " is out of range");
    if (v == -1 && PyErr_Occurred()) throw nb::python_error();
    return v;
  }
  int is_datetime = PyObject_IsInstance(o, g_time->datetime);
  if (is_datetime < 0) throw nb::python_error();
  if (is_datetime == 0) {
    throw nb::type_error((std::string(what) +
                          " must be a datetime or an int of microseconds since the Unix epoch, "
                          "not " +
                          TypeName(obj))
                             .c_str());
  }
  nb::object dt = nb::borrow(obj);
  if (dt.attr("tzinfo").is_none()) dt = dt.attr("replace")("tzinfo"_a = nb::handle(g_time->utc));
  nb::object delta = nb::steal(PyNumber_Subtract(dt.ptr(), g_time->epoch));
  if (!delta.is_valid()) throw nb::python_error();
  nb::object us = nb::steal(PyNumber_FloorDivide(delta.ptr(), g_time->one_us));
  if (!us.is_valid()) throw nb::python_error();
  return nb::cast<int64_t>(us);
}

std::optional<int64_t> OptionalMicros(nb::handle obj, const char* what) {
  if (obj.is_none()) return std::nullopt;
  return Micros(obj, what);
}

// Series ids: any iterable of ints (a list, a tuple, a numpy array...).
std::vector<uint64_t> Ids(nb::handle ids) {
  if (PyLong_Check(ids.ptr()) || PyUnicode_Check(ids.ptr())) {
    throw nb::type_error(
        ("ids must be an iterable of series ids (ints), not " + TypeName(ids)).c_str());
  }
  std::vector<uint64_t> out;
  for (nb::handle id : ids) {
    uint64_t v = 0;
    if (PyBool_Check(id.ptr()) || !nb::try_cast(id, v)) {
      throw nb::type_error(
          (std::string("a series id is an int in [0, 2**64), not ") + nb::repr(id).c_str())
              .c_str());
    }
    out.push_back(v);
  }
  return out;
}

// Tags: a list or tuple (any iterable) of str; a lone str is refused, since
// iterating it would give its characters.
std::vector<std::string> Tags(nb::handle tags) {
  if (PyUnicode_Check(tags.ptr())) {
    throw nb::type_error("tags must be a list of str, not a str");
  }
  std::vector<std::string> out;
  for (nb::handle tag : tags) {
    if (!PyUnicode_Check(tag.ptr())) {
      throw nb::type_error(("each tag must be a str, not " + TypeName(tag)).c_str());
    }
    out.push_back(nb::cast<std::string>(tag));
  }
  return out;
}

// A context: a dict (str keys) of JSON-able values.
nlohmann::json Context(nb::handle context) {
  if (context.is_none()) return nlohmann::json::object();
  if (!PyDict_Check(context.ptr())) {
    throw nb::type_error(("context must be a dict, not " + TypeName(context)).c_str());
  }
  return ToJson(context);
}

std::optional<std::string> OptionalStr(nb::handle obj, const char* what) {
  if (obj.is_none()) return std::nullopt;
  if (!PyUnicode_Check(obj.ptr())) {
    throw nb::type_error(
        (std::string(what) + " must be a str or None, not " + TypeName(obj)).c_str());
  }
  return nb::cast<std::string>(obj);
}

std::chrono::milliseconds Millis(double seconds, const char* what) {
  if (!std::isfinite(seconds) || seconds < 0 || seconds > 1e12) {
    throw Error(Code::kInvalidArgument, std::string(what) + " must be a number of seconds >= 0");
  }
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(seconds * 1000)));
}

std::chrono::seconds Seconds(double seconds, const char* what) {
  if (!std::isfinite(seconds) || seconds < 0 || seconds > 1e15) {
    throw Error(Code::kInvalidArgument, std::string(what) + " must be a number of seconds >= 0");
  }
  return std::chrono::seconds(static_cast<int64_t>(seconds));
}

void RunChange::Apply(tr::RunInfo& info) const {
  if (name) info.name = *name;
  if (experiment) info.experiment = *experiment;
  if (description) info.description = *description;
  if (kind) info.kind = *kind;
  if (tags) info.tags = *tags;
  if (status) info.status = *status;
  if (archived) info.archived = *archived;
  if (created_at_us) info.created_at_us = *created_at_us;
  if (ended_at_us) info.ended_at_us = *ended_at_us;
  if (target) info.target = *target;
}

RunChange ParseRunChange(const nb::kwargs& fields, const char* function) {
  RunChange c;
  for (auto [key, value] : fields) {
    std::string k = nb::cast<std::string>(key);
    if (k == "name") {
      c.name = OptionalStr(value, "name");
    } else if (k == "experiment") {
      c.experiment = OptionalStr(value, "experiment");
    } else if (k == "description") {
      c.description = OptionalStr(value, "description");
    } else if (k == "kind") {
      c.kind = OptionalStr(value, "kind");
    } else if (k == "tags") {
      c.tags = Tags(value);
    } else if (k == "status") {
      if (!PyUnicode_Check(value.ptr())) {
        throw nb::type_error(("status must be a str, not " + TypeName(value)).c_str());
      }
      std::string status = nb::cast<std::string>(value);
      if (!tr::IsValidStatus(status)) {
        throw Error(Code::kInvalidArgument,
                    "status must be running, finished, failed or aborted, not " + status);
      }
      c.status = std::move(status);
    } else if (k == "archived") {
      if (!PyBool_Check(value.ptr())) {
        throw nb::type_error(("archived must be a bool, not " + TypeName(value)).c_str());
      }
      c.archived = value.ptr() == Py_True;
    } else if (k == "created_at_us") {
      c.created_at_us = Micros(value, "created_at_us");
    } else if (k == "ended_at_us") {
      c.ended_at_us = OptionalMicros(value, "ended_at_us");
    } else if (k == "target") {
      c.target = value.is_none() ? std::optional<nlohmann::json>() : ToJson(value);
    } else {
      throw nb::type_error((std::string(function) + "() got an unexpected keyword argument '" + k +
                            "' (fields: name, experiment, description, tags, status, archived, "
                            "created_at_us, ended_at_us, kind, target)")
                               .c_str());
    }
  }
  return c;
}

// Run ids and item ids: an iterable of str; a lone str is refused, since
// iterating it would give its characters.
std::vector<std::string> StrList(nb::handle obj, const char* what) {
  if (PyUnicode_Check(obj.ptr()) || PyBytes_Check(obj.ptr())) {
    throw nb::type_error(
        (std::string(what) + " must be an iterable of str, not " + TypeName(obj)).c_str());
  }
  std::vector<std::string> out;
  for (nb::handle item : obj) {
    if (!PyUnicode_Check(item.ptr())) {
      throw nb::type_error(
          (std::string("each of ") + what + " must be a str, not " + TypeName(item)).c_str());
    }
    out.push_back(nb::cast<std::string>(item));
  }
  return out;
}

std::string Str(nb::handle obj, const std::string& what) {
  if (!PyUnicode_Check(obj.ptr())) {
    throw nb::type_error((what + " must be a str, not " + TypeName(obj)).c_str());
  }
  return nb::cast<std::string>(obj);
}

// A version argument: None (0, the latest) or an int >= 0.
uint64_t Version(nb::handle obj) {
  if (obj.is_none()) return 0;
  uint64_t v = 0;
  if (PyBool_Check(obj.ptr()) || !PyLong_Check(obj.ptr()) || !nb::try_cast(obj, v)) {
    throw nb::type_error(
        (std::string("version must be an int >= 0 or None, not ") + nb::repr(obj).c_str()).c_str());
  }
  return v;
}

// The rows of Repo.append_records: an iterable of dicts with the keys
// item_id (str), data (any JSON-able value), run_id (str or None, optional)
// and created_at (a time, optional; created_at_us is taken too, and seq
// ignored, so that rows read by Repo.records append back unchanged).
std::vector<tr::Record> RecordRows(nb::handle rows) {
  if (PyDict_Check(rows.ptr()) || PyUnicode_Check(rows.ptr()) || PyBytes_Check(rows.ptr())) {
    throw nb::type_error(("rows must be an iterable of dicts, not " + TypeName(rows)).c_str());
  }
  std::vector<tr::Record> out;
  for (nb::handle row : rows) {
    std::string where = "rows[" + std::to_string(out.size()) + "]";
    if (!PyDict_Check(row.ptr())) {
      throw nb::type_error((where + " must be a dict, not " + TypeName(row)).c_str());
    }
    tr::Record r;
    bool has_item = false, has_data = false, has_time = false;
    for (auto [key, value] : nb::borrow<nb::dict>(row)) {
      std::string k = Str(key, where + ": a key");
      if (k == "item_id") {
        r.item_id = Str(value, where + "['item_id']");
        has_item = true;
      } else if (k == "data") {
        r.data = ToJson(value);
        has_data = true;
      } else if (k == "run_id") {
        if (!value.is_none()) r.run_id = Str(value, where + "['run_id']");
      } else if (k == "created_at" || k == "created_at_us") {
        if (has_time) {
          throw nb::type_error((where + ": give created_at or created_at_us, not both").c_str());
        }
        has_time = true;
        if (!value.is_none()) r.created_at_us = Micros(value, (where + "['" + k + "']").c_str());
      } else if (k != "seq") {
        throw nb::type_error(
            (where + ": unexpected key '" + k + "' (keys: item_id, data, run_id, created_at)")
                .c_str());
      }
    }
    if (!has_item) throw nb::type_error((where + " has no 'item_id'").c_str());
    if (!has_data) throw nb::type_error((where + " has no 'data'").c_str());
    out.push_back(std::move(r));
  }
  return out;
}

// The keyword arguments of Repo.records and Repo.records_arrow.
tr::RecordQuery MakeRecordQuery(nb::handle run_id, nb::handle run_ids, nb::handle item_id,
                                nb::handle item_ids, nb::handle item_prefix, nb::handle version,
                                nb::handle tag) {
  tr::RecordQuery q;
  q.run_id = OptionalStr(run_id, "run_id");
  if (!run_ids.is_none()) q.run_ids = StrList(run_ids, "run_ids");
  q.item_id = OptionalStr(item_id, "item_id");
  if (!item_ids.is_none()) q.item_ids = StrList(item_ids, "item_ids");
  q.item_prefix = OptionalStr(item_prefix, "item_prefix");
  q.version = Version(version);
  if (auto t = OptionalStr(tag, "tag")) q.tag = std::move(*t);
  return q;
}

// --- Results ----------------------------------------------------------------

nb::object OptionalToPy(const std::optional<std::string>& s) {
  return s ? nb::object(nb::str(s->data(), s->size())) : nb::none();
}

nb::dict RunInfoToDict(const tr::RunInfo& r) {
  nb::dict d;
  d["run_id"] = nb::str(r.run_id.data(), r.run_id.size());
  d["name"] = OptionalToPy(r.name);
  d["experiment"] = OptionalToPy(r.experiment);
  d["description"] = OptionalToPy(r.description);
  nb::list tags;
  for (const auto& t : r.tags) tags.append(nb::str(t.data(), t.size()));
  d["tags"] = tags;
  d["status"] = nb::str(r.status.data(), r.status.size());
  d["archived"] = nb::bool_(r.archived);
  d["created_at_us"] = nb::int_(r.created_at_us);
  d["updated_at_us"] = nb::int_(r.updated_at_us);
  d["ended_at_us"] = r.ended_at_us ? nb::object(nb::int_(*r.ended_at_us)) : nb::none();
  d["kind"] = OptionalToPy(r.kind);
  d["target"] = r.target ? FromJson(*r.target) : nb::none();
  return d;
}

nb::dict SeriesInfoToDict(const tr::SeriesInfo& s) {
  nb::dict d;
  d["series_id"] = nb::int_(s.series_id);
  d["run_id"] = nb::str(s.run_id.data(), s.run_id.size());
  d["name"] = nb::str(s.name.data(), s.name.size());
  d["context"] = FromJson(s.context);
  d["created_at_us"] = nb::int_(s.created_at_us);
  return d;
}

nb::dict SeriesStatsToDict(const tr::SeriesStats& s) {
  nb::dict d;
  d["count"] = nb::int_(s.count);
  d["first_step"] = nb::int_(s.first_step);
  d["last_step"] = nb::int_(s.last_step);
  d["last"] = nb::float_(s.last);
  d["min"] = nb::float_(s.min);
  d["min_step"] = nb::int_(s.min_step);
  d["max"] = nb::float_(s.max);
  d["max_step"] = nb::int_(s.max_step);
  d["non_finite"] = nb::int_(s.non_finite);
  d["last_timestamp_us"] = nb::int_(s.last_timestamp_us);
  return d;
}

nb::list SeriesListToPy(const std::vector<tr::SeriesInfo>& series) {
  nb::list out;
  for (const auto& s : series) out.append(SeriesInfoToDict(s));
  return out;
}

nb::dict RecordToDict(const tr::Record& r) {
  nb::dict d;
  d["seq"] = nb::int_(r.seq);
  d["run_id"] = OptionalToPy(r.run_id);
  d["item_id"] = nb::str(r.item_id.data(), r.item_id.size());
  d["data"] = FromJson(r.data);
  d["created_at_us"] = nb::int_(r.created_at_us);
  return d;
}

nb::tuple VersionsToTuple(const tr::TableVersions& v) {
  return nb::make_tuple(v.runs, v.params, v.series, v.metrics);
}

}  // namespace kv0::python
