-- Only the records of an agent session need the session index: most callers (the SDKs, scripts) name none, and
-- each index a record is in costs its insert a b-tree insert. A query for one session (`session_id = $n`)
-- implies `session_id IS NOT NULL`, so it still uses the index.
DROP INDEX spend_log_session_ts;
CREATE INDEX spend_log_session_ts ON spend_log (session_id, ts_ms) WHERE session_id IS NOT NULL;
