"""Datasets written by libkv0 read back identically in pylance, and the
other way round."""

import datetime

import lance
import pyarrow as pa
import pytest

import kv0

# Every column type kv0's schemas use, nullable and not.
SCHEMA = pa.schema(
    [
        pa.field("u8", pa.uint8(), nullable=False),
        pa.field("u32", pa.uint32()),
        pa.field("u64", pa.uint64(), nullable=False),
        pa.field("i64", pa.int64()),
        pa.field("f64", pa.float64()),
        pa.field("flag", pa.bool_()),
        pa.field("blob", pa.binary()),
        pa.field("text", pa.utf8()),
        pa.field("tags", pa.list_(pa.utf8())),
        pa.field("at", pa.timestamp("us", tz="UTC")),
    ]
)


def sample(n: int, start: int = 0) -> pa.Table:
    t0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    rows = range(start, start + n)
    return pa.table(
        {
            "u8": [i % 256 for i in rows],
            "u32": [None if i % 4 == 0 else i for i in rows],
            "u64": [2**63 + i for i in rows],
            "i64": [None if i % 3 == 0 else -i for i in rows],
            "f64": [i / 7 for i in rows],
            "flag": [None if i % 5 == 0 else i % 2 == 0 for i in rows],
            "blob": [bytes([i % 256]) * (i % 9) for i in rows],
            "text": [None if i % 6 == 0 else f"t{i}" for i in rows],
            "tags": [None if i % 7 == 0 else [f"a{i}", ""][: i % 3] for i in rows],
            "at": [t0 + datetime.timedelta(microseconds=i) for i in rows],
        },
        schema=SCHEMA,
    )


def test_written_by_kv0_read_by_pylance(tmp_path):
    uri = str(tmp_path / "kv0.lance")
    expected = sample(500)
    version, fragments = kv0.lance.write(uri, expected)
    assert version == 2 and len(fragments) == 1
    kv0.lance.write(uri, sample(10, 500), mode="append")

    table = lance.dataset(uri).to_table()
    assert table.schema == SCHEMA
    assert table.equals(pa.concat_tables([expected, sample(10, 500)]))


def test_written_by_pylance_scanned_by_kv0(tmp_path):
    uri = str(tmp_path / "py.lance")
    expected = sample(300)
    lance.write_dataset(expected, uri)
    table = pa.RecordBatchReader.from_stream(kv0.lance.scan(uri)).read_all()
    assert table.schema == SCHEMA
    assert table.equals(expected)

    filtered = pa.RecordBatchReader.from_stream(
        kv0.lance.scan(uri, columns=["u64", "text"], filter="u8 < 10")
    ).read_all()
    assert filtered.column_names == ["u64", "text"]
    assert filtered.num_rows == 20


def test_scan_is_read_by_duckdb_and_polars(tmp_path):
    duckdb = pytest.importorskip("duckdb")
    polars = pytest.importorskip("polars")
    uri = str(tmp_path / "d.lance")
    kv0.lance.write(uri, sample(100))
    stream = kv0.lance.scan(uri, columns=["u64", "f64"])
    reader = pa.RecordBatchReader.from_stream(stream)
    assert duckdb.sql("select count(*) from reader").fetchall()[0][0] == 100
    frame = polars.from_arrow(
        pa.RecordBatchReader.from_stream(kv0.lance.scan(uri, columns=["u8"])).read_all()
    )
    assert frame["u8"].sum() == sum(range(100))


def test_stream_is_consumed_once(tmp_path):
    uri = str(tmp_path / "once.lance")
    kv0.lance.write(uri, sample(5))
    stream = kv0.lance.scan(uri)
    pa.RecordBatchReader.from_stream(stream).read_all()
    with pytest.raises(RuntimeError):
        pa.RecordBatchReader.from_stream(stream)


def test_write_rejects_non_arrow_input(tmp_path):
    with pytest.raises(TypeError):
        kv0.lance.write(str(tmp_path / "x.lance"), [1, 2, 3])
