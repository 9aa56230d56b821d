-- The id of the stored response a Responses request created upstream (`resp_…`), kept with its spend record: the
-- record says who created it (key, team) and which deployment holds it, so every node of a fleet, and a node
-- after a restart, can route `previous_response_id` and `GET /responses/{id}` to it and refuse every other key.
-- Only Responses records carry one, so the index holds only those.
ALTER TABLE spend_log ADD COLUMN response_id TEXT;
CREATE INDEX spend_log_response ON spend_log (response_id) WHERE response_id IS NOT NULL;
