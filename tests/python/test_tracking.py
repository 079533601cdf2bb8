"""kv0.tracking: runs, parameters and metrics written through Python and read
back, through kv0 and through pylance."""

import datetime
import math
import subprocess
import sys
import textwrap
import threading
import time

import pyarrow as pa
import pytest

import kv0
from kv0 import errors
from kv0.tracking import Repo, Run, series_id

UTC = datetime.timezone.utc
T0 = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z in microseconds


# --- runs --------------------------------------------------------------------


def test_create_track_finish_read_back(repo):
    run = repo.create_run(
        name="baseline", experiment="mnist", description="first try", tags=["a", "b"],
        kind="training", target={"model": "resnet", "layers": [18, 34]},
        created_at=T0)
    assert isinstance(run, Run)
    assert len(run.run_id) == 32 and int(run.run_id, 16) >= 0
    for i in range(10):
        run.track(float(i), "loss")
    run.finish()

    info = repo.run(run.run_id)
    assert info["run_id"] == run.run_id
    assert info["name"] == "baseline"
    assert info["experiment"] == "mnist"
    assert info["description"] == "first try"
    assert info["tags"] == ["a", "b"]
    assert info["status"] == "finished"
    assert info["archived"] is False
    assert info["created_at_us"] == T0
    assert info["updated_at_us"] > T0
    assert info["ended_at_us"] >= info["updated_at_us"] - 10_000_000
    assert info["kind"] == "training"
    assert info["target"] == {"model": "resnet", "layers": [18, 34]}
    assert set(info) == {"run_id", "name", "experiment", "description", "tags", "status",
                         "archived", "created_at_us", "updated_at_us", "ended_at_us", "kind",
                         "target"}
    assert repo.runs() == [info]
    assert repo.run("no-such-run") is None


def test_defaults_and_explicit_run_id(repo):
    run = repo.create_run("my-run")
    assert run.run_id == "my-run"
    info = repo.run("my-run")
    assert info["status"] == "running"
    assert info["name"] is None and info["experiment"] is None and info["description"] is None
    assert info["tags"] == [] and info["kind"] is None and info["target"] is None
    assert info["ended_at_us"] is None
    assert repr(run) == "<kv0.tracking.Run my-run>"


def test_runs_ordered_by_creation(repo):
    repo.create_run("b", created_at=T0 + 2)
    repo.create_run("c", created_at=T0 + 1)
    repo.create_run("a", created_at=T0 + 1)
    assert [r["run_id"] for r in repo.runs()] == ["a", "c", "b"]


def test_times_as_datetime(repo):
    naive = datetime.datetime(2026, 1, 1)
    repo.create_run("naive", created_at=naive)
    assert repo.run("naive")["created_at_us"] == T0
    aware = datetime.datetime(2026, 1, 1, 1, 0, 0, 7, tzinfo=datetime.timezone(
        datetime.timedelta(hours=1)))
    repo.create_run("aware", created_at=aware)
    assert repo.run("aware")["created_at_us"] == T0 + 7
    run = repo.create_run("ended")
    run.finish("aborted", ended_at=datetime.datetime(2026, 1, 2, tzinfo=UTC))
    info = repo.run("ended")
    assert info["status"] == "aborted"
    assert info["ended_at_us"] == T0 + 86_400_000_000
    with pytest.raises(TypeError, match="microseconds"):
        repo.create_run("x", created_at=1.5)
    with pytest.raises(TypeError):
        repo.create_run("x", created_at="2026-01-01")


def test_update_run_changes_only_given_fields(repo):
    run = repo.create_run("r", name="n", experiment="e", tags=["t"], kind="training",
                          target=[1, 2])
    before = repo.run("r")
    after = repo.update_run("r", description="d", archived=True)
    assert after == repo.run("r")
    for key in ("name", "experiment", "tags", "status", "created_at_us", "ended_at_us",
                "kind", "target"):
        assert after[key] == before[key], key
    assert after["description"] == "d" and after["archived"] is True

    # Through the handle; None clears a nullable field.
    after = run.update(name=None, tags=["x", "y"], target={"k": "v"}, status="failed",
                       ended_at_us=T0, created_at_us=T0 - 1)
    info = repo.run("r")
    assert info == after
    assert info["name"] is None and info["tags"] == ["x", "y"]
    assert info["target"] == {"k": "v"} and info["status"] == "failed"
    assert info["ended_at_us"] == T0 and info["created_at_us"] == T0 - 1
    assert info["experiment"] == "e" and info["description"] == "d"
    # No change writes nothing.
    versions = repo.latest_versions()
    assert run.update() == info
    assert repo.update_run("r", experiment="e") == info
    repo.flush()
    assert repo.latest_versions() == versions


def test_run_update_applies_to_the_current_record(path, opts):
    with Repo(path, **opts) as a, Repo(path, **opts) as b:
        run = a.create_run("r", name="a")
        a.flush()
        b.update_run("r", name="b", description="from b")
        b.flush()
        returned = run.update(name="a")
        assert returned == a.run("r")
        assert returned["name"] == "a" and returned["description"] == "from b"


