-- When a budget notice's event was stored in the outbox. A node announcing `exceeded` waits (bounded) for the
-- alerts another node recorded first to be stored, so that each alert's outbox row, and so its delivery, comes
-- before `exceeded`'s. Notices recorded before this migration were announced long ago.
ALTER TABLE budget_notices ADD COLUMN emitted_ms BIGINT;
UPDATE budget_notices SET emitted_ms = created_ms;
