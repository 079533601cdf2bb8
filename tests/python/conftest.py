"""Shared fixtures: object-store servers started by the tests themselves, on
loopback only."""

import socket

import pytest

from kv0.tracking import Repo


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow: takes minutes (test_aim.py runs Aim in its own virtual environment)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def s3_server():
    """A moto S3 server on 127.0.0.1 (it supports conditional writes, which
    Lance's commits on S3 rely on). Yields the endpoint URL."""
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3_bucket(s3_server):
    """A fresh bucket on the moto server; yields (bucket, storage_options)."""
    import uuid

    import boto3

    name = "kv0-" + uuid.uuid4().hex[:12]
    client = boto3.client(
        "s3",
        endpoint_url=s3_server,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    client.create_bucket(Bucket=name)
    options = {
        "aws_endpoint": s3_server,
        "aws_region": "us-east-1",
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
        "allow_http": "true",
    }
    yield name, options


# --- Handles on a temporary directory ------------------------------------------


@pytest.fixture
def opts(tmp_path):
    """Options keeping the WAL in tmp_path; with the long flush interval,
    commits happen on flush, finish, close and reads."""
    return {"wal_dir": str(tmp_path / "wal"), "flush_interval": 3600.0}


@pytest.fixture
def path(tmp_path):
    """Where a test's tracking repository lives."""
    return str(tmp_path / "repo")


@pytest.fixture
def repo(path, opts):
    handle = Repo(path, **opts)
    yield handle
    handle.close()