def test_update_argument_errors(repo):
    run = repo.create_run("r")
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        run.update(colour="red")
    with pytest.raises(TypeError, match="unexpected keyword argument 'run_id'"):
        run.update(run_id="other")
    with pytest.raises(TypeError, match="unexpected keyword argument 'updated_at_us'"):
        repo.update_run("r", updated_at_us=1)
    with pytest.raises(TypeError, match="archived"):
        run.update(archived=1)
    with pytest.raises(TypeError, match="tags"):
        run.update(tags="abc")
    with pytest.raises(TypeError):
        run.update(name=3)
    with pytest.raises(errors.InvalidArgument, match="status"):
        run.update(status="done")
    with pytest.raises(errors.NotFound):
        repo.update_run("missing", name="x")
    assert repo.run("r")["name"] is None


def test_params_merge(repo):
    run = repo.create_run("r")
    run.set_params({"optimizer": {"name": "adam", "lr": 0.1, "betas": [0.9, 0.999]},
                    "batch": 32, "tags": ("x", None), "debug": False})
    run.set_params({"optimizer": {"lr": 0.01}, "note": "ünïcode ✓", "big": 2**64 - 1})
    expected = {"optimizer": {"name": "adam", "lr": 0.01, "betas": [0.9, 0.999]},
                "batch": 32, "tags": ["x", None], "debug": False, "note": "ünïcode ✓",
                "big": 2**64 - 1}
    assert repo.params("r") == expected
    other = repo.create_run("s")
    other.set_params({"lr": 1})
    assert repo.params("unknown") == {}
    assert repo.all_params() == {"r": expected, "s": {"lr": 1}}
    assert type(repo.params("r")["batch"]) is int
    assert type(repo.params("r")["optimizer"]["lr"]) is float


def test_params_errors(repo):
    run = repo.create_run("r")
    with pytest.raises(TypeError, match="dict"):
        run.set_params([1, 2])
    with pytest.raises(TypeError, match=r"set.*at \['a'\]\['b'\]"):
        run.set_params({"a": {"b": {1, 2}}})
    with pytest.raises(TypeError, match="keys must be str"):
        run.set_params({1: "x"})
    with pytest.raises(OverflowError):
        run.set_params({"x": 2**64})
    with pytest.raises(errors.InvalidArgument):
        run.set_params({"a.b": 1})
    with pytest.raises(errors.InvalidArgument):
        run.set_params({"x": math.nan})
    cyclic = []
    cyclic.append(cyclic)
    with pytest.raises(RecursionError):
        run.set_params({"x": cyclic})
    assert repo.params("r") == {}


# --- series and points --------------------------------------------------------


def test_series_and_stats(repo):
    run = repo.create_run("r")
    for step, value in enumerate([3.0, 1.0, math.nan, 5.0, 2.0]):
        run.track(value, "loss", timestamp=T0 + step)
    run.track(0.5, "acc", step=7, epoch=1, context={"subset": "val"}, timestamp=T0 + 100)
    run.track(math.inf, "bad", timestamp=T0)
    run.track(math.nan, "bad", timestamp=T0 + 1)

    series = {(s["name"], str(s["context"])): s for s in repo.series("r")}
    assert set(series) == {("loss", "{}"), ("acc", "{'subset': 'val'}"), ("bad", "{}")}
    loss, acc, bad = series[("loss", "{}")], series[("acc", "{'subset': 'val'}")], \
        series[("bad", "{}")]
    assert loss["series_id"] == series_id("r", "loss")
    assert loss["series_id"] == series_id("r", "loss", {})
    assert acc["series_id"] == series_id("r", "acc", {"subset": "val"})
    assert acc["context"] == {"subset": "val"} and acc["run_id"] == "r"
    assert set(loss) == {"series_id", "run_id", "name", "context", "created_at_us"}
    assert sorted(s["series_id"] for s in repo.all_series()) == \
        sorted(s["series_id"] for s in series.values())

    missing = series_id("r", "nothing")
    stats = repo.series_stats([loss["series_id"], acc["series_id"], bad["series_id"], missing])
    assert set(stats) == {loss["series_id"], acc["series_id"], bad["series_id"]}
    s = stats[loss["series_id"]]
    assert s == {**s, "count": 5, "first_step": 0, "last_step": 4, "last": 2.0, "min": 1.0,
                 "min_step": 1, "max": 5.0, "max_step": 3, "non_finite": 1,
                 "last_timestamp_us": T0 + 4}
    assert set(s) == {"count", "first_step", "last_step", "last", "min", "min_step", "max",
                      "max_step", "non_finite", "last_timestamp_us"}
    a = stats[acc["series_id"]]
    assert (a["count"], a["first_step"], a["last_step"], a["last"]) == (1, 7, 7, 0.5)
    b = stats[bad["series_id"]]
    assert b["count"] == 2 and b["non_finite"] == 2
    assert math.isnan(b["min"]) and math.isnan(b["max"]) and math.isnan(b["last"])


