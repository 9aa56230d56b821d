-- A lease's exposure (used in fleet mode, on PostgreSQL; the same columns here keep the schemas alike): the most
-- its node may have answered and not yet written, as the node last told the store (NULL: never told, the whole
-- unspent lease), and the node's sequence number of that report (an older report never overwrites a newer one).
ALTER TABLE budget_leases ADD COLUMN exposure BIGINT;
ALTER TABLE budget_leases ADD COLUMN exposure_seq BIGINT NOT NULL DEFAULT 0;
