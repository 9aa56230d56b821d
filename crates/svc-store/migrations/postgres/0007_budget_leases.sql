-- Budget leases and fleet rate buckets (fleet mode, PostgreSQL only).
--
-- A budget's period row holds its limit, what is granted to the nodes' leases and what is settled (spent
-- under leases that were returned or reclaimed, plus held-back amounts). Invariant: settled + granted <= limit
-- (grants check it under the row's lock). A lease is one node's slice of a period: `amount` granted to it,
-- `spent` charged to it by the spend records the node wrote. When a dead node's lease is reclaimed, its unspent
-- part is held back (the node may have answered spend it had not written yet: its journal can hold up to that
-- much), and released when the node comes back and has written its journal.
--
-- Every operation is one function, so it costs one round trip and runs in one transaction.
ALTER TABLE budget_leases ADD COLUMN spent BIGINT NOT NULL DEFAULT 0;
CREATE INDEX budget_leases_node ON budget_leases (node);

CREATE TABLE budget_holdbacks (
    scope           TEXT NOT NULL,
    period_start_ms BIGINT NOT NULL,
    node            TEXT NOT NULL,
    amount          BIGINT NOT NULL,
    PRIMARY KEY (scope, period_start_ms, node)
);

-- rate_buckets.tokens are milli-tokens (refill is fractional); `scope` is `rpm:team:ID`, `tpm:key:ID`, ...
CREATE FUNCTION svc_now_ms() RETURNS BIGINT LANGUAGE sql VOLATILE AS $$
    SELECT CAST(floor(extract(epoch FROM clock_timestamp()) * 1000) AS BIGINT)
$$;

-- The limit of a scope as the store knows it: a team's row (written by the node that started last), a key's
-- max_budget; `fallback` for a scope the store does not know.
CREATE FUNCTION svc_budget_limit(p_scope TEXT, fallback BIGINT) RETURNS BIGINT LANGUAGE plpgsql STABLE AS $$
DECLARE lim BIGINT;
BEGIN
    IF p_scope LIKE 'team:%' THEN
        SELECT budget_limit INTO lim FROM teams WHERE team_id = substr(p_scope, 6);
    ELSIF p_scope LIKE 'key:%' THEN
        SELECT max_budget INTO lim FROM virtual_keys WHERE id = substr(p_scope, 5);
    END IF;
    RETURN COALESCE(lim, fallback);
END $$;

-- Grants `node` up to `want` more of the period's room but no more than a `share`-th of it (so slices shrink as
-- the budget nears its end, down to one request's worst case), at least `least`, or nothing when less than
-- `least` is left. Returns
-- what was granted and the period as it stands: its limit, the lease's amount after the grant, and what the
-- fleet spent outside this node's lease (settled minus holdbacks, plus the other leases' spent).
CREATE FUNCTION svc_budget_grant(p_scope TEXT, p_period BIGINT, p_limit BIGINT, p_node TEXT, p_least BIGINT,
                                 p_want BIGINT, p_share BIGINT, p_lease_ms BIGINT)
