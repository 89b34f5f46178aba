-- Runs once, when the compose file's PostgreSQL initializes its data directory:
-- paritysync's system of record gets a role and a database of its own, next to
-- Temporal's. The worker applies paritysync's schema migrations at start.
CREATE ROLE paritysync LOGIN PASSWORD 'paritysync';
CREATE DATABASE paritysync OWNER paritysync;
