-- A node name belongs to one run at a time. A row records the host name of the machine the run is on (with the
-- address, what makes a start the same node coming back rather than a second process with its name) and a token
-- of the run, so that the heartbeats of another run of the name never write over the row's owner.
ALTER TABLE fleet_nodes ADD COLUMN host TEXT NOT NULL DEFAULT '';
ALTER TABLE fleet_nodes ADD COLUMN instance TEXT NOT NULL DEFAULT '';
