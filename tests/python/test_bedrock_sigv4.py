"""The gateway's AWS Signature Version 4 of its Bedrock calls, recomputed by an implementation independent of both
the gateway's signer (the `aws-sigv4` crate) and the Rust fake's checker (crates/svc-testkit/src/clouds/sigv4.rs):
botocore's own `SigV4Auth`, as boto3 signs every AWS call.

A fake Bedrock runtime runs here on 127.0.0.1 (a thread with `http.server`). For each request it rebuilds an
`AWSRequest` from what arrived: the method, `http://127.0.0.1:PORT` + the raw path as received (`%3A` and all), the
body's bytes and the headers the gateway named in `SignedHeaders` with their received values; it signs that with
`SigV4Auth(credentials, "bedrock", region)` at the request's own `x-amz-date` (botocore reads the clock through
`botocore.auth.get_current_datetime`, which is patched for the call) with the credentials it knows for the access
key id, and compares the `Authorization` header botocore writes (credential scope, signed headers, signature) with
the gateway's. Equal: a Converse answer ("signed ok"), or ConverseStream's binary event-stream frames; else 403
`InvalidSignatureException`, as AWS answers.

Through the real `svc serve`: long-term and temporary (session token) credentials, model ids with nothing to
escape, with `:`, and an inference-profile ARN (`:` and `/`), plain and streamed; and a deployment whose secret is
not the one the fake knows is refused (502 `upstream_credentials_refused`), which proves the check can fail."""

import datetime
import http.server
import json
import struct
import threading
import time
import urllib.parse
import zlib
from unittest import mock

import botocore.auth
import httpx
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.eventstream import EventStreamBuffer
from openai import OpenAI

from conftest import _stop, new_key, serve

REGION = "us-west-2"
SERVICE = "bedrock"
# Long-term credentials, temporary ones (with a session token) and a third key whose deployment is given a secret
# that is not this one.
LONG_TERM = Credentials("AKIAPYTHONFAKE000001", "python/Fake+Secret/for/botocore/0000001")
TEMPORARY = Credentials("ASIAPYTHONFAKE000002", "python/Temp+Secret/for/botocore/000002",
                        "IQoJb3JpZ2luX2VjEFakeSessionToken//with+slashes/and=padding==")
WRONG = Credentials("AKIAPYTHONFAKE000003", "python/Real+Secret/for/botocore/0000003")
NOT_THE_SECRET = "python/Other+Secret/not/what/aws/knows/03"

ANSWER = {"output": {"message": {"role": "assistant", "content": [{"text": "signed ok"}]}}, "stopReason": "end_turn",
          "usage": {"inputTokens": 3, "outputTokens": 2, "totalTokens": 5}}
MISMATCH = ("The request signature we calculated does not match the signature you provided. Check your AWS Secret "
            "Access Key and signing method. Consult the service documentation for details.")

LLAMA = "meta.llama3-3-70b-instruct-v1:0"
TITAN = "amazon.titan-text-express-v1"
PROFILE = f"arn:aws:bedrock:{REGION}:123456789012:inference-profile/us.{LLAMA}"

CONFIG = """
server:
  host: 127.0.0.1
  port: 0
  database_url: sqlite://{db}
model_list:
  - model_name: llama
    params:
      model: 'bedrock/{llama}'
      aws_bedrock_runtime_endpoint: '{base}'
      aws_access_key_id: {long_id}
      aws_secret_access_key: '{long_secret}'
      aws_region_name: {region}
  - model_name: llama-temporary
    params:
      model: 'bedrock/{llama}'
      aws_bedrock_runtime_endpoint: '{base}'
      aws_access_key_id: {temp_id}
      aws_secret_access_key: '{temp_secret}'
      aws_session_token: '{temp_token}'
      aws_region_name: {region}
  - model_name: titan
    params:
      model: 'bedrock/{titan}'
      aws_bedrock_runtime_endpoint: '{base}'
      aws_access_key_id: {long_id}
      aws_secret_access_key: '{long_secret}'
      aws_region_name: {region}
  - model_name: profile
    params:
      model: 'bedrock/{profile}'
      aws_bedrock_runtime_endpoint: '{base}'
      aws_access_key_id: {temp_id}
      aws_secret_access_key: '{temp_secret}'
      aws_session_token: '{temp_token}'
      aws_region_name: {region}
  - model_name: wrong-secret
    params:
      model: 'bedrock/{llama}'
      aws_bedrock_runtime_endpoint: '{base}'
      aws_access_key_id: {wrong_id}
      aws_secret_access_key: '{not_the_secret}'
      aws_region_name: {region}
gateway_settings:
  health_check_interval_seconds: 0
  num_retries: 0
  teams:
    - team_id: bedrock
      models: [llama, llama-temporary, titan, profile, wrong-secret]
"""


