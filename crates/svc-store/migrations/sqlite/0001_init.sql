-- svc store, SQLite flavour. Times are Unix milliseconds, money is integer nano-units, JSON is TEXT.
CREATE TABLE meta (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE counters (
    name  TEXT PRIMARY KEY,
    value BIGINT NOT NULL
);
INSERT INTO counters (name, value) VALUES ('keys_generation', 0);

CREATE TABLE teams (
    team_id         TEXT PRIMARY KEY,
    budget_limit    BIGINT,
    models          TEXT NOT NULL,
    budget_duration TEXT NOT NULL,
    anchor_ms       BIGINT NOT NULL,
    rpm_limit       BIGINT,
    tpm_limit       BIGINT,
    in_config       BIGINT NOT NULL DEFAULT 1,
    updated_ms      BIGINT NOT NULL
);

CREATE TABLE virtual_keys (
    id              TEXT PRIMARY KEY,
    key_hash        TEXT NOT NULL UNIQUE,
    key_hint        TEXT NOT NULL,
    key_alias       TEXT UNIQUE,
    team_id         TEXT NOT NULL,
    agent_role      TEXT,
    models          TEXT NOT NULL,
    max_budget      BIGINT,
    budget_duration TEXT,
    rpm_limit       BIGINT,
    tpm_limit       BIGINT,
    metadata        TEXT NOT NULL,
    expires_ms      BIGINT,
    revoked_ms      BIGINT,
    created_ms      BIGINT NOT NULL,
    updated_ms      BIGINT NOT NULL,
    anchor_ms       BIGINT NOT NULL
);
CREATE INDEX virtual_keys_team ON virtual_keys (team_id);

CREATE TABLE spend_log (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    request_id        TEXT NOT NULL,
    ts_ms             BIGINT NOT NULL,
    key_id            TEXT,
    team_id           TEXT,
    agent_role        TEXT,
    model_alias       TEXT NOT NULL,
    upstream_model    TEXT NOT NULL,
    deployment        TEXT NOT NULL,
    prompt_tokens     BIGINT NOT NULL,
    completion_tokens BIGINT NOT NULL,
    cost              BIGINT NOT NULL,
    status            BIGINT NOT NULL,
    latency_ms        BIGINT NOT NULL
);
CREATE INDEX spend_log_team_ts ON spend_log (team_id, ts_ms);
CREATE INDEX spend_log_key_ts ON spend_log (key_id, ts_ms);
CREATE INDEX spend_log_ts ON spend_log (ts_ms);

CREATE TABLE budget_notices (
    scope           TEXT NOT NULL,
    period_start_ms BIGINT NOT NULL,
    notice          TEXT NOT NULL,
    created_ms      BIGINT NOT NULL,
    PRIMARY KEY (scope, period_start_ms, notice)
);

CREATE TABLE outbox (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    created_ms BIGINT NOT NULL,
    kind       TEXT NOT NULL,
    envelope   TEXT NOT NULL
);

CREATE TABLE outbox_delivery (
    outbox_id       BIGINT NOT NULL,
    destination     TEXT NOT NULL,
    delivery_id     TEXT NOT NULL,
    attempts        BIGINT NOT NULL DEFAULT 0,
    next_attempt_ms BIGINT NOT NULL DEFAULT 0,
    delivered_ms    BIGINT,
    failed_ms       BIGINT,
    last_error      TEXT,
    PRIMARY KEY (outbox_id, destination)
);
CREATE INDEX outbox_delivery_pending ON outbox_delivery (destination, delivered_ms, failed_ms, outbox_id);
