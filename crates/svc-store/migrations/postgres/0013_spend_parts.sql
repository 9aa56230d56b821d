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

-- The fleet's spend writer writes the new columns too.
CREATE OR REPLACE FUNCTION svc_spend_write(batch JSONB) RETURNS INTEGER LANGUAGE plpgsql AS $$
DECLARE charges JSONB; c RECORD; n INTEGER;
BEGIN
    WITH input AS (
        SELECT * FROM jsonb_to_recordset(batch) AS x(
            record_id TEXT, node TEXT, request_id TEXT, ts_ms BIGINT, key_id TEXT, team_id TEXT, agent_role TEXT,
            model_alias TEXT, upstream_model TEXT, deployment TEXT, prompt_tokens BIGINT, completion_tokens BIGINT,
            cost BIGINT, status BIGINT, latency_ms BIGINT, api TEXT, client TEXT, session_id TEXT, response_id TEXT,
            cache_read_tokens BIGINT, cache_write_tokens BIGINT, tool_uses BIGINT, input_cost BIGINT,
            output_cost BIGINT, cache_read_cost BIGINT, cache_write_cost BIGINT, tool_cost BIGINT, basis TEXT,
            charges JSONB)
    ), ins AS (
        INSERT INTO spend_log (record_id, node, request_id, ts_ms, key_id, team_id, agent_role, model_alias,
                               upstream_model, deployment, prompt_tokens, completion_tokens, cost, status, latency_ms,
                               api, client, session_id, response_id, cache_read_tokens, cache_write_tokens, tool_uses,
                               input_cost, output_cost, cache_read_cost, cache_write_cost, tool_cost, basis)
        SELECT record_id, node, request_id, ts_ms, key_id, team_id, agent_role, model_alias, upstream_model,
               deployment, prompt_tokens, completion_tokens, cost, status, latency_ms, api, client, session_id,
               response_id, COALESCE(cache_read_tokens, 0), COALESCE(cache_write_tokens, 0), COALESCE(tool_uses, 0),
               COALESCE(input_cost, 0), COALESCE(output_cost, 0), COALESCE(cache_read_cost, 0),
               COALESCE(cache_write_cost, 0), COALESCE(tool_cost, 0), basis FROM input
        ON CONFLICT (record_id) DO NOTHING
        RETURNING record_id, node, cost
    ), sums AS (
        SELECT ch->>'scope' AS scope, CAST(ch->>'period' AS BIGINT) AS period, MAX(CAST(ch->>'limit' AS BIGINT)) AS lim,
               ins.node AS node, SUM(ins.cost) AS cost
        FROM ins JOIN input USING (record_id), jsonb_array_elements(COALESCE(input.charges, '[]'::jsonb)) AS ch
        GROUP BY 1, 2, 4
    )
    SELECT (SELECT COUNT(*) FROM ins),
           COALESCE((SELECT jsonb_agg(to_jsonb(sums) ORDER BY scope, period, node) FROM sums), '[]'::jsonb)
    INTO n, charges;
    FOR c IN SELECT * FROM jsonb_to_recordset(charges) AS x(scope TEXT, period BIGINT, lim BIGINT, node TEXT, cost BIGINT)
    LOOP
        PERFORM svc_budget_charge(c.scope, c.period, c.lim, c.node, c.cost);
    END LOOP;
    RETURN n;
END $$;