def frame(event_type, payload):
    """One frame of AWS's event-stream encoding: the prelude (total and headers' lengths, its CRC32), the string
    headers, the payload, the message's CRC32."""
    headers = b""
    for name, value in ((":event-type", event_type), (":content-type", "application/json"), (":message-type", "event")):
        headers += bytes([len(name)]) + name.encode() + b"\x07" + struct.pack(">H", len(value)) + value.encode()
    body = json.dumps(payload).encode()
    prelude = struct.pack(">II", 12 + len(headers) + len(body) + 4, len(headers))
    message = prelude + struct.pack(">I", zlib.crc32(prelude)) + headers + body
    return message + struct.pack(">I", zlib.crc32(message))


STREAM = [
    ("messageStart", {"role": "assistant"}),
    ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "signed "}}),
    ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "ok"}}),
    ("contentBlockStop", {"contentBlockIndex": 0}),
    ("messageStop", {"stopReason": "end_turn"}),
    ("metadata", {"usage": ANSWER["usage"], "metrics": {"latencyMs": 7}}),
]
STREAM_BYTES = b"".join(frame(kind, payload) for kind, payload in STREAM)

# botocore reads the clock through `botocore.auth.get_current_datetime`; it is patched while one request is
# signed, so one signing at a time.
SIGNING = threading.Lock()


def botocore_authorization(credentials, method, url, headers, body, amz_date):
    """The `Authorization` header botocore's SigV4Auth writes for this request at `amz_date` (`20261128T091500Z`)."""
    request = AWSRequest(method=method, url=url, data=body, headers=dict(headers))
    when = datetime.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ")
    with SIGNING, mock.patch.object(botocore.auth, "get_current_datetime", lambda *a, **k: when):
        SigV4Auth(credentials, SERVICE, REGION).add_auth(request)
    assert request.context["timestamp"] == amz_date
    return request.headers["Authorization"]


def auth_parts(authorization):
    """`{"Credential": …, "SignedHeaders": …, "Signature": …}` of an `AWS4-HMAC-SHA256 …` header."""
    scheme, _, rest = authorization.partition(" ")
    assert scheme == "AWS4-HMAC-SHA256", authorization
    return dict(p.strip().split("=", 1) for p in rest.split(","))