def test_series_ids_are_stable_and_distinct():
    a = series_id("r", "loss", {"a": 1, "b": [1, 2]})
    assert a == series_id("r", "loss", {"b": [1, 2], "a": 1})  # sorted keys
    assert a != series_id("r", "loss", {"a": 2, "b": [1, 2]})
    assert a != series_id("r2", "loss", {"a": 1, "b": [1, 2]})
    assert 0 < a < 2**64
    with pytest.raises(TypeError):
        series_id("r", "loss", [1])


def test_track_keeps_contexts_apart_when_a_dict_is_reused_or_changed(repo):
    # track reuses the last context's conversion while the dict it gets has
    # the same keys and values of the same types (tracking_run.cc): a dict
    # changed in place, values equal in Python but not in JSON, and contexts
    # it does not keep must each still reach their own series.
    run = repo.create_run("r")
    context = {"subset": "train"}
    run.track(1.0, "loss", step=0, context=context)
    context["subset"] = "val"  # the same dict, changed in place
    run.track(2.0, "loss", step=0, context=context)
    context["fold"] = 1
    run.track(3.0, "loss", step=0, context=context)
    for i, value in enumerate([1, 1.0, True, 0.0, -0.0, None, "1"]):
        run.track(10.0 + i, "typed", step=0, context={"k": value})
        run.track(20.0 + i, "typed", step=1, context={"k": value})  # a new dict, equal
    run.track(4.0, "loss", step=0, context={"subset": {"nested": [1, 2]}})
    run.track(5.0, "loss", step=1, context={"subset": {"nested": [1, 2]}})
    run.track(6.0, "loss", step=0)  # no context after one
    run.track(7.0, "loss", step=1, context={})
    run.track(8.0, "loss", step=1, context={"subset": "train"})

    expected = {
        series_id("r", "loss", {"subset": "train"}): [(0, 1.0), (1, 8.0)],
        series_id("r", "loss", {"subset": "val"}): [(0, 2.0)],
        series_id("r", "loss", {"subset": "val", "fold": 1}): [(0, 3.0)],
        series_id("r", "loss", {"subset": {"nested": [1, 2]}}): [(0, 4.0), (1, 5.0)],
        series_id("r", "loss"): [(0, 6.0), (1, 7.0)],
    }
    for i, value in enumerate([1, 1.0, True, 0.0, -0.0, None, "1"]):
        expected[series_id("r", "typed", {"k": value})] = [(0, 10.0 + i), (1, 20.0 + i)]
    assert len(expected) == 12  # every context above names a series of its own
    stored = {s["series_id"]: s["context"] for s in repo.series("r")}
    assert set(stored) == set(expected)
    table = pa.table(repo.read_many(list(expected)))
    got = {}
    for sid, step, value in zip(table.column("series_id").to_pylist(),
                                table.column("step").to_pylist(),
                                table.column("value").to_pylist()):
        got.setdefault(sid, []).append((step, value))
    assert {sid: sorted(points) for sid, points in got.items()} == expected
    # The stored contexts keep their JSON types.
    assert stored[series_id("r", "typed", {"k": 1.0})] == {"k": 1.0}
    assert type(stored[series_id("r", "typed", {"k": 1.0})]["k"]) is float
    assert stored[series_id("r", "typed", {"k": True})]["k"] is True
    assert math.copysign(1, stored[series_id("r", "typed", {"k": -0.0})]["k"]) == -1


def test_read_downsampled_as_a_table(repo):
    run = repo.create_run("r")
    for step in range(10_000):
        value = 1e9 if step == 6_543 else math.nan if step == 100 else math.sin(step / 100)
        run.track(value, "loss", step=step, timestamp=T0 + step)
    run.track(5.0, "eval", step=0)
    loss, ev = series_id("r", "loss"), series_id("r", "eval")

    table = repo.read_downsampled([loss, ev], buckets=100)
    assert table.schema.field("first_timestamp").type == pa.timestamp("us", tz="UTC")
    rows = table.to_pylist()
    buckets = [r for r in rows if r["series_id"] == loss]
    # 10,000 steps in 100 buckets: cells of 128 steps, counted from 0.
    assert all(not r["raw"] and r["width"] == 128 for r in buckets)
    assert [(r["start"], r["stop"]) for r in buckets[:2]] == [(0, 128), (128, 256)]
    assert buckets[-1]["stop"] == 10_000
    assert sum(r["count"] for r in buckets) == 10_000
    assert sum(r["non_finite"] for r in buckets) == 1
    assert max(r["max"] for r in buckets) == 1e9  # the spike survives
    assert all(not math.isnan(r["min"]) for r in buckets)  # and NaN hides nothing
    # A series of one point comes as that point.
    assert [(r["raw"], r["start"], r["first"]) for r in rows if r["series_id"] == ev] == [
        (True, 0, 5.0)]

    by_time = repo.read_downsampled([loss], buckets=10, x="time", start=T0 + 5_000)
    assert by_time["start"][0].as_py() == T0 + 5_000
    assert sum(by_time["count"].to_pylist()) == 10_000 - 5_000

    for bad in (dict(buckets=0), dict(x="epoch"), dict(start=5, stop=4)):
        with pytest.raises(errors.InvalidArgument):
            repo.read_downsampled([loss], **bad)
    with pytest.raises(errors.InvalidArgument, match="no series"):
        repo.read_downsampled([loss, 42])


