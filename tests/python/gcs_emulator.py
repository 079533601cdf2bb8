"""A GCS server on loopback for the tests: gcp-storage-emulator (PyPI), plus
the XML API that Lance's GCS client speaks.

Lance reaches GCS through the object_store crate, which reads, writes,
lists and deletes objects with GCS's XML API (path-style
`/<bucket>/<object>`, `x-goog-if-generation-match` for the conditional
writes Lance's commits rely on, S3-style multipart uploads and
`list-type=2` listings). gcp-storage-emulator implements the JSON API and
only plain XML downloads and uploads, and no PyPI emulator implements more
(fake-gcs-server, from the Go proxy, has no XML uploads either). So this
module serves those XML requests itself, on the emulator's own object
storage, and hands everything else (bucket creation, the JSON API) to the
emulator's router. One lock serializes every request, which makes each
conditional write atomic.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import re
import threading
import time
import uuid
from datetime import datetime, timezone
from email.utils import formatdate
from http import HTTPStatus
from http.server import ThreadingHTTPServer
from typing import Optional
from urllib.parse import parse_qs, unquote, urlsplit
from xml.etree import ElementTree
from xml.sax.saxutils import escape

from gcp_storage_emulator import server as emulator
from gcp_storage_emulator.exceptions import NotFound
from gcp_storage_emulator.storage import Storage

# Requests the emulator's own router serves: its JSON API and internals.
_JSON_API = ("/storage/v1/", "/upload/", "/download/", "/batch/")


def _iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class _Handler(emulator.RequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real clients expect
    lock = threading.RLock()  # replaced per server by GcsEmulator

    # --- dispatch ------------------------------------------------------------------

    def _dispatch(self, method: str) -> None:
        with self.lock:
            path = urlsplit(self.path).path
            if path.startswith(_JSON_API) or path in ("/", "/wipe"):
                emulator.Router(self).handle(method)
                return
            try:
                self._xml(method)
            except NotFound:
                self._error(HTTPStatus.NOT_FOUND, "NoSuchKey")

    def do_GET(self):
        self._dispatch("GET")

    def do_HEAD(self):
        self._dispatch("HEAD")

    def do_PUT(self):
        self._dispatch("PUT")

    def do_POST(self):
        self._dispatch("POST")

    def do_DELETE(self):
        self._dispatch("DELETE")

    def do_PATCH(self):
        self._dispatch("PATCH")

    def log_message(self, format, *args):  # quiet
        pass

    # --- helpers ----------------------------------------------------------------------

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _send(self, status: int, body: bytes = b"", headers: Optional[dict] = None,
              head: bool = False) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if "Content-Length" not in (headers or {}):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _xml_reply(self, status: int, root: str, fields: dict,
                   headers: Optional[dict] = None) -> None:
        inner = "".join(f"<{k}>{escape(str(v))}</{k}>" for k, v in fields.items())
        body = f"<?xml version='1.0' encoding='UTF-8'?><{root}>{inner}</{root}>".encode()
        self._send(status, body, dict({"Content-Type": "application/xml"}, **(headers or {})))

    def _error(self, status: HTTPStatus, code: str) -> None:
        head = self.command == "HEAD"
        body = (f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code>"
                f"<Message>{status.phrase}</Message></Error>").encode()
        self._send(status.value, body, {"Content-Type": "application/xml"}, head=head)

    @property
    def _emulator(self) -> "GcsEmulator":
        return self.server.gcs_emulator  # type: ignore[attr-defined]

    def _object_headers(self, obj: dict) -> dict:
        return {
            "ETag": f'"{obj["generation"]}"',
            "Last-Modified": formatdate(int(obj["generation"]) / 1e9, usegmt=True),
            "x-goog-generation": obj["generation"],
            "x-goog-metageneration": obj["metageneration"],
        }

    def _precondition_holds(self, bucket: str, name: str) -> bool:
        wanted = self.headers.get("x-goog-if-generation-match")
        if wanted is None:
            return True
        try:
            current = self.storage.get_file_obj(bucket, name)["generation"]
        except NotFound:
            current = "0"
        return wanted.strip() == current

    def _store(self, bucket: str, name: str, content: bytes, content_type: str) -> dict:
        generation = str(self._emulator.next_generation())
        now = _iso(int(generation))
        obj = {
            "kind": "storage#object",
            "id": f"{bucket}/{name}/{generation}",
            "name": name,
            "bucket": bucket,
            "generation": generation,
            "metageneration": "1",
            "contentType": content_type,
            "timeCreated": now,
            "updated": now,
            "storageClass": "STANDARD",
            "size": str(len(content)),
            "md5Hash": hashlib.md5(content).hexdigest(),
        }
        self.storage.create_file(bucket, name, content, obj)
        return obj

    # --- the XML API ---------------------------------------------------------------------

    def _xml(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        bucket_part, _, object_part = url.path.lstrip("/").partition("/")
        bucket, name = unquote(bucket_part), unquote(object_part)
        if bucket not in self.storage.buckets:
            self._body()
            self._error(HTTPStatus.NOT_FOUND, "NoSuchBucket")
            return
        if not name:
            if method == "GET":
                self._list(bucket, query)
            else:
                self._error(HTTPStatus.NOT_IMPLEMENTED, "NotImplemented")
            return
        if method in ("GET", "HEAD"):
            self._get(bucket, name, query, head=method == "HEAD")
        elif method == "PUT" and "uploadId" in query:
            self._put_part(query)
        elif method == "PUT" and self.headers.get("x-goog-copy-source"):
            self._copy(bucket, name)
        elif method == "PUT":
            self._put(bucket, name)
        elif method == "POST" and "uploads" in query:
            self._body()
            upload_id = uuid.uuid4().hex
            self._emulator.uploads[upload_id] = {"bucket": bucket, "name": name, "parts": {},
                                                 "type": self.headers.get("Content-Type")}
            self._xml_reply(200, "InitiateMultipartUploadResult",
                            {"Bucket": bucket, "Key": name, "UploadId": upload_id})
        elif method == "POST" and "uploadId" in query:
            self._complete(bucket, name, query["uploadId"])
        elif method == "DELETE" and "uploadId" in query:
            self._body()
            self._emulator.uploads.pop(query["uploadId"], None)
            self._send(204)
        elif method == "DELETE":
            self._body()
            self.storage.get_file_obj(bucket, name)  # NotFound: 404
            self.storage.delete_file(bucket, name)
            self._send(204)
        else:
            self._body()
            self._error(HTTPStatus.NOT_IMPLEMENTED, "NotImplemented")

    def _get(self, bucket: str, name: str, query: dict, head: bool) -> None:
        obj = self.storage.get_file_obj(bucket, name)
        if query.get("generation") and query["generation"] != obj["generation"]:
            raise NotFound
        headers = self._object_headers(obj)
        etag = headers["ETag"]
        if_match, if_none = self.headers.get("If-Match"), self.headers.get("If-None-Match")
        if if_match is not None and if_match not in ("*", etag):
            self._error(HTTPStatus.PRECONDITION_FAILED, "PreconditionFailed")
            return
        if if_none is not None and if_none in ("*", etag):
            self._send(304, headers=headers)
            return
        content = self.storage.get_file(bucket, name)
        headers.update({"Content-Type": obj.get("contentType") or "application/octet-stream",
                        "Accept-Ranges": "bytes"})
        status = 200
        wanted = self.headers.get("Range")
        if wanted:
            match = re.fullmatch(r"bytes=(\d*)-(\d*)", wanted.strip())
            if not match or match.groups() == ("", ""):
                self._error(HTTPStatus.BAD_REQUEST, "InvalidArgument")
                return
            first, last = match.groups()
            size = len(content)
            if first == "":  # the last N bytes
                start, end = max(0, size - int(last)), size - 1
            else:
                start = int(first)
                end = min(size - 1, int(last)) if last else size - 1
            if start >= size or start > end:
                self._send(416, headers={"Content-Range": f"bytes */{size}"})
                return
            content = content[start:end + 1]
            headers["Content-Range"] = f"bytes {start}-{end}/{size}"
            status = 206
        headers["Content-Length"] = str(len(content))
        self._send(status, content, headers, head=head)

    def _put(self, bucket: str, name: str) -> None:
        content = self._body()
        if not self._precondition_holds(bucket, name):
            self._error(HTTPStatus.PRECONDITION_FAILED, "PreconditionFailed")
            return
        obj = self._store(bucket, name, content,
                          self.headers.get("Content-Type") or "application/octet-stream")
        self._send(200, headers=self._object_headers(obj))

    def _copy(self, bucket: str, name: str) -> None:
        self._body()
        source = unquote(self.headers["x-goog-copy-source"].lstrip("/"))
        source_bucket, _, source_name = source.partition("/")
        source_obj = self.storage.get_file_obj(source_bucket, source_name)
        content = self.storage.get_file(source_bucket, source_name)
        if not self._precondition_holds(bucket, name):
            self._error(HTTPStatus.PRECONDITION_FAILED, "PreconditionFailed")
            return
        obj = self._store(bucket, name, content, source_obj.get("contentType") or "")
        headers = self._object_headers(obj)
        self._xml_reply(200, "CopyObjectResult",
                        {"LastModified": obj["updated"], "ETag": headers["ETag"]}, headers)

    def _put_part(self, query: dict) -> None:
        content = self._body()
        upload = self._emulator.uploads.get(query["uploadId"])
        if upload is None:
            self._error(HTTPStatus.NOT_FOUND, "NoSuchUpload")
            return
        etag = f'"{hashlib.md5(content).hexdigest()}"'
        upload["parts"][int(query["partNumber"])] = (etag, content)
        self._send(200, headers={"ETag": etag})

    def _complete(self, bucket: str, name: str, upload_id: str) -> None:
        body = self._body()
        upload = self._emulator.uploads.get(upload_id)
        if upload is None:
            self._error(HTTPStatus.NOT_FOUND, "NoSuchUpload")
            return
        numbers = [int(part.findtext("PartNumber"))
                   for part in ElementTree.fromstring(body).iter("Part")]
        if any(n not in upload["parts"] for n in numbers):
            self._error(HTTPStatus.BAD_REQUEST, "InvalidPart")
            return
        content = b"".join(upload["parts"][n][1] for n in sorted(numbers))
        if not self._precondition_holds(bucket, name):
            self._error(HTTPStatus.PRECONDITION_FAILED, "PreconditionFailed")
            return
        del self._emulator.uploads[upload_id]
        obj = self._store(bucket, name, content, upload["type"] or "application/octet-stream")
        headers = self._object_headers(obj)
        self._xml_reply(200, "CompleteMultipartUploadResult",
                        {"Bucket": bucket, "Key": name, "ETag": headers["ETag"]}, headers)

    def _list(self, bucket: str, query: dict) -> None:
        prefix, delimiter = query.get("prefix") or None, query.get("delimiter") or None
        objs, prefixes = self.storage.get_file_list(bucket, prefix=prefix, delimiter=delimiter)
        entries = sorted([(o["name"], o) for o in objs] + [(p, None) for p in prefixes],
                         key=lambda e: e[0])
        after = query.get("continuation-token") or query.get("start-after")
        if after:
            entries = [e for e in entries if e[0] > after]
        limit = int(query.get("max-keys") or 1000)
        page, more = entries[:limit], len(entries) > limit
        parts = [f"<Name>{escape(bucket)}</Name><Prefix>{escape(prefix or '')}</Prefix>",
                 f"<KeyCount>{len(page)}</KeyCount><MaxKeys>{limit}</MaxKeys>",
                 f"<IsTruncated>{'true' if more else 'false'}</IsTruncated>"]
        if more:
            parts.append(f"<NextContinuationToken>{escape(page[-1][0])}"
                         "</NextContinuationToken>")
        for key, obj in page:
            if obj is None:
                parts.append(f"<CommonPrefixes><Prefix>{escape(key)}</Prefix></CommonPrefixes>")
            else:
                parts.append(
                    f"<Contents><Key>{escape(key)}</Key><Size>{obj['size']}</Size>"
                    f"<LastModified>{obj['updated']}</LastModified>"
                    f"<ETag>&quot;{obj['generation']}&quot;</ETag></Contents>")
        body = ("<?xml version='1.0' encoding='UTF-8'?><ListBucketResult>"
                + "".join(parts) + "</ListBucketResult>").encode()
        self._send(200, body, {"Content-Type": "application/xml"})


class GcsEmulator:
    """An in-memory GCS on 127.0.0.1: `url` for google_base_url, `stop()`."""

    def __init__(self) -> None:
        self.storage = Storage(use_memory_fs=True)
        self.uploads: dict[str, dict] = {}
        self._generation = 0
        lock = threading.RLock()
        storage = self.storage

        class Handler(_Handler):
            def __init__(self, *args, **kwargs):
                super().__init__(storage, *args, **kwargs)

        Handler.lock = lock
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._httpd.gcs_emulator = self  # type: ignore[attr-defined]
        self.port = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True,
                                        name="gcs-emulator")
        self._thread.start()

    def next_generation(self) -> int:
        # Generations only grow, also within one clock tick.
        self._generation = max(time.time_ns(), self._generation + 1)
        return self._generation

    def create_bucket(self, name: str) -> None:
        """Through the emulator's JSON API, as an SDK would."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("POST", "/storage/v1/b", body=json.dumps({"name": name}),
                         headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            body = response.read()
        finally:
            conn.close()
        assert response.status == 200, (response.status, body)

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)
