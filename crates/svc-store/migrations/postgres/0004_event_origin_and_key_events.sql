-- Who posted each event (`gateway`, `master`, `key:<key id>`, `svc-notify`), delivered beside the envelope as
-- `X-SVC-Origin` and `SVC_EVENT_ORIGIN`; NULL for events stored before it was recorded.
ALTER TABLE outbox ADD COLUMN origin TEXT;
-- The event patterns a virtual key may post on POST /events (JSON array text; empty: every kind a key may post).
ALTER TABLE virtual_keys ADD COLUMN events TEXT NOT NULL DEFAULT '[]';
