"""kv0.tracking records tables, run deletion and purge, written through
Python and read back through kv0, pyarrow and pylance."""

import datetime
import os

import pyarrow as pa
import pytest

from kv0 import errors
from kv0.tracking import Repo, series_id

UTC = datetime.timezone.utc
T0 = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z in microseconds


def keys(rows):
    return [(r["run_id"], r["item_id"]) for r in rows]


def files_holding(directory, needle):
    """The files under directory whose bytes contain needle (a str)."""
    found = []
    for root, _, names in os.walk(directory):
        for name in names:
            with open(os.path.join(root, name), "rb") as f:
                if needle.encode() in f.read():
                    found.append(os.path.relpath(os.path.join(root, name), directory))
    return found


# --- appending and reading ------------------------------------------------------


def test_append_read_and_newest_wins(repo):
    assert repo.records("evals") == []
    assert repo.records_version("evals") == 0
    assert repo.record_tables() == []

    v1 = repo.append_records("evals", [
        {"item_id": "q2", "data": {"score": 0.5, "tags": ["a", None], "ok": True},
         "run_id": "r1", "created_at": T0},
        {"item_id": "q1", "data": [1, 2.5, "x"], "run_id": "r1",
         "created_at": datetime.datetime(2026, 1, 1, 0, 0, 1)},  # naive: UTC
        {"item_id": "q1", "data": "no run"},
        {"item_id": "q1", "data": None, "run_id": "r0", "created_at": T0 + 2},
    ])
    assert isinstance(v1, int) and v1 > 0
    assert repo.records_version("evals") == v1
    assert repo.record_tables() == ["evals"]

    rows = repo.records("evals")
    # Ordered by run_id, rows without one first, then by item_id.
    assert keys(rows) == [(None, "q1"), ("r0", "q1"), ("r1", "q1"), ("r1", "q2")]
    assert set(rows[0]) == {"seq", "run_id", "item_id", "data", "created_at_us"}
    by_key = {(r["run_id"], r["item_id"]): r for r in rows}
    assert by_key[("r1", "q2")]["data"] == {"score": 0.5, "tags": ["a", None], "ok": True}
    assert by_key[("r1", "q2")]["created_at_us"] == T0
    assert by_key[("r1", "q1")]["data"] == [1, 2.5, "x"]
    assert type(by_key[("r1", "q1")]["data"][0]) is int
    assert by_key[("r1", "q1")]["created_at_us"] == T0 + 1_000_000
    assert by_key[("r0", "q1")]["data"] is None
    assert by_key[(None, "q1")]["data"] == "no run"
    assert by_key[(None, "q1")]["created_at_us"] > T0  # default: now
    assert len({r["seq"] for r in rows}) == 4

    # A newer row of a key replaces the older one; other keys keep theirs.
    v2 = repo.append_records("evals", [{"item_id": "q2", "data": {"score": 0.9},
                                        "run_id": "r1"}])
    assert v2 > v1
    rows = repo.records("evals")
    assert keys(rows) == [(None, "q1"), ("r0", "q1"), ("r1", "q1"), ("r1", "q2")]
    newest = rows[3]
    assert newest["data"] == {"score": 0.9}
    assert newest["seq"] > by_key[("r1", "q2")]["seq"]
    assert repo.records("evals", item_id="q2") == [newest]
    assert repo.records("evals", run_id="r1", item_id="q1") == [rows[2]]

    # Appending nothing commits nothing.
    assert repo.append_records("evals", []) == v2
    assert repo.records_version("evals") == v2


def test_records_are_seen_by_another_handle(path, opts):
    with Repo(path, **opts) as writer, Repo(path, **opts) as reader:
        assert reader.records("evals") == []
        version = writer.append_records("evals", [{"item_id": "a", "data": 1}])
        # Appends commit at once: no flush needed.
        assert reader.records_version("evals") == version
        assert [r["data"] for r in reader.records("evals")] == [1]


def test_rows_read_back_append_unchanged(repo):
    repo.append_records("evals", [{"item_id": "a", "data": {"x": 1}, "run_id": "r",
                                   "created_at": T0}])
    rows = repo.records("evals")
    repo.append_records("copy", rows)  # seq ignored, created_at_us taken
    copied = repo.records("copy")
    assert [(r["run_id"], r["item_id"], r["data"], r["created_at_us"]) for r in copied] == \
        [("r", "a", {"x": 1}, T0)]
    assert repo.record_tables() == ["copy", "evals"]