def test_read_many_through_pyarrow(repo):
    run = repo.create_run("r")
    for step in (5, 1, 3, 0, 2, 4):
        run.track(step * 10.0, "loss", step=step, epoch=step // 2, timestamp=T0 + step)
    run.track(-1.0, "loss", step=3)  # a later write at one step wins
    run.track(1.0, "acc", step=0)
    loss, acc = series_id("r", "loss"), series_id("r", "acc")

    table = pa.table(repo.read_many([loss]))
    assert table.schema.names == ["series_id", "step", "epoch", "timestamp", "value"]
    assert table.schema.field("series_id").type == pa.uint64()
    assert table.schema.field("step").type == pa.int64()
    assert table.schema.field("epoch").type == pa.int64()
    assert table.schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
    assert table.schema.field("value").type == pa.float64()
    assert table["step"].to_pylist() == [0, 1, 2, 3, 4, 5]
    assert table["value"].to_pylist() == [0.0, 10.0, 20.0, -1.0, 40.0, 50.0]
    assert table["epoch"].to_pylist() == [0, 0, 1, None, 2, 2]
    assert table["series_id"].to_pylist() == [loss] * 6

    window = pa.table(repo.read_many([loss], start=2, stop=4))
    assert window["step"].to_pylist() == [2, 3]
    assert pa.table(repo.read_many([loss], start=4))["step"].to_pylist() == [4, 5]

    both = pa.table(repo.read_many([acc, loss]))
    assert both["series_id"].to_pylist() == [acc] + [loss] * 6
    both = pa.table(repo.read_many((loss, acc, series_id("r", "none"))))
    assert both["series_id"].to_pylist() == [loss] * 6 + [acc]
    assert pa.table(repo.read_many([])).num_rows == 0

    stream = repo.read_many([loss])
    reader = pa.RecordBatchReader.from_stream(stream)
    assert reader.read_all().num_rows == 6
    with pytest.raises(Exception, match="consumed"):
        stream.__arrow_c_stream__()
    with pytest.raises(TypeError):
        repo.read_many(loss)


def test_read_many_in_time_range(repo):
    run = repo.create_run("r")
    for step in range(10):
        run.track(float(step), "loss", step=step, timestamp=T0 + step * 1_000_000)
    sid = series_id("r", "loss")
    table = pa.table(repo.read_many_in([sid], start_time=T0 + 3_000_000,
                                       stop_time=T0 + 6_000_000))
    assert table["step"].to_pylist() == [3, 4, 5]
    start = datetime.datetime(2026, 1, 1, 0, 0, 7)  # naive: UTC
    assert pa.table(repo.read_many_in([sid], start_time=start))["step"].to_pylist() == [7, 8, 9]
    assert pa.table(repo.read_many_in([sid]))["step"].to_pylist() == list(range(10))
    # The latest point of a step decides whether the step is in range.
    run.track(99.0, "loss", step=4, timestamp=T0 + 9_500_000)
    table = pa.table(repo.read_many_in([sid], start_time=T0 + 3_000_000,
                                       stop_time=T0 + 6_000_000))
    assert table["step"].to_pylist() == [3, 5]


def test_resume_run_continues_steps(path, opts):
    with Repo(path, **opts) as repo:
        run = repo.create_run("r")
        for i in range(5):
            run.track(float(i), "loss")
        run.track(1.0, "acc", step=100, context={"k": 1})
    with Repo(path, **opts) as repo:
        run = repo.resume_run("r")
        run.track(5.0, "loss")
        run.track(2.0, "acc", context={"k": 1})
        run.track(0.0, "fresh")
        data = pa.table(repo.read_many([series_id("r", "loss")]))
        assert data["step"].to_pylist() == [0, 1, 2, 3, 4, 5]
        assert data["value"].to_pylist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
        acc = pa.table(repo.read_many([series_id("r", "acc", {"k": 1})]))
        assert acc["step"].to_pylist() == [100, 101]
        assert repo.series_stats([series_id("r", "fresh")])[series_id("r", "fresh")][
            "first_step"] == 0
        with pytest.raises(errors.NotFound):
            repo.resume_run("missing")


def test_latest_versions_change_on_write_only(repo):
    run = repo.create_run("r")
    run.track(1.0, "loss")
    repo.flush()
    first = repo.latest_versions()
    assert isinstance(first, tuple) and len(first) == 4
    assert all(isinstance(v, int) and v > 0 for v in first)
    repo.runs()
    repo.params("r")
    repo.series("r")
    pa.table(repo.read_many([series_id("r", "loss")]))
    repo.series_stats([series_id("r", "loss")])
    assert repo.latest_versions() == first
    assert repo.versions() == first

    run.track(2.0, "loss")
    repo.flush()
    second = repo.latest_versions()
    assert second[3] > first[3]  # metrics
    assert second[:3] == first[:3]

    run.set_params({"a": 1})
    repo.flush()
    third = repo.latest_versions()
    assert third[1] > second[1] and third[3] == second[3]


def test_another_handle_sees_commits(path, opts):
    with Repo(path, **opts) as writer, Repo(path, **opts) as reader:
        versions = reader.latest_versions()
        run = writer.create_run("r")
        run.track(1.0, "loss")
        assert reader.run("r") is None  # not committed yet
        writer.flush()
        assert reader.latest_versions() != versions
        assert reader.run("r")["status"] == "running"
        assert reader.series_stats([series_id("r", "loss")])[series_id("r", "loss")]["count"] == 1


def test_finish_waits_for_its_commit_unless_told_not_to(path, opts):
    with Repo(path, **opts) as writer, Repo(path, **opts) as reader:
        run = writer.create_run("waits")
        run.track(1.0, "loss")
        run.finish()
        assert reader.run("waits")["status"] == "finished"  # committed before finish returned

    with Repo(path, finish_waits=False, **opts) as writer, Repo(path, **opts) as reader:
        run = writer.create_run("does-not-wait", name="nw")
        run.track(1.0, "loss")
        run.finish()
        # The flush finish started commits it; the loop's bound only stops a
        # hang. Points are committed last, so once they are seen all is.
        sid = series_id("does-not-wait", "loss")
        deadline = time.monotonic() + 120
        while reader.series_stats([sid]).get(sid, {}).get("count") != 1:
            assert time.monotonic() < deadline, "the finish was never committed"
            time.sleep(0.02)
        record = reader.run("does-not-wait")
        assert record["status"] == "finished" and record["ended_at_us"] is not None
        assert record["name"] == "nw"  # finish set two fields only

    with pytest.raises(TypeError):
        Repo(path, finish_waits="no", **opts)


# --- errors and lifetime ------------------------------------------------------------


def test_track_errors(repo):
    run = repo.create_run("r")
    with pytest.raises(TypeError, match="context must be a dict"):
        run.track(1.0, "loss", context=["subset", "val"])
    with pytest.raises(TypeError, match="context must be a dict"):
        run.track(1.0, "loss", context="val")
    with pytest.raises(TypeError):
        run.track(1.0, "loss", context={"x": object()})
    with pytest.raises(errors.InvalidArgument):
        run.track(1.0, "")
    with pytest.raises(TypeError):
        run.track("1.0", "loss")
    with pytest.raises(TypeError):
        run.track(1.0, "loss", step=1.5)
    with pytest.raises(TypeError, match="timestamp"):
        run.track(1.0, "loss", timestamp=1.5)
    assert repo.series("r") == []
    # Values float() accepts are fine.
    run.track(1, "ints")
    run.track(True, "bools", step=3, epoch=2, context={}, timestamp=T0)
    assert len(repo.series("r")) == 2


def test_closed_repo_raises_not_supported(path, opts):
    repo = Repo(path, **opts)
    run = repo.create_run("r")
    repo.close()
    repo.close()  # twice is fine
    assert repo.closed and "closed" in repr(repo)
    with pytest.raises(errors.NotSupported):
        repo.runs()
    with pytest.raises(errors.NotSupported):
        run.track(1.0, "loss")
    with pytest.raises(errors.NotSupported):
        repo.create_run()
    assert repo.uri == path


def test_bad_options(path, opts):
    with pytest.raises(errors.InvalidArgument, match="wal_sync"):
        Repo(path, wal_sync="sometimes", wal_dir=opts["wal_dir"])
    with pytest.raises(errors.InvalidArgument, match="flush_interval"):
        Repo(path, flush_interval=-1, wal_dir=opts["wal_dir"])
    with pytest.raises(TypeError):
        Repo(path, flush_rows=-1, wal_dir=opts["wal_dir"])
    with pytest.raises(TypeError):
        Repo(path, "positional options are refused")


def test_run_context_manager(repo):
    with repo.create_run("ok") as run:
        run.track(1.0, "loss")
    assert repo.run("ok")["status"] == "finished"
    assert repo.run("ok")["ended_at_us"] is not None

    with pytest.raises(ZeroDivisionError):
        with repo.create_run("boom") as run:
            run.track(1.0, "loss")
            1 / 0
    assert repo.run("boom")["status"] == "failed"

    with repo.create_run("stopped") as run:
        run.finish("aborted")
    assert repo.run("stopped")["status"] == "aborted"


def test_repo_context_manager_and_reopen(path, opts):
    with Repo(path, **opts) as repo:
        assert repo.uri == path
        run = repo.create_run("r", name="n", tags=["t"])
        run.set_params({"lr": 0.1, "model": {"depth": 4}})
        for i in range(100):
            run.track(i * 0.5, "loss", context={"subset": "train"})
        other = repo.create_run("s")
        other.track(1.0, "x")
        # Not finished, not flushed: close commits.
    assert repo.closed
    with Repo(path, **opts) as again:
        assert [r["run_id"] for r in again.runs()] == ["r", "s"]
        assert again.run("r")["name"] == "n" and again.run("r")["status"] == "running"
        assert again.params("r") == {"lr": 0.1, "model": {"depth": 4}}
        sid = series_id("r", "loss", {"subset": "train"})
        assert [s["series_id"] for s in again.series("r")] == [sid]
        table = pa.table(again.read_many([sid]))
        assert table["value"].to_pylist() == [i * 0.5 for i in range(100)]
        assert again.series_stats([sid])[sid]["max"] == 49.5


def test_dropped_repo_keeps_writes(path, opts):
    repo = Repo(path, **opts)
    repo.create_run("r").track(1.0, "loss")
    del repo
    with Repo(path, **opts) as again:
        assert again.series_stats([series_id("r", "loss")])[series_id("r", "loss")]["count"] == 1


def test_run_keeps_its_repo_alive(path, opts):
    run = Repo(path, **opts).create_run("r")
    run.track(1.0, "loss")  # the Repo object is referenced only by the run
    run.finish()
    with Repo(path, **opts) as again:
        assert again.run("r")["status"] == "finished"


@pytest.mark.parametrize("wal_sync", ["always", "batch", "none"])
def test_crashed_writer_is_replayed_from_its_wal(path, opts, wal_sync):
    # The process dies right after its last track(): every acknowledged
    # point must come back.
    script = textwrap.dedent("""
        import os, sys
        from kv0.tracking import Repo
        wal_sync = sys.argv[3]
        repo = Repo(sys.argv[1], wal_dir=sys.argv[2], wal_sync=wal_sync, flush_interval=3600.0)
        run = repo.create_run("crashed")
        run.set_params({"lr": 0.5})
        for i in range(1000):
            run.track(float(i), "loss")
        os._exit(0)  # no flush, no close
    """)
    subprocess.run([sys.executable, "-c", script, path, opts["wal_dir"], wal_sync], check=True)
    with Repo(path, **opts) as repo:
        assert repo.run("crashed")["status"] == "running"
        assert repo.params("crashed") == {"lr": 0.5}
        sid = series_id("crashed", "loss")
        assert repo.series_stats([sid])[sid]["count"] == 1000
        assert pa.table(repo.read_many([sid]))["value"].to_pylist() == [float(i) for i in
                                                                        range(1000)]


def test_threads_track_concurrently(repo):
    runs = [repo.create_run(f"r{i}") for i in range(4)]

    def work(run):
        for i in range(2000):
            run.track(float(i), "loss")
            run.track(float(i), "shared", context={"thread": run.run_id})

    threads = [threading.Thread(target=work, args=(r,)) for r in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [series_id(r.run_id, "loss") for r in runs]
    stats = repo.series_stats(ids)
    assert [stats[i]["count"] for i in ids] == [2000] * 4
    assert all(stats[i]["last_step"] == 1999 for i in ids)


def test_track_does_not_deadlock_with_lance_logging(path, opts):
    # With flush_rows tiny, track() often waits for a flush (the writer is
    # 2 * flush_rows ahead) while Lance logs from its own threads, which
    # takes the GIL: track must not hold the GIL while it waits.
    script = textwrap.dedent("""
        import logging, sys
        import kv0
        from kv0.tracking import Repo
        logging.basicConfig(level=logging.CRITICAL)
        kv0.set_lance_log_level(5)
        with Repo(sys.argv[1], wal_dir=sys.argv[2], flush_rows=5, flush_interval=3600.0) as repo:
            run = repo.create_run("r")
            for i in range(2000):
                run.track(float(i), "loss")
        kv0.set_lance_log_level(0)
    """)
    subprocess.run([sys.executable, "-c", script, path, opts["wal_dir"]], check=True,
                   timeout=120)
    with Repo(path, **opts) as repo:
        sid = series_id("r", "loss")
        assert repo.series_stats([sid])[sid]["count"] == 2000


def test_small_flush_rows_commits_in_background(path, opts):
    with Repo(path, wal_dir=opts["wal_dir"], flush_rows=100, flush_interval=0.05) as repo:
        run = repo.create_run("r")
        for i in range(1000):
            run.track(float(i), "loss")
        sid = series_id("r", "loss")
        assert repo.series_stats([sid])[sid]["count"] == 1000
        assert pa.table(repo.read_many([sid], start=500))["step"].to_pylist() == \
            list(range(500, 1000))


def test_optimize_keeps_everything(repo):
    run = repo.create_run("r")
    for chunk in range(3):
        for i in range(100):
            run.track(float(i), "loss", step=chunk * 100 + i)
        run.update(description=f"chunk {chunk}")
        repo.flush()
    sid = series_id("r", "loss")
    before_stats = repo.series_stats([sid])
    before_points = pa.table(repo.read_many([sid]))
    before_run = repo.run("r")
    stats = repo.optimize()
    assert set(stats) == {"run_rows_before", "run_rows_after", "points_rewritten",
                          "full_rewrite", "level_cells", "level_bytes", "directory_rows"}
    assert stats["level_cells"] > 0 and stats["level_bytes"] > stats["level_cells"]
    assert stats["directory_rows"] == 1  # one series in one sorted fragment
    assert stats["run_rows_after"] <= stats["run_rows_before"]
    assert isinstance(stats["full_rewrite"], bool)
    assert repo.series_stats([sid]) == before_stats
    assert pa.table(repo.read_many([sid])).equals(before_points)
    assert repo.run("r") == before_run
    repo.recompute_series_stats([sid])
    assert repo.series_stats([sid]) == before_stats


# --- deleting runs -------------------------------------------------------------------


def test_delete_runs_hides_them_everywhere(path, opts):
    with Repo(path, **opts) as repo, Repo(path, **opts) as other:
        gone = repo.create_run("gone", name="g")
        gone.set_params({"lr": 0.1})
        for i in range(5):
            gone.track(float(i), "loss")
        gone.track(1.0, "acc", context={"subset": "val"})
        kept = repo.create_run("kept")
        kept.set_params({"lr": 0.2})
        kept.track(1.0, "loss")
        repo.append_records("evals", [{"item_id": "q", "data": 1, "run_id": "gone"},
                                      {"item_id": "q", "data": 2, "run_id": "kept"}])
        repo.flush()
        gone_ids = [s["series_id"] for s in repo.series("gone")]
        assert len(gone_ids) == 2
        assert [r["run_id"] for r in other.runs()] == ["gone", "kept"]

        # A point buffered but not committed is dropped with its run.
        gone.track(99.0, "late")
        repo.delete_runs(["gone", "never-existed"])

        for handle in (repo, other):
            assert [r["run_id"] for r in handle.runs()] == ["kept"]
            assert handle.run("gone") is None
            assert handle.params("gone") == {}
            assert handle.all_params() == {"kept": {"lr": 0.2}}
            assert handle.series("gone") == []
            assert [s["run_id"] for s in handle.all_series()] == ["kept"]
            assert handle.series_stats(gone_ids + [series_id("gone", "late")]) == {}
            assert pa.table(handle.read_many(gone_ids)).num_rows == 0
            assert [r["run_id"] for r in handle.records("evals")] == ["kept"]
            assert handle.records("evals", run_id="gone") == []
        sid = series_id("kept", "loss")
        assert repo.series_stats([sid])[sid]["count"] == 1

        # Writing through a handle on the deleted run fails.
        with pytest.raises(errors.NotFound):
            gone.track(1.0, "loss")
        with pytest.raises(errors.NotFound):
            gone.set_params({"lr": 0.3})
        with pytest.raises(errors.NotFound):
            repo.resume_run("gone")
        with pytest.raises(errors.NotFound):
            repo.update_run("gone", name="back")
        kept.track(2.0, "loss")  # other runs write on
        assert repo.series_stats([sid])[sid]["count"] == 2

        repo.delete_runs([])  # nothing to do
        with pytest.raises(TypeError, match="run_ids"):
            repo.delete_runs("kept")  # a str is not a list of ids
        assert [r["run_id"] for r in repo.runs()] == ["kept"]

    with Repo(path, **opts) as again:
        assert [r["run_id"] for r in again.runs()] == ["kept"]
        with pytest.raises(errors.NotFound):
            again.resume_run("gone")


# --- interoperability ---------------------------------------------------------------


def test_pylance_reads_the_documented_schemas(path, opts):
    lance = pytest.importorskip("lance")
    with Repo(path, **opts) as repo:
        with repo.create_run("r", name="n", tags=["a"], created_at=T0) as run:
            run.set_params({"lr": 0.1, "name": "adam", "flag": True, "list": [1]})
            run.track(1.5, "loss", step=3, epoch=1, timestamp=T0 + 5,
                      context={"subset": "val"})

    ts = pa.timestamp("us", tz="UTC")

    def fields(table):
        return [(f.name, f.type, f.nullable) for f in table.schema]

    runs = lance.dataset(path + "/runs.lance").to_table()
    assert fields(runs) == [
        ("seq", pa.uint64(), False), ("run_id", pa.string(), False),
        ("name", pa.string(), True), ("experiment", pa.string(), True),
        ("description", pa.string(), True), ("tags", pa.list_(pa.string()), False),
        ("status", pa.string(), False), ("archived", pa.bool_(), False),
        ("created_at", ts, False), ("updated_at", ts, False), ("ended_at", ts, True),
        ("fields", pa.uint32(), True), ("kind", pa.string(), True),
        ("target", pa.string(), True)]
    rows = [r for r in runs.to_pylist() if r["run_id"] == "r"]
    name_bit, tags_bit, status_bit = 1, 8, 16  # docs/design.md, "Run records"
    assert rows and all(r["name"] == "n" for r in rows if r["fields"] & name_bit)
    assert all(r["tags"] == ["a"] for r in rows if r["fields"] & tags_bit)
    assert rows[-1]["fields"] & status_bit
    assert rows[0]["created_at"] == datetime.datetime(2026, 1, 1, tzinfo=UTC)
    assert rows[-1]["status"] == "finished"

    params = lance.dataset(path + "/params.lance").to_table()
    assert fields(params) == [
        ("seq", pa.uint64(), False), ("run_id", pa.string(), False),
        ("key", pa.string(), False), ("value", pa.string(), False),
        ("num", pa.float64(), True), ("text", pa.string(), True), ("flag", pa.bool_(), True)]
    by_key = {r["key"]: r for r in params.to_pylist() if r["run_id"] == "r"}
    assert by_key["lr"]["num"] == 0.1 and by_key["lr"]["value"] == "0.1"
    assert by_key["name"]["text"] == "adam" and by_key["flag"]["flag"] is True
    assert by_key["list"]["value"] == "[1]" and by_key["list"]["num"] is None

    series = lance.dataset(path + "/series.lance").to_table()
    assert fields(series) == [
        ("series_id", pa.uint64(), False), ("run_id", pa.string(), False),
        ("name", pa.string(), False), ("context", pa.string(), False),
        ("created_at", ts, False)]
    sid = series_id("r", "loss", {"subset": "val"})
    rows = [r for r in series.to_pylist() if r["series_id"] == sid]
    assert len(rows) == 1 and rows[0]["name"] == "loss"
    assert rows[0]["context"] == '{"subset":"val"}'

    metrics = lance.dataset(path + "/metrics.lance").to_table()
    assert fields(metrics) == [
        ("series_id", pa.uint64(), False), ("step", pa.int64(), False),
        ("epoch", pa.int64(), True), ("timestamp", ts, False),
        ("value", pa.float64(), False), ("stats", pa.binary(), True),
        ("seq", pa.uint64(), True)]
    # The encoding hint the table was created with; series_id has none.
    hint = b"lance-encoding:dict-divisor"
    schema = lance.dataset(path + "/metrics.lance").schema
    assert [hint in (schema.field(n).metadata or {}) for n in schema.names] == [
        False, True, True, True, True, False, True]
    points = [r for r in metrics.to_pylist() if r["series_id"] == sid]
    assert len(points) == 1
    assert (points[0]["step"], points[0]["epoch"], points[0]["value"]) == (3, 1, 1.5)
    # A run created with a given id may have stored points: its first point
    # may overwrite one, so it carries its seq (docs/design.md).
    assert points[0]["seq"] is not None and points[0]["seq"] > 0
    assert points[0]["timestamp"] == datetime.datetime(2026, 1, 1, 0, 0, 0, 5, tzinfo=UTC)


def test_on_s3(s3_bucket, tmp_path):
    pytest.importorskip("moto")
    bucket, options = s3_bucket
    uri = f"s3://{bucket}/tracking"
    wal = str(tmp_path / "wal")
    with Repo(uri, storage_options=options, wal_dir=wal) as repo:
        assert repo.uri == uri
        with repo.create_run("r", name="s3") as run:
            run.set_params({"lr": 0.1})
            for i in range(100):
                run.track(float(i), "loss")
    with Repo(uri, storage_options=options, wal_dir=wal) as repo:
        assert repo.run("r")["status"] == "finished"
        assert repo.params("r") == {"lr": 0.1}
        sid = series_id("r", "loss")
        assert pa.table(repo.read_many([sid]))["value"].to_pylist() == [float(i) for i in
                                                                        range(100)]


def test_in_memory_repository(tmp_path):
    with Repo("memory://tracking-test", wal_dir=str(tmp_path / "wal")) as repo:
        run = repo.create_run("r")
        run.track(1.0, "loss")
        assert repo.series_stats([series_id("r", "loss")])[series_id("r", "loss")]["count"] == 1


def test_results_convert_with_polars_and_duckdb(repo):
    polars = pytest.importorskip("polars")
    run = repo.create_run("r")
    for i in range(5):
        run.track(float(i), "loss")
    frame = polars.from_arrow(pa.table(repo.read_many([series_id("r", "loss")])))
    assert frame["value"].to_list() == [0.0, 1.0, 2.0, 3.0, 4.0]
    duckdb = pytest.importorskip("duckdb")
    # DuckDB asks a stream for its schema first: hand it a pyarrow reader.
    reader = pa.RecordBatchReader.from_stream(repo.read_many([series_id("r", "loss")]))
    assert duckdb.sql("select sum(value) from reader").fetchall()[0][0] == 10.0


def test_module_surface():
    assert kv0.tracking.Repo is Repo
    assert "track" in Run.track.__doc__
    assert Repo.__doc__ and kv0.tracking.__doc__
