-- Budget leases in full (used in fleet mode, on PostgreSQL; the same tables here keep the schemas alike).
ALTER TABLE budget_leases ADD COLUMN spent BIGINT NOT NULL DEFAULT 0;
CREATE INDEX budget_leases_node ON budget_leases (node);

CREATE TABLE budget_holdbacks (
    scope           TEXT NOT NULL,
    period_start_ms BIGINT NOT NULL,
    node            TEXT NOT NULL,
    amount          BIGINT NOT NULL,
    PRIMARY KEY (scope, period_start_ms, node)
);