def test_trace_spans_one_row_each_read_by_prefix(repo):
    def span(trace, span_id, **data):
        return {"item_id": f"tspan/{trace}/{span_id}", "run_id": "agent",
                "data": {"trace": trace, "span": span_id, **data}}

    repo.append_records("traces", [span("t1", "s1", name="root"),
                                   span("t1", "s2", name="llm", parent="s1")])
    repo.append_records("traces", [span("t10", "s1", name="other trace"),
                                   span("t2", "s1", name="root")])
    repo.append_records("traces", [{"item_id": "tspanx", "data": 0, "run_id": "agent"}])
    # A span sent again (it ended) replaces its own row.
    repo.append_records("traces", [span("t1", "s2", name="llm", parent="s1", status="ok")])

    rows = repo.records("traces", item_prefix="tspan/t1/")
    assert [r["item_id"] for r in rows] == ["tspan/t1/s1", "tspan/t1/s2"]
    assert rows[1]["data"] == {"trace": "t1", "span": "s2", "name": "llm", "parent": "s1",
                               "status": "ok"}
    assert [r["item_id"] for r in repo.records("traces", item_prefix="tspan/")] == \
        ["tspan/t1/s1", "tspan/t1/s2", "tspan/t10/s1", "tspan/t2/s1"]
    assert len(repo.records("traces", item_prefix="tspan")) == 5
    assert repo.records("traces", item_prefix="tspan/t3/") == []
    assert keys(repo.records("traces", run_id="agent", item_prefix="tspan/t2/")) == \
        [("agent", "tspan/t2/s1")]
    assert repo.records("traces", run_id="other", item_prefix="tspan/t1/") == []


def test_item_ids_beyond_one_chunk(repo):
    n = 1200
    repo.append_records("big", [{"item_id": f"item-{i:05d}", "data": i, "run_id": "r"}
                                for i in range(n)])
    repo.append_records("big", [{"item_id": f"item-{i:05d}", "data": -i, "run_id": "s"}
                                for i in range(0, n, 2)])
    wanted = [f"item-{i:05d}" for i in range(n)] + ["missing-1", "missing-2"]
    rows = repo.records("big", run_id="r", item_ids=wanted)
    assert [r["item_id"] for r in rows] == [f"item-{i:05d}" for i in range(n)]
    assert [r["data"] for r in rows] == list(range(n))
    # Duplicates and a generator are fine; rows of both runs come back.
    rows = repo.records("big", item_ids=(w for w in wanted + wanted[:10]))
    assert len(rows) == n + n // 2
    assert keys(rows)[n] == ("s", "item-00000")
    assert repo.records("big", item_ids=[]) == []


def test_run_ids(repo):
    repo.append_records("evals", [{"item_id": "q", "data": run, "run_id": run}
                                  for run in ("a", "b", "c")])
    repo.append_records("evals", [{"item_id": "q", "data": "none"},
                                  {"item_id": "z", "data": "a2", "run_id": "a"}])
    assert keys(repo.records("evals", run_ids=["c", "a", "x"])) == \
        [("a", "q"), ("a", "z"), ("c", "q")]
    assert keys(repo.records("evals", run_ids=("b",), item_id="q")) == [("b", "q")]
    assert keys(repo.records("evals", run_ids=["a", "b"], item_ids=["z"])) == [("a", "z")]
    assert keys(repo.records("evals", run_id="a")) == [("a", "q"), ("a", "z")]
    assert repo.records("evals", run_ids=[]) == []
    run_ids = [f"run-{i}" for i in range(1100)] + ["b"]
    assert keys(repo.records("evals", run_ids=run_ids)) == [("b", "q")]


