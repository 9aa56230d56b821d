-- Teams made at runtime (`/team/new`, `svc teams new`) beside the config file's: `origin` says which ('file' or
-- 'api'; a team of a file is changed by the file), `deleted_ms` marks an API team deleted (its row stays, for the
-- spend that names it; a file team leaves the running set by `in_config` instead, which binaries from before this
-- migration also write). `teams_generation` moves on with every change to the teams, as `keys_generation` does for
-- keys: each node polls it (and on PostgreSQL hears of it at once) and applies the change within a second.
-- Each node's heartbeat carries the digest of the configuration file it runs, so that nodes running different
-- files are found.
ALTER TABLE teams ADD COLUMN origin TEXT NOT NULL DEFAULT 'file';
ALTER TABLE teams ADD COLUMN team_alias TEXT;
ALTER TABLE teams ADD COLUMN metadata TEXT NOT NULL DEFAULT '{}';
ALTER TABLE teams ADD COLUMN created_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE teams ADD COLUMN deleted_ms BIGINT;
INSERT INTO counters (name, value) VALUES ('teams_generation', 0);
ALTER TABLE fleet_nodes ADD COLUMN config_digest TEXT NOT NULL DEFAULT '';