RETURNS TABLE (g_granted BIGINT, g_limit BIGINT, g_lease BIGINT, g_others_spent BIGINT)
LANGUAGE plpgsql AS $$
DECLARE lim BIGINT; per budget_periods%ROWTYPE; room BIGINT; amt BIGINT; total BIGINT;
BEGIN
    lim := svc_budget_limit(p_scope, p_limit);
    INSERT INTO budget_periods AS b (scope, period_start_ms, limit_nanos, granted, settled)
        VALUES (p_scope, p_period, lim, 0, 0)
        ON CONFLICT (scope, period_start_ms) DO UPDATE SET limit_nanos = lim;
    SELECT * INTO per FROM budget_periods b WHERE b.scope = p_scope AND b.period_start_ms = p_period FOR UPDATE;
    room := GREATEST(per.limit_nanos - per.settled - per.granted, 0);
    amt := LEAST(room, GREATEST(p_least, LEAST(GREATEST(p_want, 0), room / GREATEST(p_share, 1))));
    IF amt < GREATEST(p_least, 1) THEN
        amt := 0;
    END IF;
    IF amt > 0 THEN
        UPDATE budget_periods b SET granted = b.granted + amt
            WHERE b.scope = p_scope AND b.period_start_ms = p_period;
        INSERT INTO budget_leases AS l (scope, period_start_ms, node, amount, spent, expires_ms)
            VALUES (p_scope, p_period, p_node, amt, 0, svc_now_ms() + p_lease_ms)
            ON CONFLICT (scope, period_start_ms, node) DO UPDATE
            SET amount = l.amount + amt, expires_ms = svc_now_ms() + p_lease_ms;
    END IF;
    SELECT COALESCE(SUM(l.amount), 0) INTO total FROM budget_leases l
        WHERE l.scope = p_scope AND l.period_start_ms = p_period AND l.node = p_node;
    g_granted := amt;
    g_limit := per.limit_nanos;
    g_lease := total;
    g_others_spent := per.settled
        - COALESCE((SELECT SUM(h.amount) FROM budget_holdbacks h
                    WHERE h.scope = p_scope AND h.period_start_ms = p_period), 0)
        + COALESCE((SELECT SUM(l.spent) FROM budget_leases l
                    WHERE l.scope = p_scope AND l.period_start_ms = p_period AND l.node <> p_node), 0);
    RETURN NEXT;
END $$;

-- Gives up to `amount` of a lease back to the period (the node does not need it) and tells the fleet there is
-- room. Locks the period row before the lease, as every function here does.
CREATE FUNCTION svc_budget_give_back(p_scope TEXT, p_period BIGINT, p_node TEXT, p_amount BIGINT)
RETURNS BIGINT LANGUAGE plpgsql AS $$
DECLARE held BIGINT; amt BIGINT;
BEGIN
    PERFORM 1 FROM budget_periods b WHERE b.scope = p_scope AND b.period_start_ms = p_period FOR UPDATE;
    SELECT l.amount INTO held FROM budget_leases l
        WHERE l.scope = p_scope AND l.period_start_ms = p_period AND l.node = p_node FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    amt := LEAST(held, GREATEST(p_amount, 0));
    IF amt > 0 THEN
        UPDATE budget_leases l SET amount = l.amount - amt
            WHERE l.scope = p_scope AND l.period_start_ms = p_period AND l.node = p_node;
        UPDATE budget_periods b SET granted = b.granted - amt
            WHERE b.scope = p_scope AND b.period_start_ms = p_period;
        PERFORM pg_notify('svc_budget', 'room:' || p_scope);
    END IF;
    RETURN amt;
END $$;

-- Ends a lease: what it spent becomes settled, the rest of its amount returns to the period.
CREATE FUNCTION svc_budget_end_lease(p_scope TEXT, p_period BIGINT, p_node TEXT, p_hold BOOLEAN)
RETURNS VOID LANGUAGE plpgsql AS $$
DECLARE l budget_leases%ROWTYPE; hold BIGINT := 0;
BEGIN
    PERFORM 1 FROM budget_periods b WHERE b.scope = p_scope AND b.period_start_ms = p_period FOR UPDATE;
    DELETE FROM budget_leases x WHERE x.scope = p_scope AND x.period_start_ms = p_period AND x.node = p_node
        RETURNING * INTO l;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF p_hold THEN
        -- Reclaimed from a node that stopped answering: spend it answered but had not written yet may still come
        -- (when it restarts and writes its journal), as much as its unspent part; hold that back, so the limit
        -- holds then too.
        hold := GREATEST(l.amount - l.spent, 0);
    END IF;
    UPDATE budget_periods b SET granted = b.granted - l.amount, settled = b.settled + l.spent + hold
        WHERE b.scope = p_scope AND b.period_start_ms = p_period;
    IF hold > 0 THEN
        INSERT INTO budget_holdbacks AS h (scope, period_start_ms, node, amount) VALUES (p_scope, p_period, p_node, hold)
            ON CONFLICT (scope, period_start_ms, node) DO UPDATE SET amount = h.amount + hold;
    END IF;
    IF l.amount > l.spent + hold THEN
        PERFORM pg_notify('svc_budget', 'room:' || p_scope);
    END IF;
