-- Fleet mode: several gateways on one store. Nodes register and send heartbeats; budgets are handed out to
-- nodes in leases; one node at a time delivers each shared outbox destination; a deployment's health is
-- announced once per fleet transition; spend records get a unique id (writing one twice keeps one) and name
-- the node that wrote them.
CREATE TABLE fleet_nodes (
    node            TEXT PRIMARY KEY,
    fleet           TEXT NOT NULL,
    address         TEXT NOT NULL,
    version         TEXT NOT NULL,
    started_ms      BIGINT NOT NULL,
    heartbeat_ms    BIGINT NOT NULL,
    state           TEXT NOT NULL,
    state_since_ms  BIGINT NOT NULL,
    requests_served BIGINT NOT NULL DEFAULT 0,
    in_flight       BIGINT NOT NULL DEFAULT 0,
    teams           TEXT NOT NULL DEFAULT '{}'
);

CREATE TABLE budget_periods (
    scope           TEXT NOT NULL,
    period_start_ms BIGINT NOT NULL,
    limit_nanos     BIGINT NOT NULL,
    granted         BIGINT NOT NULL DEFAULT 0,
    settled         BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (scope, period_start_ms)
);

CREATE TABLE budget_leases (
    scope           TEXT NOT NULL,
    period_start_ms BIGINT NOT NULL,
    node            TEXT NOT NULL,
    amount          BIGINT NOT NULL,
    expires_ms      BIGINT NOT NULL,
    PRIMARY KEY (scope, period_start_ms, node)
);
CREATE INDEX budget_leases_expiry ON budget_leases (expires_ms);

CREATE TABLE rate_buckets (
    scope      TEXT PRIMARY KEY,
    tokens     BIGINT NOT NULL,
    updated_ms BIGINT NOT NULL
);

CREATE TABLE outbox_leases (
    destination TEXT PRIMARY KEY,
    node        TEXT NOT NULL,
    expires_ms  BIGINT NOT NULL
);

CREATE TABLE health_states (
    deployment TEXT NOT NULL,
    node       TEXT NOT NULL,
    state      TEXT NOT NULL,
    updated_ms BIGINT NOT NULL,
    PRIMARY KEY (deployment, node)
);

CREATE TABLE health_announced (
    deployment TEXT PRIMARY KEY,
    state      TEXT NOT NULL,
    updated_ms BIGINT NOT NULL
);

ALTER TABLE spend_log ADD COLUMN record_id TEXT;
ALTER TABLE spend_log ADD COLUMN node TEXT;
CREATE UNIQUE INDEX spend_log_record ON spend_log (record_id);
