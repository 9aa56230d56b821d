"""The official `openai` SDK over https to the gateway terminating TLS itself (`server.tls`, issue 30), with a
certificate the test makes with `openssl` and signs by a CA of its own: plain and streamed completions to a
client that trusts that CA (given to httpx, and through `SSL_CERT_FILE`, as the README says), and no answer to
one that does not."""

import os
import ssl
import subprocess
import tempfile

import httpx
import openai
import pytest
from openai import OpenAI

from conftest import CONFIG, MASTER, _stop, serve


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, stdin=subprocess.DEVNULL)


def make_certificates(d):
    """A CA, and a certificate it signs for localhost and 127.0.0.1: (ca.pem, cert.pem, key.pem) in `d`."""
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
            "-subj", "/CN=svc test CA", "-keyout", "ca.key", "-out", "ca.pem", cwd=d)
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=localhost",
            "-keyout", "key.pem", "-out", "cert.csr", cwd=d)
    with open(os.path.join(d, "san.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
                "keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", "cert.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
            "-extfile", "san.ext", "-out", "cert.pem", cwd=d)
    return tuple(os.path.join(d, n) for n in ("ca.pem", "cert.pem", "key.pem"))


@pytest.fixture(scope="module")
def tls_gateway():
    d = tempfile.mkdtemp(prefix="svc-tls-")
    ca, cert, key = make_certificates(d)
    template = CONFIG.replace("  port: 0\n", f"  port: 0\n  tls:\n    cert_file: {cert}\n    key_file: {key}\n", 1)
    proc, url = serve(template, "svc-sdk-tls-")
    yield url, ca
    _stop(proc)


def test_the_openai_sdk_over_https_with_a_private_ca(tls_gateway):
    url, ca = tls_gateway
    assert url.startswith("https://127.0.0.1:")
    c = OpenAI(base_url=url + "/v1", api_key=MASTER, max_retries=0, timeout=20, http_client=httpx.Client(verify=ssl.create_default_context(cafile=ca)))
    r = c.chat.completions.create(model="openai/gpt-4.1-mini", messages=[{"role": "user", "content": "over tls"}])
    assert r.choices[0].message.content == "[mock gpt-4.1-mini] over tls"
    stream = c.chat.completions.create(model="openai/gpt-4.1-mini", stream=True,
                                       messages=[{"role": "user", "content": "streamed over tls"}])
    text = "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices)
    assert text == "[mock gpt-4.1-mini] streamed over tls"


def test_ssl_cert_file_is_enough(tls_gateway, monkeypatch):
    url, ca = tls_gateway
    monkeypatch.setenv("SSL_CERT_FILE", ca)
    c = OpenAI(base_url=url + "/v1", api_key=MASTER, max_retries=0, timeout=20)
    r = c.chat.completions.create(model="openai/gpt-4.1-mini", messages=[{"role": "user", "content": "env"}])
    assert r.choices[0].message.content == "[mock gpt-4.1-mini] env"


def test_a_client_that_does_not_trust_the_ca_gets_no_answer(tls_gateway, monkeypatch):
    url, _ = tls_gateway
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    c = OpenAI(base_url=url + "/v1", api_key=MASTER, max_retries=0, timeout=20)
    with pytest.raises(openai.APIConnectionError):
        c.chat.completions.create(model="openai/gpt-4.1-mini", messages=[{"role": "user", "content": "hi"}])