def test_version_and_tag_reads(repo):
    v1 = repo.append_records("evals", [{"item_id": "q", "data": "first", "run_id": "r"}])
    v2 = repo.append_records("evals", [{"item_id": "q", "data": "second", "run_id": "r"},
                                       {"item_id": "p", "data": "new", "run_id": "r"}])
    assert [r["data"] for r in repo.records("evals", version=v1)] == ["first"]
    assert [r["data"] for r in repo.records("evals", version=v2)] == ["new", "second"]

    assert repo.records_tags("evals") == {}
    repo.create_records_tag("evals", "baseline", v1)
    repo.create_records_tag("evals", "current")  # the latest version
    assert repo.records_tags("evals") == {"baseline": v1, "current": v2}
    repo.append_records("evals", [{"item_id": "q", "data": "third", "run_id": "r"}])
    assert [r["data"] for r in repo.records("evals", tag="baseline")] == ["first"]
    assert [r["data"] for r in repo.records("evals", tag="current")] == ["new", "second"]
    assert [r["data"] for r in repo.records("evals")] == ["new", "third"]
    assert [r["data"] for r in repo.records("evals", tag="baseline", item_id="q")] == \
        ["first"]
    assert pa.table(repo.records_arrow("evals", tag="baseline"))["data"].to_pylist() == \
        ['"first"']

    repo.delete_records_tag("evals", "current")
    assert repo.records_tags("evals") == {"baseline": v1}
    with pytest.raises(errors.NotFound):
        repo.records("evals", tag="current")
    with pytest.raises(errors.NotFound):
        repo.records("evals", version=v2 + 100)
    with pytest.raises(errors.NotFound):
        repo.records("missing-table", tag="baseline")
    with pytest.raises(errors.InvalidArgument, match="version or tag"):
        repo.records("evals", version=v1, tag="baseline")
    with pytest.raises(errors.Error):
        repo.create_records_tag("evals", "baseline", v2)  # exists
    with pytest.raises(errors.Error):
        repo.create_records_tag("no-such-table", "t")


def test_tags_belong_to_one_table(repo):
    va = repo.append_records("a", [{"item_id": "x", "data": 1}])
    repo.append_records("b", [{"item_id": "x", "data": 2}])
    repo.append_records("b", [{"item_id": "x", "data": 3}])
    repo.create_records_tag("a", "t", va)
    assert repo.records_tags("a") == {"t": va}
    assert repo.records_tags("b") == {}
    with pytest.raises(errors.NotFound):
        repo.records("b", tag="t")
    repo.create_records_tag("b", "t")  # the same name on another table
    assert [r["data"] for r in repo.records("a", tag="t")] == [1]
    assert [r["data"] for r in repo.records("b", tag="t")] == [3]
    repo.delete_records_tag("b", "t")
    assert repo.records_tags("a") == {"t": va}


def test_table_names_are_escaped(repo, path):
    names = ["evals", "with space", "a/b", "ünï", "50%", "..", "Evals"]
    for i, name in enumerate(names):
        repo.append_records(name, [{"item_id": "x", "data": i}])
    assert repo.record_tables() == sorted(names)
    for i, name in enumerate(names):
        assert [r["data"] for r in repo.records(name)] == [i]
    repo.create_records_tag("50%", "t")
    assert repo.records_tags("50%") == {"t": repo.records_version("50%")}
    assert repo.record_tables() == sorted(names)
    # Every table lives under records/, none outside.
    assert sorted(os.listdir(path)) == ["metrics.lance", "params.lance", "records",
                                        "runs.lance", "series.lance"]


def test_records_arrow_through_pyarrow(repo):
    repo.append_records("evals", [
        {"item_id": "q1", "data": {"score": 1.5}, "run_id": "r", "created_at": T0},
        {"item_id": "q2", "data": [1, "two"], "created_at": T0 + 1},
    ])
    table = pa.table(repo.records_arrow("evals"))
    ts = pa.timestamp("us", tz="UTC")
    assert [(f.name, f.type) for f in table.schema] == [
        ("seq", pa.uint64()), ("table_name", pa.string()), ("run_id", pa.string()),
        ("item_id", pa.string()), ("data", pa.string()), ("created_at", ts)]
    assert table.schema.field("run_id").nullable
    rows = table.to_pylist()
    assert [(r["table_name"], r["run_id"], r["item_id"]) for r in rows] == \
        [("evals", None, "q2"), ("evals", "r", "q1")]
    assert rows[1]["data"] == '{"score":1.5}' and rows[0]["data"] == '[1,"two"]'
    assert rows[1]["created_at"] == datetime.datetime(2026, 1, 1, tzinfo=UTC)
    assert [r["seq"] for r in rows] == [r["seq"] for r in repo.records("evals")]

    assert pa.table(repo.records_arrow("evals", run_id="r"))["item_id"].to_pylist() == ["q1"]
    assert pa.table(repo.records_arrow("missing")).num_rows == 0
    stream = repo.records_arrow("evals", item_prefix="q")
    assert pa.RecordBatchReader.from_stream(stream).read_all().num_rows == 2
    with pytest.raises(Exception, match="consumed"):
        stream.__arrow_c_stream__()


