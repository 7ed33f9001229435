"""The Core API's HTTP session on the standard library: kept-alive connections that the master
closed while idle are replaced, an ``https://`` master's certificate is checked against the
bundle the environment names, and query strings, JSON bodies and error bodies travel as the
master expects."""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from det_hub.core._http import MasterError, MasterSession


class Master:
    """A stand-in master that answers every request with what it saw, and can drop its
    connections between requests (as a restarted or idle-timing-out server does)."""

    def __init__(self, tls: ssl.SSLContext | None = None, *, drop: bool = False) -> None:
        self.seen: list[dict[str, Any]] = []
        self.connections = 0
        master = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                master.connections += 1

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                master.seen.append({"method": self.command, "path": self.path,
                                    "auth": self.headers.get("Authorization"),
                                    "body": json.loads(body) if body else None})
                if self.path.startswith("/api/v1/missing"):
                    status, data = 404, json.dumps({"error": "trial 9 not found",
                                                    "details": ["x"]}).encode()
                else:
                    status, data = 200, json.dumps({"ok": len(master.seen)}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                if drop:  # closed after the answer, which did not say so: an idle timeout
                    self.close_connection = True

            do_GET = do_POST = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        scheme = "http"
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def master() -> Iterator[Master]:
    m = Master()
    yield m
    m.close()


def test_queries_bodies_and_the_token_travel_on_one_kept_connection(master: Master) -> None:
    session = MasterSession(master.url, "tok")
    assert session.get("/trials/3/preemption", params={"timeout_seconds": 0}) == {"ok": 1}
    assert session.post("trials/3/metrics", {"steps": [1, 2], "m": {"x": 0.5}}) == {"ok": 2}
    assert master.seen[0]["path"] == "/api/v1/trials/3/preemption?timeout_seconds=0"
    assert master.seen[1] == {"method": "POST", "path": "/api/v1/trials/3/metrics",
                              "auth": "Bearer tok", "body": {"steps": [1, 2], "m": {"x": 0.5}}}
    assert master.connections == 1
    session.close()


def test_an_error_body_becomes_a_master_error(master: Master) -> None:
    session = MasterSession(master.url, None)
    with pytest.raises(MasterError) as err:
        session.get("/missing")
    assert (err.value.status, err.value.error, err.value.details) == (404, "trial 9 not found",
                                                                      ["x"])
    assert master.seen[0]["auth"] is None


def test_a_connection_the_master_closed_while_idle_is_replaced() -> None:
    master = Master(drop=True)
    try:
        session = MasterSession(master.url, "tok")
        assert session.get("/a", retry=False) == {"ok": 1}
        threading.Event().wait(0.2)  # the master's close reaches the client's socket
        # Not retried: the closed connection is found before the request, not after it failed.
        assert session.post("/b", {"n": 1}, retry=False) == {"ok": 2}
        assert master.connections == 2
    finally:
        master.close()


def test_a_nan_is_refused_before_anything_is_sent(master: Master) -> None:
    with pytest.raises(ValueError):
        MasterSession(master.url, "tok").post("/x", {"loss": float("nan")})
    assert master.seen == []


def test_a_master_url_that_is_not_http_is_refused() -> None:
    with pytest.raises(ValueError, match="not an http:// or https:// URL"):
        MasterSession("ftp://host/", None)


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "det-hub test master")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "master.pem", tmp_path / "master.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def test_an_https_master_is_trusted_through_the_bundle_the_environment_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cert, key = _self_signed(tmp_path)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    master = Master(tls)
    try:
        for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
            monkeypatch.delenv(name, raising=False)
        with pytest.raises(MasterError) as err:
            MasterSession(master.url, "tok").get("/a", retry=False)
        assert err.value.status == 0 and "CERTIFICATE_VERIFY_FAILED" in err.value.error
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cert))
        assert MasterSession(master.url, "tok").get("/a", retry=False) == {"ok": 1}
    finally:
        master.close()