class FakeBedrock(http.server.ThreadingHTTPServer):
    """A Bedrock runtime that checks every request's signature with botocore. `checks` records, for each request:
    the raw path, the decoded model id and action, the access key id, the signed headers as received, the body,
    the gateway's and botocore's `Authorization`, and whether they matched."""

    daemon_threads = True

    def __init__(self, accounts):
        self.accounts = {c.access_key: c for c in accounts}
        self.checks = []
        self.lock = threading.Lock()
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                body = self.read_body()
                code, headers, answer = fake.handle(self, body)
                self.send_response(code)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def read_body(self):
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    out = b""
                    while True:
                        size = int(self.rfile.readline().split(b";")[0], 16)
                        chunk = self.rfile.read(size + 2)[:size]
                        if size == 0:
                            return out
                        out += chunk
                return self.rfile.read(int(self.headers.get("Content-Length", "0")))

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server_address[1]}"

    @staticmethod
    def error(status, kind, message):
        return status, [("Content-Type", "application/json"), ("x-amzn-ErrorType", kind)], \
            json.dumps({"message": message}).encode()

    def handle(self, handler, body):
        received = handler.headers
        authorization = received.get("Authorization", "")
        if not authorization.startswith("AWS4-HMAC-SHA256 "):
            return self.error(403, "MissingAuthenticationTokenException", "Missing Authentication Token")
        parts = auth_parts(authorization)
        key_id = parts.get("Credential", "").split("/")[0]
        signed = parts.get("SignedHeaders", "").split(";")
        credentials = self.accounts.get(key_id)
        amz_date = received.get("X-Amz-Date", "")
        url = self.base_url + handler.path
        # Each signed header with its received value (several values joined by commas, as SigV4 canonicalises).
        headers = {name: ",".join(received.get_all(name) or []) for name in signed}
        theirs = botocore_authorization(credentials, handler.command, url, headers, body, amz_date) \
            if credentials else None
        path = urllib.parse.urlsplit(handler.path).path
        model, _, action = path.removeprefix("/model/").rpartition("/")
        check = {"path": handler.path, "model": urllib.parse.unquote(model), "action": action, "key_id": key_id,
                 "signed": headers, "body": body, "amz_date": amz_date, "gateway": authorization,
                 "botocore": theirs, "matched": theirs == authorization}
        with self.lock:
            self.checks.append(check)
        if credentials is None:
            message = "The security token included in the request is invalid."
            return self.error(403, "UnrecognizedClientException", message)
        skew = abs(datetime.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.timezone.utc)
                   - datetime.datetime.now(datetime.timezone.utc))
        if skew > datetime.timedelta(minutes=5):
            return self.error(403, "InvalidSignatureException", f"Signature expired: {amz_date} is not now")
        if not check["matched"]:
            return self.error(403, "InvalidSignatureException", MISMATCH)
        if action == "converse":
            return 200, [("Content-Type", "application/json")], json.dumps(ANSWER).encode()
        if action == "converse-stream":
            return 200, [("Content-Type", "application/vnd.amazon.eventstream")], STREAM_BYTES
        return self.error(400, "ValidationException", f"unknown operation {action}")

    def since(self, n):
        with self.lock:
            return self.checks[n:]

    def count(self):
        with self.lock:
            return len(self.checks)


@pytest.fixture(scope="module")
def bedrock():
    """The fake Bedrock runtime and a gateway whose Bedrock deployments reach it: {"fake", "url", "key"}."""
    fake = FakeBedrock([LONG_TERM, TEMPORARY, WRONG])
    thread = threading.Thread(target=fake.serve_forever, daemon=True)
    thread.start()
    proc, url = serve(
        CONFIG, "svc-bedrock-sigv4-", base=fake.base_url, region=REGION, llama=LLAMA, titan=TITAN, profile=PROFILE,
        long_id=LONG_TERM.access_key, long_secret=LONG_TERM.secret_key, temp_id=TEMPORARY.access_key,
        temp_secret=TEMPORARY.secret_key, temp_token=TEMPORARY.token, wrong_id=WRONG.access_key,
        not_the_secret=NOT_THE_SECRET,
    )
    try:
        yield {"fake": fake, "url": url, "key": new_key(url, {"team_id": "bedrock", "key_alias": "sigv4"})}
    finally:
        _stop(proc)
        fake.shutdown()
        fake.server_close()
        thread.join(timeout=10)


def client(bedrock):
    return OpenAI(base_url=bedrock["url"] + "/v1", api_key=bedrock["key"], max_retries=0, timeout=20)


def one_check(bedrock, before):
    checks = bedrock["fake"].since(before)
    assert len(checks) == 1, f"one upstream call, no retry: {checks}"
    return checks[0]


def assert_signed_by_botocore(check, credentials):
    """The gateway's `Authorization` is, character for character, the one botocore writes."""
    assert check["matched"], f"gateway:  {check['gateway']}\nbotocore: {check['botocore']}\n{check['signed']}"
    parts = auth_parts(check["gateway"])
    day = check["amz_date"][:8]
    assert parts["Credential"] == f"{credentials.access_key}/{day}/{REGION}/{SERVICE}/aws4_request", parts
    signed = parts["SignedHeaders"].split(";")
    assert signed == sorted(signed) and {"host", "x-amz-date", "content-type"} <= set(signed), signed
    assert ("x-amz-security-token" in signed) == (credentials.token is not None), signed
    if credentials.token:
        assert check["signed"]["x-amz-security-token"] == credentials.token
    assert len(parts["Signature"]) == 64


