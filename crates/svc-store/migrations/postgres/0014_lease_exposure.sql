-- A dead node strands only what it may have answered (issue 28, item 8).
--
-- Each node keeps the store told of its exposure in each lease: the most it may have answered and not yet written
-- (its requests in flight at their worst case, plus what it answered since its last written spend batch, plus the
-- headroom it allows itself until its next report). The node admits nothing that would take it past the exposure
-- the store holds: it lowers its own ceiling before it reports a lower one, and raises it only once the store has
-- taken the higher one. Reports come with the node's spend batches (in the batch's transaction, so what the batch
-- writes is no longer exposed), with its lease renewals, and, when a request needs more, on their own.
--
-- A reclaimed lease (its node stopped renewing) holds back only its exposure, at most its unspent part; the rest
-- returns to the period at once. A lease whose node never reported (NULL) holds back its whole unspent part, as
-- before. Nothing else changes: the node's journal, written when it comes back, is charged to the holdback first
-- (`svc_budget_charge`), and what is left of the holdback is released then (`svc_budget_release_holdbacks`).
ALTER TABLE budget_leases ADD COLUMN exposure BIGINT;
ALTER TABLE budget_leases ADD COLUMN exposure_seq BIGINT NOT NULL DEFAULT 0;

-- Applies `node`'s exposure reports ([{"scope", "period", "exposure", "seq"}]) to its leases: each only when it
-- is newer than the one the lease holds. Returns how many leases took a report.
CREATE FUNCTION svc_budget_expose(p_node TEXT, p_reports JSONB) RETURNS INTEGER LANGUAGE plpgsql AS $$
DECLARE n INTEGER;
BEGIN
    UPDATE budget_leases l SET exposure = GREATEST(r.exposure, 0), exposure_seq = r.seq
        FROM jsonb_to_recordset(COALESCE(p_reports, '[]'::jsonb)) AS r(scope TEXT, period BIGINT, exposure BIGINT, seq BIGINT)
        WHERE l.scope = r.scope AND l.period_start_ms = r.period AND l.node = p_node AND r.seq > l.exposure_seq;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END $$;

-- Ends a lease: what it spent becomes settled, the rest of its amount returns to the period. Reclaimed from a
-- dead node (`p_hold`): its exposure (at most the unspent part) is held back.
CREATE OR REPLACE FUNCTION svc_budget_end_lease(p_scope TEXT, p_period BIGINT, p_node TEXT, p_hold BOOLEAN)
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
        -- (when it restarts and writes its journal), as much as it last said it may have (never more than its
        -- unspent part); hold that back, so the limit holds then too.
        hold := GREATEST(LEAST(l.amount - l.spent, COALESCE(l.exposure, l.amount - l.spent)), 0);
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
