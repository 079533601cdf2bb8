"""The kv0 command-line tool, run as a user would."""

import json
import math
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The build to test: build/ (scripts/setup.sh), or $KV0_BUILD_DIR.
BUILD = pathlib.Path(os.environ.get("KV0_BUILD_DIR", ROOT / "build"))
KV0 = BUILD / "kv0"
DEMO = BUILD / "kv0_demo"

pytestmark = pytest.mark.skipif(not KV0.exists(), reason="build/kv0 is built by scripts/setup.sh")


def kv0(*args, env_wal, check=True):
    result = subprocess.run([str(KV0), *map(str, args)], capture_output=True, text=True,
                            env={"KV0_WAL_DIR": str(env_wal), "PATH": "/usr/bin:/bin"})
    if check and result.returncode != 0:
        raise AssertionError(f"kv0 {args} failed: {result.stderr}")
    return result


def test_version():
    out = subprocess.run([str(KV0), "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("kv0 0.2.0") and "lance 14." in out.stdout


def test_key_value_commands(tmp_path):
    db, wal = tmp_path / "db", tmp_path / "wal"
    for key in ["a", "b", "c", "d"]:
        kv0("put", db, key, key.upper(), env_wal=wal)
    kv0("put", db, "0x00ff", "0xdeadbeef", env_wal=wal)
    assert kv0("get", db, "b", env_wal=wal).stdout == "B\n"
    assert kv0("get", db, "0x00ff", env_wal=wal).stdout == "0xdeadbeef\n"
    missing = kv0("get", db, "zz", env_wal=wal, check=False)
    assert missing.returncode == 1 and "not found" in missing.stderr

    kv0("delete", db, "a", env_wal=wal)
    scan = kv0("scan", db, env_wal=wal).stdout.splitlines()
    assert scan == ["0x00ff\t0xdeadbeef", "b\tB", "c\tC", "d\tD"]
    ranged = kv0("scan", db, "--start", "b", "--end", "d", env_wal=wal).stdout.splitlines()
    assert ranged == ["b\tB", "c\tC"]
    rev = kv0("scan", db, "--reverse", "--limit", "2", env_wal=wal).stdout.splitlines()
    assert rev == ["d\tD", "c\tC"]
    rev_end = kv0("scan", db, "--reverse", "--end", "d", "--start", "b", env_wal=wal)
    assert rev_end.stdout.splitlines() == ["c\tC", "b\tB"]

    kv0("delete-range", db, "b", "d", env_wal=wal)
    assert kv0("scan", db, env_wal=wal).stdout.splitlines() == ["0x00ff\t0xdeadbeef", "d\tD"]

    versions = kv0("versions", db, env_wal=wal).stdout.splitlines()
    assert len(versions) >= 8
    assert "compacted" in kv0("compact", db, env_wal=wal).stdout
    info = kv0("info", db, env_wal=wal).stdout
    assert "seq: uint64" in info and "value: binary?" in info and "fragments:" in info


def test_bad_input_is_reported(tmp_path):
    wal = tmp_path / "wal"
    bad_hex = kv0("put", tmp_path / "db", "0xzz", "v", env_wal=wal, check=False)
    assert bad_hex.returncode == 2 and "hex" in bad_hex.stderr
    usage = kv0("get", tmp_path / "db", env_wal=wal, check=False)
    assert usage.returncode == 2 and "usage" in usage.stderr
    missing = kv0("info", tmp_path / "nothing", env_wal=wal, check=False)
    assert missing.returncode == 1 and "NotFound" in missing.stderr


# --- Experiment tracking ------------------------------------------------------


def run_demo(directory):
    """Runs the demo into directory; returns (tracking repository, run id)."""
    if not DEMO.exists():
        pytest.skip("build/kv0_demo is built by scripts/setup.sh")
    out = subprocess.run([str(DEMO), str(directory)], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    logged = [line for line in out.stdout.splitlines() if line.startswith("logged run ")]
    assert len(logged) == 1, out.stdout
    return directory / "tracking", logged[0].split()[2]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return run_demo(tmp_path_factory.mktemp("demo"))


def kv0_json(*args, env_wal):
    return json.loads(kv0(*args, "--json", env_wal=env_wal).stdout)


def test_demo_shows_both_layers(tmp_path):
    run_demo(tmp_path)
    out = subprocess.run([str(DEMO), str(tmp_path)], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin"}, check=True).stdout
    for expected in ["mlp-baseline", "parameters:", '"momentum": 0.9', "training loss",
                     "fruit/cherry = 6 letters", "deleted fruit/banana; get -> (none)"]:
        assert expected in out
    assert "veg/carrot" not in out.split("scan [fruit/, fruit0):")[1]
    assert (tmp_path / "kv").is_dir() and (tmp_path / "wal").is_dir()
    # The second run started afresh: one run in the repository.
    assert len(kv0_json("runs", tmp_path / "tracking", env_wal=tmp_path / "cli-wal")) == 1


def test_runs_and_run(demo, tmp_path):
    repo, run_id = demo
    wal = tmp_path / "wal"
    runs = kv0_json("runs", repo, env_wal=wal)
    assert [r["run_id"] for r in runs] == [run_id]
    run = runs[0]
    assert run["name"] == "mlp-baseline" and run["experiment"] == "digits"
    assert run["status"] == "finished" and run["kind"] == "training"
    assert run["target"] == {"dataset": "digits", "model": "mlp"}
    assert run["ended_at_us"] >= run["created_at_us"] > 0

    table = kv0("runs", repo, env_wal=wal).stdout.splitlines()
    assert table[0].split()[:4] == ["run_id", "name", "experiment", "status"]
    assert table[1].split()[:4] == [run_id, "mlp-baseline", "digits", "finished"]

    assert kv0_json("run", repo, run_id, env_wal=wal) == run
    record = kv0("run", repo, run_id, env_wal=wal).stdout
    assert f"run_id       {run_id}" in record and "status       finished" in record


def test_runs_search(demo, tmp_path):
    repo, run_id = demo
    wal = tmp_path / "wal"
    found = kv0("runs", repo, "--where", "params.lr < 0.1 AND status = 'finished'",
                "--order-by", "metrics['loss', {'subset': 'train'}].min, created_at DESC",
                env_wal=wal).stdout.splitlines()
    assert found[0].split()[:4] == ["run_id", "name", "status", "created"]
    assert found[0].endswith('metrics.loss{"subset":"train"}.min')
    assert found[1].split()[:3] == [run_id, "mlp-baseline", "finished"]
    assert found[-1] == "1 of 1 matching runs"
    none = kv0("runs", repo, "--where", "params.lr > 0.1", env_wal=wal).stdout
    assert none.splitlines()[-1] == "0 of 0 matching runs"
    page = kv0_json("runs", repo, "--where", "kind = 'training'", "--limit", "5", env_wal=wal)
    assert page["matched"] == 1 and page["runs"][0]["run_id"] == run_id
    assert page["values"][0][page["columns"].index("params.lr")] == 0.01
    bad = kv0("runs", repo, "--where", "params.lr <", env_wal=wal, check=False)
    assert bad.returncode != 0 and "filter: at 12" in bad.stderr


def test_params(demo, tmp_path):
    repo, run_id = demo
    wal = tmp_path / "wal"
    assert kv0_json("params", repo, run_id, env_wal=wal) == {
        "lr": 0.01,
        "batch_size": 64,
        "optimizer": {"name": "sgd", "momentum": 0.9},
        "model": {"hidden": [128, 64], "dropout": 0.2},
    }
    lines = kv0("params", repo, run_id, env_wal=wal).stdout.splitlines()
    assert lines == ["batch_size = 64", "lr = 0.01", "model.dropout = 0.2",
                     "model.hidden = [128,64]", "optimizer.momentum = 0.9",
                     'optimizer.name = "sgd"']


def test_metrics(demo, tmp_path):
    repo, run_id = demo
    wal = tmp_path / "wal"
    series = kv0_json("metrics", repo, run_id, env_wal=wal)
    by_key = {(s["name"], s["context"]["subset"]): s for s in series}
    assert sorted(by_key) == [("accuracy", "train"), ("accuracy", "val"), ("loss", "train"),
                              ("loss", "val")]
    train_loss = by_key[("loss", "train")]
    assert train_loss["run_id"] == run_id
    assert train_loss["stats"]["count"] == 500 and train_loss["stats"]["last_step"] == 499
    assert train_loss["stats"]["min"] <= train_loss["stats"]["last"] <= train_loss["stats"]["max"]
    assert by_key[("loss", "val")]["stats"]["count"] == 10
    table = kv0("metrics", repo, run_id, env_wal=wal).stdout
    assert '{"subset":"train"}' in table and "0..499" in table

    points = kv0_json("metrics", repo, run_id, "loss", "--steps", "10:20", env_wal=wal)
    by_subset = {p["context"]["subset"]: p["points"] for p in points}
    assert by_subset["train"]["steps"] == list(range(10, 20))
    assert by_subset["train"]["epochs"] == [0] * 10
    assert by_subset["val"]["steps"] == []
    tail = kv0_json("metrics", repo, run_id, "accuracy", "--steps", "495:", env_wal=wal)
    assert {p["context"]["subset"]: p["points"]["steps"] for p in tail} == {
        "train": [495, 496, 497, 498, 499], "val": [499]}
    head = kv0_json("metrics", repo, run_id, "loss", "--steps", ":3", env_wal=wal)
    assert [p["points"]["steps"] for p in head if p["context"]["subset"] == "train"] == [[0, 1, 2]]
    text = kv0("metrics", repo, run_id, "loss", "--steps", "10:12", env_wal=wal).stdout
    assert 'loss {"subset":"train"}: 2 points' in text


def test_tracking_errors(demo, tmp_path):
    repo, run_id = demo
    wal = tmp_path / "wal"
    missing = kv0("run", repo, "no-such-run", env_wal=wal, check=False)
    assert missing.returncode == 1 and "run no-such-run not found" in missing.stderr
    for args in [("params", repo, "no-such-run"), ("metrics", repo, "no-such-run")]:
        result = kv0(*args, env_wal=wal, check=False)
        assert result.returncode == 1 and "not found" in result.stderr
    no_series = kv0("metrics", repo, run_id, "nope", env_wal=wal, check=False)
    assert no_series.returncode == 1 and "no series named nope" in no_series.stderr
    bad_steps = kv0("metrics", repo, run_id, "loss", "--steps", "a:b", env_wal=wal, check=False)
    assert bad_steps.returncode == 2 and "--steps" in bad_steps.stderr
    nothing = kv0("runs", tmp_path / "nothing", env_wal=wal, check=False)
    assert nothing.returncode == 1 and "no tracking repository" in nothing.stderr
    assert not (tmp_path / "nothing").exists()


def test_optimize(tmp_path):
    repo, run_id = run_demo(tmp_path / "demo")
    wal = tmp_path / "wal"
    before = kv0_json("metrics", repo, run_id, "loss", env_wal=wal)
    first = kv0_json("optimize", repo, env_wal=wal)
    assert first["points_rewritten"] >= 1020
    assert first["level_cells"] > 0 and first["level_bytes"] > first["level_cells"]
    second = kv0_json("optimize", repo, env_wal=wal)
    assert second["points_rewritten"] == 0 and not second["full_rewrite"]
    assert second["level_cells"] == 0
    assert second["run_rows_after"] == second["run_rows_before"]
    assert kv0_json("metrics", repo, run_id, "loss", env_wal=wal) == before
    assert "points rewritten: 0" in kv0("optimize", repo, env_wal=wal).stdout


def test_purge(tmp_path):
    repo, run_id = run_demo(tmp_path / "demo")
    wal = tmp_path / "wal"
    before = kv0_json("metrics", repo, run_id, "loss", env_wal=wal)
    purged = kv0_json("purge", repo, env_wal=wal)
    assert purged["versions_removed"] > 0 and purged["tags_deleted"] == []
    assert kv0_json("metrics", repo, run_id, "loss", env_wal=wal) == before
    # A key-value database: deleted values leave every file.
    db = tmp_path / "db"
    kv0("put", db, "k", "SECRET-cli-purge", env_wal=wal)
    kv0("put", db, "j", "kept", env_wal=wal)
    kv0("delete", db, "k", env_wal=wal)
    assert "versions removed:" in kv0("purge", db, "--force", env_wal=wal).stdout
    assert not [f for f in db.rglob("*") if f.is_file() and b"SECRET-cli-purge" in f.read_bytes()]
    assert kv0("get", db, "j", env_wal=wal).stdout == "kept\n"
    missing = kv0("purge", tmp_path / "nothing", env_wal=wal, check=False)
    assert missing.returncode == 1 and "NotFound" in missing.stderr


def test_storage_options_reach_the_repository(s3_bucket, tmp_path):
    tracking = pytest.importorskip("kv0.tracking")
    bucket, options = s3_bucket
    uri = f"s3://{bucket}/tracking"
    with tracking.Repo(uri, storage_options=options, wal_dir=tmp_path / "py-wal") as repo:
        run = repo.create_run(name="on-s3")
        for step in range(5):
            run.track(0.5 * step, "loss", step=step)
        run.finish()
    flags = [arg for k, v in options.items() for arg in ("--storage-option", f"{k}={v}")]
    wal = tmp_path / "wal"
    runs = kv0_json("runs", uri, *flags, env_wal=wal)
    assert [r["name"] for r in runs] == ["on-s3"]
    points = kv0_json("metrics", uri, runs[0]["run_id"], "loss", "--steps", "1:3", *flags,
                      env_wal=wal)
    assert [p["points"]["steps"] for p in points] == [[1, 2]]


def test_one_wal_sync_parser_for_every_entry_point(tmp_path):
    """kv0.Options, kv0.DB, kv0.tracking.Repo and the CLI check wal_sync with
    one parser: the same values pass, and a bad one fails with one message."""
    import kv0 as package
    from kv0 import errors
    from kv0.tracking import Repo

    messages = []
    with pytest.raises(errors.InvalidArgument) as bag:
        package.Options(wal_sync="sometimes")
    messages.append(str(bag.value))
    with pytest.raises(errors.InvalidArgument) as db:
        package.DB(str(tmp_path / "db"), wal_sync="sometimes", wal_dir=str(tmp_path / "wal"))
    messages.append(str(db.value))
    with pytest.raises(errors.InvalidArgument) as repo:
        Repo(str(tmp_path / "repo"), wal_sync="sometimes", wal_dir=str(tmp_path / "wal"))
    messages.append(str(repo.value))
    cli = kv0("--wal-sync", "sometimes", "put", tmp_path / "cli", "k", "v",
              env_wal=tmp_path / "wal", check=False)
    assert cli.returncode == 2
    messages.append(cli.stderr.strip().removeprefix("kv0: "))
    expected = 'wal_sync must be "none", "batch" or "always", not "sometimes"'
    assert all(expected in m for m in messages), messages

    for mode in ("none", "batch", "always"):
        kv0("--wal-sync", mode, "put", tmp_path / "cli", "k", mode, env_wal=tmp_path / "wal")
        assert kv0("get", tmp_path / "cli", "k", env_wal=tmp_path / "wal").stdout == mode + "\n"


def test_plot_draws_exact_lines_with_hostile_names_escaped(tmp_path):
    import xml.etree.ElementTree as ET

    from kv0.tracking import Repo

    nasty_run = "<script>alert('x')</script> & \"quoted\""
    nasty_metric = "loss<&>'\"]]>"
    with Repo(str(tmp_path / "repo"), wal_dir=str(tmp_path / "wal")) as repo:
        run = repo.create_run("r1", name=nasty_run)
        for step in range(200_000):
            run.track(1.0 if step == 123_457 else 0.0, nasty_metric, step=step)
        run.track(float("nan"), nasty_metric, step=200_000)
        other = repo.create_run("r2", name="plain")
        for step in range(50):
            other.track(-1.0, nasty_metric, step=step, context={"subset": "val"})
        repo.flush()
    out = tmp_path / "chart.svg"
    printed = kv0("plot", tmp_path / "repo", "r1", nasty_metric, "--runs", "r2", "--out", out,
                  env_wal=tmp_path / "cli-wal").stdout
    assert printed.startswith(f"wrote {out}: 2 series")

    svg = ET.parse(out).getroot()  # well-formed whatever the names held
    ns = "{http://www.w3.org/2000/svg}"
    assert svg.tag == f"{ns}svg"
    assert not list(svg.iter(f"{ns}script"))
    texts = [t.text for t in svg.iter(f"{ns}text")]
    assert texts[0] == nasty_metric  # the title
    assert f"{nasty_run} / {nasty_metric}" in texts
    assert f'plain / {nasty_metric} {{"subset":"val"}}' in texts
    lines = [p for p in svg.iter(f"{ns}polyline")]
    assert len(lines) == 2
    points = [tuple(map(float, xy.split(","))) for xy in lines[0].get("points").split()]
    # 800 buckets of at most 4 points each, and the one spike among 200,000
    # points is drawn: the highest point of the chart belongs to it.
    assert 800 <= len(points) <= 4 * 801
    top = min(y for _, y in points)
    assert sum(1 for _, y in points if y == top) == 1
    assert all(math.isfinite(x) and math.isfinite(y) for x, y in points)

    missing = kv0("plot", tmp_path / "repo", "r1", "nope", "--out", out,
                  env_wal=tmp_path / "cli-wal", check=False)
    assert missing.returncode != 0 and "no such metric" in missing.stderr