END $$;

-- Returns every lease of `node` (a clean stop, or a restart once the journal is written).
CREATE FUNCTION svc_budget_return_all(p_node TEXT) RETURNS INTEGER LANGUAGE plpgsql AS $$
DECLARE r RECORD; n INTEGER := 0;
BEGIN
    FOR r IN SELECT scope, period_start_ms FROM budget_leases WHERE node = p_node ORDER BY scope, period_start_ms LOOP
        PERFORM svc_budget_end_lease(r.scope, r.period_start_ms, p_node, FALSE);
        n := n + 1;
    END LOOP;
    RETURN n;
END $$;

-- Ends every lease that expired (its node stopped renewing), holding back what its node may not have written.
CREATE FUNCTION svc_budget_reclaim() RETURNS INTEGER LANGUAGE plpgsql AS $$
DECLARE r RECORD; n INTEGER := 0;
BEGIN
    FOR r IN SELECT scope, period_start_ms, node FROM budget_leases WHERE expires_ms < svc_now_ms()
             ORDER BY scope, period_start_ms, node LOOP
        PERFORM svc_budget_end_lease(r.scope, r.period_start_ms, r.node, TRUE);
        n := n + 1;
    END LOOP;
    RETURN n;
END $$;

-- Keeps every lease of `node` for another `lease_ms`.
CREATE FUNCTION svc_budget_renew(p_node TEXT, p_lease_ms BIGINT) RETURNS INTEGER LANGUAGE plpgsql AS $$
DECLARE n INTEGER;
BEGIN
    UPDATE budget_leases SET expires_ms = svc_now_ms() + p_lease_ms WHERE node = p_node;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END $$;

-- Releases what was held back from `node`'s reclaimed leases, once its journal is written.
CREATE FUNCTION svc_budget_release_holdbacks(p_node TEXT) RETURNS INTEGER LANGUAGE plpgsql AS $$
DECLARE r RECORD; n INTEGER := 0;
BEGIN
    FOR r IN SELECT scope, period_start_ms FROM budget_holdbacks WHERE node = p_node ORDER BY scope, period_start_ms LOOP
        PERFORM 1 FROM budget_periods b WHERE b.scope = r.scope AND b.period_start_ms = r.period_start_ms FOR UPDATE;
        WITH gone AS (
            DELETE FROM budget_holdbacks h
            WHERE h.scope = r.scope AND h.period_start_ms = r.period_start_ms AND h.node = p_node
            RETURNING h.amount
        )
        UPDATE budget_periods b SET settled = b.settled - (SELECT COALESCE(SUM(amount), 0) FROM gone)
            WHERE b.scope = r.scope AND b.period_start_ms = r.period_start_ms;
        PERFORM pg_notify('svc_budget', 'room:' || r.scope);
        n := n + 1;
    END LOOP;
    RETURN n;
END $$;

-- Charges `cost` spent by `node` to its lease of the period; without a lease (returned or reclaimed since), to
-- what was held back from it, then to the period's settled spend.
CREATE FUNCTION svc_budget_charge(p_scope TEXT, p_period BIGINT, p_limit BIGINT, p_node TEXT, p_cost BIGINT)
RETURNS VOID LANGUAGE plpgsql AS $$
DECLARE held BIGINT; absorbed BIGINT := 0;
BEGIN
    UPDATE budget_leases l SET spent = l.spent + p_cost
        WHERE l.scope = p_scope AND l.period_start_ms = p_period AND l.node = p_node;
    IF FOUND THEN
        RETURN;
    END IF;
    INSERT INTO budget_periods AS b (scope, period_start_ms, limit_nanos, granted, settled)
        VALUES (p_scope, p_period, svc_budget_limit(p_scope, p_limit), 0, 0)
        ON CONFLICT (scope, period_start_ms) DO NOTHING;
    PERFORM 1 FROM budget_periods b WHERE b.scope = p_scope AND b.period_start_ms = p_period FOR UPDATE;
    SELECT h.amount INTO held FROM budget_holdbacks h
        WHERE h.scope = p_scope AND h.period_start_ms = p_period AND h.node = p_node FOR UPDATE;
    IF FOUND THEN
        absorbed := LEAST(held, p_cost);
        UPDATE budget_holdbacks h SET amount = h.amount - absorbed
            WHERE h.scope = p_scope AND h.period_start_ms = p_period AND h.node = p_node;
    END IF;
    UPDATE budget_periods b SET settled = b.settled + p_cost - absorbed
        WHERE b.scope = p_scope AND b.period_start_ms = p_period;
