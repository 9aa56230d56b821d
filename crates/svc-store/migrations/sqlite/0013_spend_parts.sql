-- A spend record keeps each part of what was charged, so that the ledger shows where the money went: input, output,
-- prompt-cache reads and writes, server-side tool uses (costs in nano-units, adding up to `cost`), the cache and
-- tool counts they were priced from, and the basis of the charge (`billed`: the provider's usage; `over_reservation`:
-- billed above what was reserved; `estimated`: the provider reported none; `reservation`: its counts could not be
-- right, or a stream ran past its cap). Records written before this have no parts (all 0) and no basis.
ALTER TABLE spend_log ADD COLUMN cache_read_tokens BIGINT NOT NULL DEFAULT 0 CHECK (cache_read_tokens BETWEEN 0 AND 1000000000);
ALTER TABLE spend_log ADD COLUMN cache_write_tokens BIGINT NOT NULL DEFAULT 0 CHECK (cache_write_tokens BETWEEN 0 AND 1000000000);
ALTER TABLE spend_log ADD COLUMN tool_uses BIGINT NOT NULL DEFAULT 0 CHECK (tool_uses BETWEEN 0 AND 1000000000);
ALTER TABLE spend_log ADD COLUMN input_cost BIGINT NOT NULL DEFAULT 0 CHECK (input_cost BETWEEN 0 AND 1000000000000000);
ALTER TABLE spend_log ADD COLUMN output_cost BIGINT NOT NULL DEFAULT 0 CHECK (output_cost BETWEEN 0 AND 1000000000000000);
ALTER TABLE spend_log ADD COLUMN cache_read_cost BIGINT NOT NULL DEFAULT 0 CHECK (cache_read_cost BETWEEN 0 AND 1000000000000000);
ALTER TABLE spend_log ADD COLUMN cache_write_cost BIGINT NOT NULL DEFAULT 0 CHECK (cache_write_cost BETWEEN 0 AND 1000000000000000);
ALTER TABLE spend_log ADD COLUMN tool_cost BIGINT NOT NULL DEFAULT 0 CHECK (tool_cost BETWEEN 0 AND 1000000000000000);
ALTER TABLE spend_log ADD COLUMN basis TEXT;
