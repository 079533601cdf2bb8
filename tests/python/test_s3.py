"""libkv0 on S3, against a moto server this suite starts on loopback."""

import threading

import lance
import pyarrow as pa
import pytest

import kv0


def table(first: int, n: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(first, first + n), pa.uint64()),
            "v": pa.array([f"v{i}" for i in range(first, first + n)], pa.utf8()),
        }
    )


def read(stream) -> pa.Table:
    return pa.RecordBatchReader.from_stream(stream).read_all()


def test_create_append_scan_take(s3_bucket):
    bucket, options = s3_bucket
    uri = f"s3://{bucket}/db/data.lance"
    kv0.lance.write(uri, table(0, 10), storage_options=options)

    # Two writers append at once; Lance rebases the later commit, so both land.
    errors = []

    def append(first):
        try:
            kv0.lance.write(uri, table(first, 10), storage_options=options, mode="append")
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=append, args=(f,)) for f in (100, 200)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []

    ids = sorted(read(kv0.lance.scan(uri, storage_options=options))["id"].to_pylist())
    assert ids == list(range(10)) + list(range(100, 110)) + list(range(200, 210))

    with_addr = read(kv0.lance.scan(uri, with_row_address=True, storage_options=options))
    by_id = dict(zip(with_addr["id"].to_pylist(), with_addr["_rowaddr"].to_pylist()))
    taken = read(kv0.lance.take(uri, [by_id[205], by_id[3]], ["v"], storage_options=options))
    assert taken["v"].to_pylist() == ["v205", "v3"]

    # What kv0 stored on S3 is a plain Lance dataset.
    pylance = lance.dataset(uri, storage_options=options)
    assert pylance.count_rows() == 30


def test_storage_options_are_passed_through(s3_bucket):
    bucket, options = s3_bucket
    uri = f"s3://{bucket}/opts.lance"
    kv0.lance.write(uri, table(0, 1), storage_options=options)
    wrong_keys = dict(options, aws_access_key_id="nobody", aws_secret_access_key="wrong")
    # moto accepts any key, so a wrong endpoint is what must fail.
    wrong_endpoint = dict(options, aws_endpoint="http://127.0.0.1:1")
    with pytest.raises(kv0.errors.Error):
        read(kv0.lance.scan(uri, storage_options=wrong_endpoint))
    no_http = {k: v for k, v in options.items() if k != "allow_http"}
    with pytest.raises(kv0.errors.Error):
        read(kv0.lance.scan(uri, storage_options=no_http))
    assert read(kv0.lance.scan(uri, storage_options=wrong_keys)).num_rows == 1