END $$;

-- Writes a batch of spend records (JSON array; a record already written is skipped, so a batch can be written
-- again after a commit whose answer was lost) and charges each new record's cost to the budgets it names in
-- `charges` ([{"scope", "period", "limit"}]). Returns how many records were new.
CREATE FUNCTION svc_spend_write(batch JSONB) RETURNS INTEGER LANGUAGE plpgsql AS $$
DECLARE charges JSONB; c RECORD; n INTEGER;
BEGIN
    WITH input AS (
        SELECT * FROM jsonb_to_recordset(batch) AS x(
            record_id TEXT, node TEXT, request_id TEXT, ts_ms BIGINT, key_id TEXT, team_id TEXT, agent_role TEXT,
            model_alias TEXT, upstream_model TEXT, deployment TEXT, prompt_tokens BIGINT, completion_tokens BIGINT,
            cost BIGINT, status BIGINT, latency_ms BIGINT, charges JSONB)
    ), ins AS (
        INSERT INTO spend_log (record_id, node, request_id, ts_ms, key_id, team_id, agent_role, model_alias,
                               upstream_model, deployment, prompt_tokens, completion_tokens, cost, status, latency_ms)
        SELECT record_id, node, request_id, ts_ms, key_id, team_id, agent_role, model_alias, upstream_model,
               deployment, prompt_tokens, completion_tokens, cost, status, latency_ms FROM input
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

-- Takes up to `want` tokens (at least `least`, else none) from a fleet-wide token bucket of `capacity` tokens
-- refilled at `per_minute` a minute; `ticks` of 1/1000 token. The bucket starts full.
CREATE FUNCTION svc_rate_take(p_scope TEXT, p_capacity BIGINT, p_per_minute BIGINT, p_least BIGINT, p_want BIGINT)
RETURNS BIGINT LANGUAGE plpgsql AS $$
DECLARE now_ms BIGINT := svc_now_ms(); cap BIGINT := p_capacity * 1000; have BIGINT; amt BIGINT;
BEGIN
    INSERT INTO rate_buckets (scope, tokens, updated_ms) VALUES (p_scope, cap, now_ms) ON CONFLICT (scope) DO NOTHING;
    SELECT LEAST(cap, r.tokens + GREATEST(now_ms - r.updated_ms, 0) * p_per_minute / 60)
        INTO have FROM rate_buckets r WHERE r.scope = p_scope FOR UPDATE;
    amt := LEAST(have / 1000, GREATEST(p_want, 0));
    IF amt < GREATEST(p_least, 0) THEN
        amt := 0;
    END IF;
    UPDATE rate_buckets r SET tokens = have - amt * 1000, updated_ms = now_ms WHERE r.scope = p_scope;
    RETURN amt;
END $$;

-- Puts unused tokens back (never above the capacity).
CREATE FUNCTION svc_rate_give_back(p_scope TEXT, p_capacity BIGINT, p_tokens BIGINT) RETURNS VOID LANGUAGE sql AS $$
    UPDATE rate_buckets SET tokens = LEAST(p_capacity * 1000, tokens + GREATEST(p_tokens, 0) * 1000) WHERE scope = p_scope
$$;
