"""Shared fixtures: object-store servers started by the tests themselves, on
loopback only.

Every server is started by the first test that needs it and stopped at the end
of the session: moto's S3 server (PyPI), Azurite (npm, installed by
scripts/setup.sh) and gcp-storage-emulator (PyPI) with the XML API that
gcs_emulator.py adds. The `store` fixture hands a test a fresh bucket on one of
them, with the storage options kv0 needs to reach it (the same options
docs/operations.md shows), so one test body runs on every backend.
"""

import base64
import dataclasses
import hashlib
import hmac
import http.client
import os
import shutil
import socket
import subprocess
import time
import uuid
from email.utils import formatdate
from pathlib import Path

import pytest

from kv0.tracking import Repo

ROOT = Path(__file__).resolve().parents[2]


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


# --- Azurite ------------------------------------------------------------------------

# The well-known development account every Azurite has.
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


def azurite_binary():
    local = ROOT / "node_modules" / ".bin" / "azurite-blob"
    if local.exists():
        return str(local)
    return shutil.which("azurite-blob")


def wait_for_port(server: subprocess.Popen, port: int, name: str, log_path: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        if server.poll() is not None:
            output = log_path.read_text(errors="replace")
            pytest.fail(f"{name} exited with {server.returncode}:\n{output}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                pytest.fail(f"{name} did not listen on port {port} within 60 s")
            time.sleep(0.1)


def stop_process(server: subprocess.Popen) -> None:
    server.terminate()
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


@pytest.fixture(scope="session")
def azurite(tmp_path_factory):
    """An Azurite blob server on 127.0.0.1; yields its URL (no account)."""
    binary = azurite_binary()
    if binary is None:
        reason = "azurite-blob not found: scripts/setup.sh installs it (npm install)"
        if os.environ.get("CI"):
            pytest.fail(reason)  # CI ran setup.sh: a missing server is a failure there
        pytest.skip(reason)
    location = tmp_path_factory.mktemp("azurite")
    port = free_port()
    log_path = location / "azurite.log"
    # --disableTelemetry: Azurite would otherwise report usage over the network.
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            [binary, "--blobHost", "127.0.0.1", "--blobPort", str(port),
             "--location", str(location), "--silent", "--skipApiVersionCheck", "--loose",
             "--disableTelemetry"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        )
    try:
        wait_for_port(server, port, "azurite-blob", log_path)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(server)


def create_container(endpoint: str, name: str) -> None:
    """PUT ?restype=container, signed with SharedKey: what an SDK sends."""
    date = formatdate(usegmt=True)
    version = "2021-08-06"
    path = f"/{AZURITE_ACCOUNT}/{name}"  # path-style: the account is the first segment
    string_to_sign = "\n".join(
        ["PUT"] + [""] * 11  # verb, then the standard headers, all empty
        + [f"x-ms-date:{date}", f"x-ms-version:{version}",
           f"/{AZURITE_ACCOUNT}{path}", "restype:container"])
    signature = base64.b64encode(hmac.new(
        base64.b64decode(AZURITE_KEY), string_to_sign.encode(), hashlib.sha256).digest())
    host, port = endpoint.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("PUT", path + "?restype=container", headers={
            "x-ms-date": date,
            "x-ms-version": version,
            "Authorization": f"SharedKey {AZURITE_ACCOUNT}:{signature.decode()}",
            "Content-Length": "0",
        })
        response = conn.getresponse()
        body = response.read()
    finally:
        conn.close()
    assert response.status == 201, (response.status, body)


def azure_options(endpoint: str) -> dict:
    return {
        "azure_storage_account_name": AZURITE_ACCOUNT,
        "azure_storage_account_key": AZURITE_KEY,
        "azure_storage_endpoint": f"{endpoint}/{AZURITE_ACCOUNT}",
        "allow_http": "true",
    }


@pytest.fixture
def container(azurite):
    """A fresh container; yields (name, storage_options)."""
    name = "kv0-" + uuid.uuid4().hex[:12]
    create_container(azurite, name)
    yield name, azure_options(azurite)


# --- GCS ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def gcs_server():
    """A GCS emulator on 127.0.0.1 (see gcs_emulator.py); yields it."""
    from gcs_emulator import GcsEmulator

    server = GcsEmulator()
    try:
        yield server
    finally:
        server.stop()


def gcs_options(endpoint: str) -> dict:
    # A static bearer token: no credential lookup, which outside GCE would
    # otherwise ask the metadata server.
    return {
        "google_base_url": endpoint,
        "google_storage_token": "testing",
        "allow_http": "true",
    }


@pytest.fixture
def gcs_bucket(gcs_server):
    """A fresh bucket on the GCS emulator; yields (bucket, storage_options)."""
    name = "kv0-" + uuid.uuid4().hex[:12]
    gcs_server.create_bucket(name)
    yield name, gcs_options(gcs_server.url)


# --- One fixture for every backend ------------------------------------------------


@dataclasses.dataclass
class Store:
    """A fresh bucket (S3, GCS) or container (Azure) on a server this suite runs."""

    kind: str  # "s3", "azure", "gcs"
    bucket: str
    endpoint: str  # the server's URL, http://127.0.0.1:PORT
    options: dict  # storage options that reach it

    def uri(self, path: str) -> str:
        scheme = {"s3": "s3", "azure": "az", "gcs": "gs"}[self.kind]
        return f"{scheme}://{self.bucket}/{path}"

    @property
    def port(self) -> int:
        return int(self.endpoint.rsplit(":", 1)[1])

    def options_via(self, url: str, **extra: str) -> dict:
        """The storage options with the server's URL replaced by `url` (a
        proxy in front of it), plus `extra`."""
        options = dict(self.options, **extra)
        if self.kind == "s3":
            options["aws_endpoint"] = url
        elif self.kind == "azure":
            options["azure_storage_endpoint"] = f"{url}/{AZURITE_ACCOUNT}"
        else:
            options["google_base_url"] = url
        return options


def make_store(kind: str, request) -> Store:
    if kind == "s3":
        server = request.getfixturevalue("s3_server")
        name, options = request.getfixturevalue("s3_bucket")
    elif kind == "azure":
        server = request.getfixturevalue("azurite")
        name, options = request.getfixturevalue("container")
    elif kind == "gcs":
        server = request.getfixturevalue("gcs_server").url
        name, options = request.getfixturevalue("gcs_bucket")
    else:
        raise ValueError(kind)
    return Store(kind, name, server, options)


@pytest.fixture(params=["s3", "azure", "gcs"])
def store(request):
    """A fresh bucket on each backend in turn."""
    return make_store(request.param, request)


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
