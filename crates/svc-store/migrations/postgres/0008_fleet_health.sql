-- Model health across a fleet: each node records its own judgement of a deployment; the fleet's state is the
-- worst judgement of its online nodes, and `model.*` is announced by the node whose transition made it worse
-- (one event per fleet transition; a recovery lowers it silently).

CREATE FUNCTION svc_health_rank(p_state TEXT) RETURNS INT IMMUTABLE LANGUAGE sql AS $$
    SELECT CASE p_state WHEN 'unavailable' THEN 2 WHEN 'degraded' THEN 1 ELSE 0 END
$$;

-- Records `p_node`'s judgement of `p_deployment`; true when this node announces the fleet's transition.
CREATE FUNCTION svc_health_judged(p_fleet TEXT, p_node TEXT, p_deployment TEXT, p_state TEXT)
RETURNS BOOLEAN LANGUAGE plpgsql AS $$
DECLARE now_ms BIGINT := svc_now_ms(); worst INT; announced INT; own INT := svc_health_rank(p_state);
BEGIN
    INSERT INTO health_states (deployment, node, state, updated_ms) VALUES (p_deployment, p_node, p_state, now_ms)
        ON CONFLICT (deployment, node) DO UPDATE SET state = EXCLUDED.state, updated_ms = EXCLUDED.updated_ms;
    INSERT INTO health_announced (deployment, state, updated_ms) VALUES (p_deployment, 'healthy', now_ms)
        ON CONFLICT (deployment) DO NOTHING;
    -- The lock orders concurrent judgements; each statement after it sees the others' committed states.
    SELECT svc_health_rank(a.state) INTO announced FROM health_announced a WHERE a.deployment = p_deployment FOR UPDATE;
    SELECT COALESCE(MAX(svc_health_rank(h.state)), 0) INTO worst
        FROM health_states h JOIN fleet_nodes n ON n.node = h.node AND n.fleet = p_fleet AND n.state = 'online'
        WHERE h.deployment = p_deployment AND h.node <> p_node;
    worst := GREATEST(worst, own);
    IF worst = announced THEN
        RETURN FALSE;
    END IF;
    UPDATE health_announced SET updated_ms = now_ms,
        state = CASE worst WHEN 2 THEN 'unavailable' WHEN 1 THEN 'degraded' ELSE 'healthy' END
        WHERE deployment = p_deployment;
    RETURN worst > announced AND own = worst;
END $$;
