-- The id of the stored response a Responses request created upstream (`resp_…`), kept with its spend record: the
-- record says who created it (key, team) and which deployment holds it, so every node of a fleet, and a node
-- after a restart, can route `previous_response_id` and `GET /responses/{id}` to it and refuse every other key.
-- Only Responses records carry one, so the index holds only those.
ALTER TABLE spend_log ADD COLUMN response_id TEXT;
CREATE INDEX spend_log_response ON spend_log (response_id) WHERE response_id IS NOT NULL;

-- The fleet's spend writer (migration 0007's function) now writes every column a record has: before this it left
-- out the client API, client family and session id added by migration 0009, so a fleet's records had none.
CREATE OR REPLACE FUNCTION svc_spend_write(batch JSONB) RETURNS INTEGER LANGUAGE plpgsql AS $$
DECLARE charges JSONB; c RECORD; n INTEGER;
BEGIN
    WITH input AS (
        SELECT * FROM jsonb_to_recordset(batch) AS x(
            record_id TEXT, node TEXT, request_id TEXT, ts_ms BIGINT, key_id TEXT, team_id TEXT, agent_role TEXT,
            model_alias TEXT, upstream_model TEXT, deployment TEXT, prompt_tokens BIGINT, completion_tokens BIGINT,
            cost BIGINT, status BIGINT, latency_ms BIGINT, api TEXT, client TEXT, session_id TEXT, response_id TEXT,
            charges JSONB)
    ), ins AS (
        INSERT INTO spend_log (record_id, node, request_id, ts_ms, key_id, team_id, agent_role, model_alias,
                               upstream_model, deployment, prompt_tokens, completion_tokens, cost, status, latency_ms,
                               api, client, session_id, response_id)
        SELECT record_id, node, request_id, ts_ms, key_id, team_id, agent_role, model_alias, upstream_model,
               deployment, prompt_tokens, completion_tokens, cost, status, latency_ms, api, client, session_id,
               response_id FROM input
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
