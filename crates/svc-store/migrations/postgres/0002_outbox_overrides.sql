-- Push overrides given with an event (`title`, `priority` of POST /events), kept with it for redelivery.
ALTER TABLE outbox ADD COLUMN title TEXT;
ALTER TABLE outbox ADD COLUMN priority TEXT;