def test_argument_errors(repo):
    with pytest.raises(TypeError, match="iterable of dicts"):
        repo.append_records("t", {"item_id": "x", "data": 1})
    with pytest.raises(TypeError, match=r"rows\[1\] must be a dict"):
        repo.append_records("t", [{"item_id": "x", "data": 1}, ("y", 2)])
    with pytest.raises(TypeError, match=r"rows\[0\] has no 'item_id'"):
        repo.append_records("t", [{"data": 1}])
    with pytest.raises(TypeError, match="has no 'data'"):
        repo.append_records("t", [{"item_id": "x"}])
    with pytest.raises(TypeError, match="unexpected key 'value'"):
        repo.append_records("t", [{"item_id": "x", "data": 1, "value": 2}])
    with pytest.raises(TypeError, match="item_id"):
        repo.append_records("t", [{"item_id": 7, "data": 1}])
    with pytest.raises(TypeError, match="run_id"):
        repo.append_records("t", [{"item_id": "x", "data": 1, "run_id": 7}])
    with pytest.raises(TypeError, match="microseconds"):
        repo.append_records("t", [{"item_id": "x", "data": 1, "created_at": 1.5}])
    with pytest.raises(TypeError, match="not both"):
        repo.append_records("t", [{"item_id": "x", "data": 1, "created_at": 1,
                                   "created_at_us": 1}])
    with pytest.raises(TypeError):
        repo.append_records("t", [{"item_id": "x", "data": {1, 2}}])
    with pytest.raises(errors.InvalidArgument):
        repo.append_records("t", [{"item_id": "", "data": 1}])
    with pytest.raises(errors.InvalidArgument):
        repo.append_records("", [{"item_id": "x", "data": 1}])
    # A bad row anywhere writes nothing.
    with pytest.raises(errors.InvalidArgument):
        repo.append_records("t", [{"item_id": "x", "data": 1}, {"item_id": "", "data": 2}])
    assert repo.records("t") == [] and repo.records_version("t") == 0

    repo.append_records("t", [{"item_id": "x", "data": 1}])
    with pytest.raises(errors.InvalidArgument, match="run_id or run_ids"):
        repo.records("t", run_id="a", run_ids=["b"])
    with pytest.raises(errors.InvalidArgument, match="item_id, item_ids and item_prefix"):
        repo.records("t", item_id="a", item_prefix="b")
    with pytest.raises(TypeError, match="run_ids"):
        repo.records("t", run_ids="abc")
    with pytest.raises(TypeError, match="item_ids"):
        repo.records("t", item_ids=[1, 2])
    with pytest.raises(TypeError, match="version"):
        repo.records("t", version=-1)
    with pytest.raises(TypeError, match="version"):
        repo.records_arrow("t", version="1")
    with pytest.raises(TypeError):
        repo.records("t", "positional filters are refused")
    with pytest.raises(TypeError, match="version"):
        repo.create_records_tag("t", "tag", version=True)


def test_closed_repo_refuses_records(path, opts):
    repo = Repo(path, **opts)
    repo.close()
    with pytest.raises(errors.NotSupported):
        repo.append_records("t", [{"item_id": "x", "data": 1}])
    with pytest.raises(errors.NotSupported):
        repo.records("t")
    with pytest.raises(errors.NotSupported):
        repo.delete_runs(["r"])
    with pytest.raises(errors.NotSupported):
        repo.purge()


def test_no_legacy_records_in_a_new_repository(repo):
    assert repo.has_legacy_records() is False
    repo.append_records("evals", [{"item_id": "x", "data": 1}])
    assert repo.has_legacy_records() is False


# --- deleting runs and purging ---------------------------------------------------------


def test_deleted_runs_records_are_gone(repo):
    repo.create_run("gone")
    repo.create_run("kept")
    repo.append_records("evals", [{"item_id": "q", "data": run, "run_id": run}
                                  for run in ("gone", "kept")] + [{"item_id": "q", "data": 0}])
    version = repo.records_version("evals")
    repo.create_records_tag("evals", "before", version)
    repo.delete_runs(["gone"])
    assert keys(repo.records("evals")) == [(None, "q"), ("kept", "q")]
    assert repo.records("evals", run_id="gone") == []
    assert keys(repo.records("evals", run_ids=["gone", "kept"])) == [("kept", "q")]
    assert repo.records_version("evals") > version
    # Reads at a tagged version hide them too.
    assert keys(repo.records("evals", tag="before")) == [(None, "q"), ("kept", "q")]
    assert pa.table(repo.records_arrow("evals", version=version))["run_id"].to_pylist() == \
        [None, "kept"]


