-- Model health across a fleet is judged in PostgreSQL functions (fleet mode only); the tables are already
-- alike (0005). Nothing to change here: a single node announces its own transitions.
SELECT 1;
