"""TLS and the shared token (runtime.security, runtime.call_guard): a cluster across
hosts serves TLS with a certificate its clients verify, and every gRPC call carries the
cluster's token. The certificate is self-signed, made here (openssl)."""

from __future__ import annotations

import shutil
import subprocess

import grpc
import numpy as np
import pytest

import core as tf
from runtime import errors, wire
from runtime.launcher import free_ports
from runtime.protos import master_pb2_grpc, tensor_pb2
from runtime.security import Security
from runtime.server import Server
from runtime.session import Session


@pytest.fixture(scope="module")
def pem(tmp_path_factory):
    """A self-signed certificate for localhost / 127.0.0.1 and its key (PEM bytes)."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command to make a test certificate (and no cryptography)")
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem")],
                   check=True, capture_output=True, timeout=60)
    return d / "cert.pem", d / "key.pem"


def _ping(target: str, security=None) -> None:
    channel = wire.create_channel(target[len("grpc://"):], security=security)
    try:
        master_pb2_grpc.MasterStub(channel).Ping(tensor_pb2.PingRequest(), timeout=5)
    finally:
        channel.close()


def _graph():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [3], name="x")
        with tf.device("/job:w/task:1"):
            y = x * 2.0
        with tf.device("/job:w/task:0"):
            z = y + 1.0
    return g, x, z


def _cluster(security, **kw):
    ports = free_ports(2)
    spec = {"w": [f"127.0.0.1:{p}" for p in ports]}
    return [Server(spec, "w", i, security=security, **kw) for i in range(2)]


def test_token_is_checked_on_every_call():
    security = Security(token="s3cret")
    servers = _cluster(security, local_sockets=False)  # every call between tasks by gRPC
    try:
        target = servers[0].target
        _ping(target, security)
        for wrong in (None, Security(token="guess")):
            with pytest.raises(grpc.RpcError) as info:
                _ping(target, wrong)
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        g, x, z = _graph()
        with Session(target, graph=g, security=security) as sess:  # across both tasks
            np.testing.assert_array_equal(sess.run(z, {x: np.ones(3, np.float32)}), [3.0] * 3)
        with pytest.raises(errors.LabRuntimeError, match="UNAUTHENTICATED"):
            Session(target, graph=g)
    finally:
        for s in servers:
            s.stop()


def test_tls_with_a_self_signed_certificate_and_token(pem):
    cert, key = pem
    security = Security.from_files(cert=cert, key=key, token_file=None)
    security = Security(token="t0ken", cert_chain=security.cert_chain,
                        private_key=security.private_key,
                        root_certificates=security.root_certificates)
    servers = _cluster(security, local_sockets=False)
    try:
        target = servers[0].target
        _ping(target, security)
        with pytest.raises(grpc.RpcError) as info:  # plaintext to a TLS server
            _ping(target, None)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        client_only = Security(root_certificates=security.root_certificates)  # no token
        with pytest.raises(grpc.RpcError) as info:
            _ping(target, client_only)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        g, x, z = _graph()
        with Session(target, graph=g, security=security) as sess:
            np.testing.assert_array_equal(sess.run(z, {x: np.ones(3, np.float32)}), [3.0] * 3)
    finally:
        for s in servers:
            s.stop()


def test_security_from_files_reads_a_token_and_pem(tmp_path, pem):
    cert, key = pem
    (tmp_path / "token").write_text("abc\n")
    s = Security.from_files(token_file=tmp_path / "token", cert=cert, key=key)
    assert s.token == "abc" and s.tls and s.root_certificates == cert.read_bytes()
    with pytest.raises(ValueError, match="token"):
        Security(token=" ")