def test_purge_removes_every_byte_of_a_deleted_run(path, opts):
    lance = pytest.importorskip("lance")
    marker = "kv0-purge-marker-5d1e0b7c"
    with Repo(path, **opts) as repo:
        doomed = repo.create_run("doomed", name="run " + marker, description=marker)
        doomed.set_params({"note": marker, "lr": 0.1})
        for i in range(10):
            doomed.track(float(i), "loss")
        kept = repo.create_run("kept", name="survivor")
        kept.set_params({"lr": 0.2})
        for i in range(10):
            kept.track(float(i), "loss")
        kept.finish()
        repo.append_records("evals", [
            {"item_id": "q-" + marker, "data": {"answer": marker}, "run_id": "doomed"},
            {"item_id": "q1", "data": {"answer": "kept"}, "run_id": "kept"},
        ])
        repo.append_records("other", [{"item_id": "x", "data": "no run"}])
        repo.create_records_tag("evals", "snapshot")
        repo.create_records_tag("other", "keep")
        repo.optimize()  # indexes on the records' item_id and run_id too

        repo.delete_runs(["doomed"])
        # Deleting hides the rows; older versions still hold their bytes.
        held = files_holding(path, marker)
        for table in ("runs.lance", "params.lance", "records"):
            assert any(f.startswith(table) for f in held), (table, held)
        with pytest.raises(errors.Busy, match="records/evals:snapshot"):
            repo.purge()
        # The refused purge changed nothing.
        assert repo.records_tags("evals") == {"snapshot": repo.records_tags("evals")["snapshot"]}

        stats = repo.purge(force=True)
        assert set(stats) == {"datasets", "versions_removed", "bytes_removed", "tags_deleted"}
        assert stats["tags_deleted"] == ["records/evals:snapshot"]
        assert stats["datasets"] == 6  # runs, params, series, metrics, evals, other
        assert stats["versions_removed"] > 0 and stats["bytes_removed"] > 0
        assert repo.records_tags("evals") == {}
        assert list(repo.records_tags("other")) == ["keep"]

        # Everything of the other run stays readable.
        assert [r["run_id"] for r in repo.runs()] == ["kept"]
        assert repo.run("kept")["name"] == "survivor"
        assert repo.params("kept") == {"lr": 0.2}
        sid = series_id("kept", "loss")
        assert pa.table(repo.read_many([sid]))["value"].to_pylist() == \
            [float(i) for i in range(10)]
        assert keys(repo.records("evals")) == [("kept", "q1")]
        assert [r["data"] for r in repo.records("other", tag="keep")] == ["no run"]

        # Nothing is left to purge.
        again = repo.purge()
        assert again["tags_deleted"] == [] and again["versions_removed"] == 0

    assert files_holding(path, marker) == []

    dataset = lance.dataset(path + "/records/evals.lance")
    evals = dataset.to_table()
    assert evals.schema.names == ["seq", "table_name", "run_id", "item_id", "data",
                                  "created_at"]
    assert [(r["run_id"], r["item_id"]) for r in evals.to_pylist()] == [("kept", "q1")]
    # The indexes optimize built survive the purge's rewrite, on the live rows only.
    indexed = {tuple(i.field_names): i.num_rows_indexed for i in dataset.describe_indices()}
    assert indexed == {("item_id",): 1, ("run_id",): 1}


def test_purge_without_deleted_runs_keeps_tags(repo):
    v1 = repo.append_records("evals", [{"item_id": "q", "data": 1, "run_id": "r"}])
    repo.append_records("evals", [{"item_id": "q", "data": 2, "run_id": "r"}])
    repo.append_records("evals", [{"item_id": "q", "data": 3, "run_id": "r"}])
    repo.create_records_tag("evals", "first", v1)
    stats = repo.purge()
    assert stats["tags_deleted"] == [] and stats["versions_removed"] > 0
    assert [r["data"] for r in repo.records("evals", tag="first")] == [1]
    assert [r["data"] for r in repo.records("evals")] == [3]
