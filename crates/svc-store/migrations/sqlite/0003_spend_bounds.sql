-- Spend records hold only sane numbers: tokens from 0 to 1,000,000,000 of each kind, a cost from 0 to
-- 1,000,000 units (10^15 nano-units), a latency of at least 0. Rows written before these bounds existed (an
-- upstream once reported 2^64-1 tokens) are clamped into them, so sums over a team's records cannot overflow.
-- SQLite cannot add a CHECK to a table, so the table is rebuilt with the same columns and indexes.
CREATE TABLE spend_log_bounded (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    request_id        TEXT NOT NULL,
    ts_ms             BIGINT NOT NULL,
    key_id            TEXT,
    team_id           TEXT,
    agent_role        TEXT,
    model_alias       TEXT NOT NULL,
    upstream_model    TEXT NOT NULL,
    deployment        TEXT NOT NULL,
    prompt_tokens     BIGINT NOT NULL CHECK (prompt_tokens BETWEEN 0 AND 1000000000),
    completion_tokens BIGINT NOT NULL CHECK (completion_tokens BETWEEN 0 AND 1000000000),
    cost              BIGINT NOT NULL CHECK (cost BETWEEN 0 AND 1000000000000000),
    status            BIGINT NOT NULL,
    latency_ms        BIGINT NOT NULL CHECK (latency_ms >= 0)
);
INSERT INTO spend_log_bounded (id, request_id, ts_ms, key_id, team_id, agent_role, model_alias, upstream_model,
                               deployment, prompt_tokens, completion_tokens, cost, status, latency_ms)
SELECT id, request_id, ts_ms, key_id, team_id, agent_role, model_alias, upstream_model, deployment,
       MIN(MAX(prompt_tokens, 0), 1000000000), MIN(MAX(completion_tokens, 0), 1000000000),
       MIN(MAX(cost, 0), 1000000000000000), status, MAX(latency_ms, 0)
FROM spend_log;
DROP TABLE spend_log;
ALTER TABLE spend_log_bounded RENAME TO spend_log;
CREATE INDEX spend_log_team_ts ON spend_log (team_id, ts_ms);
CREATE INDEX spend_log_key_ts ON spend_log (key_id, ts_ms);
CREATE INDEX spend_log_ts ON spend_log (ts_ms);
