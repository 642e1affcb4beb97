"""TLS: a certificate that does not verify is a configuration error, and the command line takes
the TLS options (``--tls-ca-cert``, ``--tls-cert``, ``--tls-key``).

A ``redis-server`` of this module listens on a TLS port with a certificate of a test authority
made here with ``openssl``, and asks clients for a certificate of the same authority (mutual
TLS); it is stopped by its process id.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sa_redis_ids import ConfigError, RedisIds
from sa_redis_ids.cli import main
from tests.support.servers import HOST, RedisServer, free_port
from tests.support.services import missing

EC_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def _pairs(options: dict[str, str]) -> list[str]:
    """``{"-out": "a.crt"}`` as the arguments ``-out a.crt``."""
    return [part for pair in options.items() for part in pair]


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def _signed(name: str, subject: str, directory: Path, extensions: str = "") -> None:
    """``name.key`` and ``name.crt`` signed by the test authority (``ca.crt``)."""
    request = _pairs({"-keyout": f"{name}.key", "-out": f"{name}.csr", "-subj": subject})
    _openssl("req", *EC_KEY, *request, cwd=directory)
    extra = []
    if extensions:
        (directory / f"{name}.ext").write_text(extensions)
        extra = ["-extfile", f"{name}.ext"]
    files = {"-in": f"{name}.csr", "-CA": "ca.crt", "-CAkey": "ca.key", "-out": f"{name}.crt"}
    _openssl("x509", "-req", *_pairs(files), "-CAcreateserial", "-days", "2", *extra, cwd=directory)


@dataclass
class TlsServer:
    server: RedisServer
    tls_port: int
    certs: Path

    @property
    def url(self) -> str:
        return f"rediss://localhost:{self.tls_port}/0"

    def file(self, name: str) -> str:
        return str(self.certs / name)

    def client_options(self) -> dict[str, str]:
        """What verifies the server and gives the client's certificate (redis-py's names)."""
        return {
            "ssl_ca_certs": self.file("ca.crt"),
            "ssl_certfile": self.file("client.crt"),
            "ssl_keyfile": self.file("client.key"),
        }


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    if shutil.which("openssl") is None:
        missing("openssl is not installed: the TLS tests make their certificates with it")
    certs = tmp_path_factory.mktemp("tls")
    subject = "/CN=sa-redis-ids test authority"
    authority = _pairs({"-keyout": "ca.key", "-out": "ca.crt", "-days": "2", "-subj": subject})
    _openssl("req", "-x509", *EC_KEY, *authority, cwd=certs)
    _signed("server", "/CN=localhost", certs, "subjectAltName=DNS:localhost\n")
    _signed("client", "/CN=sa-redis-ids test client", certs)
    tls_port = free_port()
    server = RedisServer(
        args=_pairs(
            {
                "--tls-port": str(tls_port),
                "--tls-cert-file": str(certs / "server.crt"),
                "--tls-key-file": str(certs / "server.key"),
                "--tls-ca-cert-file": str(certs / "ca.crt"),
                "--tls-auth-clients": "yes",
            }
        )
    )
    try:
        server.start()
    except RuntimeError as exc:  # a redis-server built without TLS refuses --tls-port
        server.stop()
        missing(f"redis-server does not start with TLS: {exc}")
    try:
        yield TlsServer(server, tls_port, certs)
    finally:
        server.stop()


def test_a_verified_tls_server_issues_ids(tls_server: TlsServer) -> None:
    ids = RedisIds.from_url(tls_server.url, **tls_server.client_options())
    try:
        values = ids.snowflake("tls").next_ids(100)
        assert len(set(values)) == 100
    finally:
        ids.close()


def test_a_certificate_that_does_not_verify_is_a_config_error_not_an_outage(
    tls_server: TlsServer,
) -> None:
    options = tls_server.client_options()
    del options["ssl_ca_certs"]  # the system's authorities do not know the test's
    ids = RedisIds.from_url(tls_server.url, **options)
    try:
        with pytest.raises(ConfigError) as raised:
            ids.sequence("tls").next_id()
        message = str(raised.value)
        assert "did not verify" in message and "ssl_ca_certs=" in message, message
        assert ids.nodes.nodes[0].down_until == 0.0
    finally:
        ids.close()


def test_a_host_name_the_certificate_does_not_name_is_a_config_error(
    tls_server: TlsServer,
) -> None:
    url = tls_server.url.replace("localhost", HOST)  # the certificate names localhost only
    ids = RedisIds.from_url(url, **tls_server.client_options())
    try:
        with pytest.raises(ConfigError, match="host name the certificate names"):
            ids.sequence("tls").next_id()
    finally:
        ids.close()


def test_the_command_line_takes_the_tls_options(
    tls_server: TlsServer, capsys: pytest.CaptureFixture[str]
) -> None:
    tls = _pairs(
        {
            "--tls-ca-cert": tls_server.file("ca.crt"),
            "--tls-cert": tls_server.file("client.crt"),
            "--tls-key": tls_server.file("client.key"),
        }
    )
    common = ["--redis-url", tls_server.url, "--prefix", "tlscli"]
    assert (
        main(["next", "tls_cli", "--strategy", "sequence", "-n", "3", "--new", *common, *tls]) == 0
    )
    assert main(["status", *common, *tls]) == 0
    assert "tls_cli" in capsys.readouterr().out

    assert main(["status", *common, *tls[2:]]) == 1  # without --tls-ca-cert
    err = capsys.readouterr().err
    assert "did not verify" in err and "--tls-ca-cert" in err and "did not answer" not in err, err
    assert main(["next", "tls_cli", "-n", "1", *common, *tls[2:]]) == 1
    assert "did not verify" in capsys.readouterr().err

    plain = ["--redis-url", tls_server.server.url, "--prefix", "tlscli"]
    assert main(["status", *plain, *tls]) == 2  # a redis:// URL would ignore them
    assert "need rediss:// URLs" in capsys.readouterr().err
    assert main(["status", *common, "--tls-key", tls_server.file("client.key")]) == 2
    assert "give both" in capsys.readouterr().err