MODELS = {
    "llama": (LLAMA, LONG_TERM, "/model/meta.llama3-3-70b-instruct-v1%3A0/converse"),
    "llama-temporary": (LLAMA, TEMPORARY, "/model/meta.llama3-3-70b-instruct-v1%3A0/converse"),
    "titan": (TITAN, LONG_TERM, "/model/amazon.titan-text-express-v1/converse"),
    "profile": (PROFILE, TEMPORARY, "/model/arn%3Aaws%3Abedrock%3Aus-west-2%3A123456789012%3Ainference-profile%2Fus."
                                    "meta.llama3-3-70b-instruct-v1%3A0/converse"),
}


@pytest.mark.parametrize("alias", list(MODELS))
def test_a_chat_completion_is_signed_as_botocore_signs(bedrock, alias):
    model, credentials, path = MODELS[alias]
    before = bedrock["fake"].count()
    r = client(bedrock).chat.completions.create(model=alias, messages=[{"role": "user", "content": "sign this"}])
    assert r.choices[0].message.content == "signed ok"
    assert r.usage.prompt_tokens == 3 and r.usage.completion_tokens == 2
    check = one_check(bedrock, before)
    assert (check["path"], check["model"], check["action"]) == (path, model, "converse")
    assert b"sign this" in check["body"]
    assert_signed_by_botocore(check, credentials)


@pytest.mark.parametrize("alias", ["llama", "profile"])
def test_a_stream_is_signed_as_botocore_signs(bedrock, alias):
    model, credentials, path = MODELS[alias]
    # The frames the fake sends decode with botocore's own event-stream parser.
    parser = EventStreamBuffer()
    parser.add_data(STREAM_BYTES)
    assert [m.headers[":event-type"] for m in parser] == [kind for kind, _ in STREAM]

    before = bedrock["fake"].count()
    stream = client(bedrock).chat.completions.create(
        model=alias, messages=[{"role": "user", "content": "stream this"}], stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "signed ok"
    check = one_check(bedrock, before)
    assert (check["path"], check["model"]) == (path.replace("/converse", "/converse-stream"), model)
    assert_signed_by_botocore(check, credentials)


def test_a_secret_aws_does_not_know_is_refused(bedrock):
    before = bedrock["fake"].count()
    r = httpx.post(bedrock["url"] + "/v1/chat/completions", headers={"Authorization": f"Bearer {bedrock['key']}"},
                   json={"model": "wrong-secret", "messages": [{"role": "user", "content": "hi"}]}, timeout=20)
    assert r.status_code == 502, r.text
    assert r.json()["error"]["code"] == "upstream_credentials_refused", r.text
    check = one_check(bedrock, before)
    assert not check["matched"] and check["key_id"] == WRONG.access_key, check
    gateway, botocore_ = auth_parts(check["gateway"]), auth_parts(check["botocore"])
    assert gateway["Credential"] == botocore_["Credential"] and gateway["SignedHeaders"] == botocore_["SignedHeaders"]
    assert gateway["Signature"] != botocore_["Signature"]
    # Only the secret differs: botocore given the deployment's secret writes the gateway's very header.
    given = Credentials(WRONG.access_key, NOT_THE_SECRET)
    url = bedrock["fake"].base_url + check["path"]
    again = botocore_authorization(given, "POST", url, check["signed"].items(), check["body"], check["amz_date"])
    assert again == check["gateway"]


def test_every_signature_checked_matched(bedrock):
    fake = bedrock["fake"]
    before = fake.count()
    for alias in ("llama", "llama-temporary"):
        r = client(bedrock).chat.completions.create(model=alias, messages=[{"role": "user", "content": "again"}])
        assert r.choices[0].message.content == "signed ok"
    assert len(fake.since(before)) == 2
    good = [c for c in fake.since(0) if c["key_id"] != WRONG.access_key]
    assert len(good) >= 2, good
    assert all(c["matched"] for c in good), [c for c in good if not c["matched"]]
    assert {c["key_id"] for c in good} >= {LONG_TERM.access_key, TEMPORARY.access_key}
