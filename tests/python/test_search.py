"""Repo.search_runs: run search in storage from Python, its table, paging,
hostile names and bad queries. The language's meaning is checked against a
brute-force reference in tests/cpp/run_search_test.cc."""

import math

import pyarrow as pa
import pytest

from kv0 import errors
from kv0.tracking import RunPage

T0 = 1_767_225_600_000_000


def make_runs(repo):
    lrs = [0.1, 0.01, 0.001, "auto", None]
    for i, lr in enumerate(lrs):
        run = repo.create_run(f"r{i}", name=f"run {i}", created_at=T0 + i)
        params = {"optimizer": {"name": "adam" if i % 2 else "sgd"}, "seed": i}
        if lr is not None:
            params["lr"] = lr
        run.set_params(params)
        for step in range(i + 1):
            run.track(1.0 / (step + 1), "loss", step=step)
        run.track(0.5 + i / 10, "acc", context={"subset": "val"})
        if i == 4:
            run.track(math.nan, "loss", step=10)
        run.finish("finished" if i < 3 else "failed")


def test_filter_order_and_table(repo):
    make_runs(repo)
    page = repo.search_runs(
        "params.lr < 0.05 AND status = 'finished'", order_by="params.lr")
    assert isinstance(page, RunPage)
    assert page.matched == 2 and page.next_page_token is None
    table = page.runs
    assert isinstance(table, pa.Table)
    assert table["run_id"].to_pylist() == ["r2", "r1"]
    assert table.schema.field("created_at").type == pa.timestamp("us", tz="UTC")
    # Default columns: every parameter and each series' last value.
    assert table["params.lr"].to_pylist() == ["0.001", "0.01"]
    assert table["params.optimizer.name"].to_pylist() == ["sgd", "adam"]
    assert table["metrics.loss.last"].to_pylist() == [1 / 3, 1 / 2]
    assert table.schema.field('metrics.acc{"subset":"val"}.last').type == pa.float64()

    # A context, statistics, OR and NOT; a missing value sorts last.
    page = repo.search_runs(
        "metrics['acc', {'subset': 'val'}] > 0.6 OR NOT params.lr IS NOT NULL",
        order_by=["params.lr DESC"], columns=["metrics.loss.count", "params.lr"])
    # Numbers, then text, then missing, in either direction.
    assert page.runs["run_id"].to_pylist() == ["r2", "r3", "r4"]
    assert page.runs.column_names[-2:] == ["metrics.loss.count", "params.lr"]
    assert page.runs["metrics.loss.count"].to_pylist() == [3, 4, 6]
    assert page.runs["params.lr"].to_pylist() == ["0.001", "auto", None]


def test_pages_walk_every_run_once(repo):
    make_runs(repo)
    seen, token = [], None
    while True:
        page = repo.search_runs(order_by=["metrics.loss.min", "name DESC"], limit=2,
                                page_token=token, columns=[])
        assert page.matched == 5
        seen += page.runs["run_id"].to_pylist()
        token = page.next_page_token
        if token is None:
            break
    # min of loss: r0 1.0, r1..r4 their last steps' values (r4's NaN is not a min).
    assert seen == ["r4", "r3", "r2", "r1", "r0"]
    with pytest.raises(errors.InvalidArgument, match="another filter or order"):
        repo.search_runs("status = 'failed'", limit=2, page_token=repo.search_runs(
            limit=2).next_page_token)


def test_hostile_names_are_data(repo):
    nasty = "it's \"quoted\" `back` <script>&amp; %_"
    run = repo.create_run("x", name=nasty)
    run.set_params({nasty.replace(".", ""): 1, "ok": nasty})
    run.track(1.0, nasty)
    run.finish()
    quoted_name = nasty.replace("'", "''")
    page = repo.search_runs(f"name = '{quoted_name}' AND params.ok LIKE '%<script>%'")
    assert page.runs["run_id"].to_pylist() == ["x"]
    backquoted = nasty.replace("`", "``")
    page = repo.search_runs(f"params.`{backquoted}` = 1 AND metrics.`{backquoted}`.count = 1",
                            columns=[f"metrics.`{backquoted}`"])
    assert page.runs["run_id"].to_pylist() == ["x"]
    assert page.runs[f"metrics.{nasty}.last"].to_pylist() == [1.0]


def test_bad_queries_raise_invalid_argument(repo):
    make_runs(repo)
    for kwargs, words in [
        (dict(filter="params.lr <"), "filter: at 12"),
        (dict(filter="colour = 'red'"), "unknown 'colour'"),
        (dict(order_by=["name SIDEWAYS"]), "order_by[0]"),
        (dict(columns=["status"]), "columns[0]"),
        (dict(limit=0), "limit"),
        (dict(page_token="not hex"), "page_token"),
    ]:
        with pytest.raises(errors.InvalidArgument, match=words.replace("[", r"\[")):
            repo.search_runs(**kwargs)
    repo.close()
    with pytest.raises(errors.NotSupported):
        repo.search_runs()
