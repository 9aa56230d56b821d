"""Webhook deliveries of the real gateway, verified by the receiving side's tools: the `standardwebhooks`
package's `Webhook(secret).verify(body, headers)` (Standard Webhooks: `webhook-id`, `webhook-timestamp`,
`webhook-signature`), and `X-SVC-Signature` (spec 6.4) recomputed with `hmac`."""

import hashlib
import hmac
import json
import urllib.request

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from conftest import MASTER, PLAIN_SECRET, WHSEC_SECRET


def post_event(gateway, body):
    req = urllib.request.Request(
        gateway + "/events",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {MASTER}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 202
        return json.load(r), r.headers["X-SVC-Outbox-Id"]


def test_deliveries_verify_with_standard_webhooks_and_the_svc_signature(webhook_gateway):
    data = {"task_id": 7, "task_title": "Ship it", "epic_id": 2, "duration_seconds": 30}
    envelope, outbox_id = post_event(webhook_gateway["url"], {"event": "task.done", "data": data})
    assert int(outbox_id) > 0
    assert set(envelope) == {"event", "version", "timestamp", "fleet", "node", "agent", "data"}
    got = {path: (headers, body) for path, headers, body in webhook_gateway["receiver"].wait_for(2)}
    assert set(got) == {"/whsec", "/plain"}

    for path, verifier, secret in [
        ("/whsec", Webhook(WHSEC_SECRET), WHSEC_SECRET),
        # A secret without the `whsec_` prefix: its raw bytes are the key (bytes, so the library does not decode).
        ("/plain", Webhook(PLAIN_SECRET.encode()), PLAIN_SECRET),
    ]:
        headers, body = got[path]
        headers = {k.lower(): v for k, v in headers.items()}
        assert json.loads(body) == envelope
        assert verifier.verify(body, headers) == envelope
        assert headers["webhook-id"] == headers["x-svc-delivery"]
        assert headers["x-svc-origin"] == "master"
        expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(expected, headers["x-svc-signature"])

        # A replay with another timestamp, another id or another body does not verify.
        for name, value in [("webhook-timestamp", str(int(headers["webhook-timestamp"]) - 1)), ("webhook-id", "other")]:
            with pytest.raises(WebhookVerificationError):
                verifier.verify(body, {**headers, name: value})
        with pytest.raises(WebhookVerificationError):
            verifier.verify(body.replace(b"Ship it", b"Ship it!"), headers)
        # Another key does not verify either.
        with pytest.raises(WebhookVerificationError):
            Webhook(b"not-the-secret").verify(body, headers)
