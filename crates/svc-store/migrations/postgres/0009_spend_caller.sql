-- Which client API a request came in by (chat, messages, responses, embeddings), the client family read from
-- its User-Agent (claude-cli, codex_exec, …) and the agent's session id, so spend can be grouped by them.
ALTER TABLE spend_log ADD COLUMN api TEXT;
ALTER TABLE spend_log ADD COLUMN client TEXT;
ALTER TABLE spend_log ADD COLUMN session_id TEXT;
CREATE INDEX spend_log_session_ts ON spend_log (session_id, ts_ms);
