"""`kv0 bench versions` on S3: starts moto's S3 server on loopback (the test
suite's, from the project's virtual environment), makes a bucket, and runs the
benchmark against it. Arguments after the script's are passed on to
`kv0 bench versions`.

    .venv/bin/python bench/versions_s3.py build/kv0 --versions 5000 --lance-versions 1000
"""

import socket
import subprocess
import sys
import uuid

import boto3
from moto.server import ThreadedMotoServer


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    cli, rest = sys.argv[1], sys.argv[2:]
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{port}"
        options = {
            "aws_endpoint": endpoint,
            "aws_region": "us-east-1",
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
            "allow_http": "true",
        }
        bucket = "kv0-bench-" + uuid.uuid4().hex[:8]
        boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name=options["aws_region"],
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        ).create_bucket(Bucket=bucket)
        command = [cli, "bench", "versions", "--uri", f"s3://{bucket}/versions"]
        for key, value in options.items():
            command += ["--storage-option", f"{key}={value}"]
        sys.exit(subprocess.call(command + rest))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
