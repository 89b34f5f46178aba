-- paritysync's system of record. See activities/store/README.md for owners and retention.

CREATE TYPE family AS ENUM ('rates', 'availability', 'restrictions');
CREATE TYPE outcome AS ENUM ('committed', 'superseded', 'rejected', 'dead-lettered', 'cancelled');

-- Channel slugs, numbered so that the per-cell tables carry 2 bytes instead of the slug.
CREATE TABLE channels (
    id   smallint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    slug text NOT NULL UNIQUE
);

-- One row per (channel, property, room type, rate plan): a cell without its night.
-- Numbered so that a cell row carries 4 bytes instead of four strings.
CREATE TABLE room_rates (
    id          integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    channel     smallint NOT NULL REFERENCES channels,
    property_id text NOT NULL,
    room_type   text NOT NULL,
    rate_plan   text NOT NULL,
    UNIQUE (channel, property_id, room_type, rate_plan)
);

-- Per cell and family: the desired state (d_*), the newest version admitted to the
-- channel (sent_version) and the acknowledged state (a_*). Version 0 means none.
-- Values of a family the row is not about stay NULL and cost one bit each.
CREATE TABLE cells (
    room_rate       integer  NOT NULL REFERENCES room_rates,
    family          family   NOT NULL,
    night           date     NOT NULL,
    desired_version bigint   NOT NULL DEFAULT 0,
    sent_version    bigint   NOT NULL DEFAULT 0,
    acked_version   bigint   NOT NULL DEFAULT 0,
    confirmation    bigint,
    d_amount        numeric,
    d_currency      text,
    d_inventory     smallint,
    d_min_los       smallint,
    d_max_los       smallint,
    d_stop_sell     boolean,
    d_cta           boolean,
    d_ctd           boolean,
    a_amount        numeric,
    a_currency      text,
    a_inventory     smallint,
    a_min_los       smallint,
    a_max_los       smallint,
    a_stop_sell     boolean,
    a_cta           boolean,
    a_ctd           boolean,
    PRIMARY KEY (room_rate, family, night)
) WITH (fillfactor = 70);

-- One row per distinct confirmation a channel gave; many cells share it.
CREATE TABLE confirmations (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    channel      smallint NOT NULL REFERENCES channels,
    code         text NOT NULL,
    confirmed_at timestamptz NOT NULL,
    UNIQUE (channel, code)
);

-- Batches, numbered so outcomes carry 8 bytes instead of the batch id. payload is the
-- claim check of a big batch (deflated JSON), NULL once released.
CREATE TABLE batches (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    batch_id   text NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now(),
    mutations  integer,
    payload    bytea
);
ALTER TABLE batches ALTER COLUMN payload SET STORAGE EXTERNAL;

-- The stored requests of a batch's chunks (deflated JSON), one row per request.
CREATE TABLE batch_requests (
    batch    bigint   NOT NULL REFERENCES batches ON DELETE CASCADE,
    channel  smallint NOT NULL REFERENCES channels,
    priority smallint NOT NULL,
    chunk    integer  NOT NULL,
    idx      integer  NOT NULL,
    body     bytea    NOT NULL,
    PRIMARY KEY (batch, channel, priority, chunk, idx)
);
ALTER TABLE batch_requests ALTER COLUMN body SET STORAGE EXTERNAL;

-- Exactly one outcome per mutation and family in a batch; family NULL is the whole
-- mutation (rejected before it was split into families).
CREATE TABLE outcomes (
    batch       bigint   NOT NULL REFERENCES batches ON DELETE CASCADE,
    mutation_id text     NOT NULL,
    family      family,
    channel     smallint NOT NULL REFERENCES channels,
    outcome     outcome  NOT NULL,
    reason      text,
    recorded_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX outcomes_key ON outcomes (batch, mutation_id, family) NULLS NOT DISTINCT;

-- Requests (or some of their lines) that could not be delivered, replayable. They
-- outlive their batch's payload, so they name the batch instead of referencing it.
CREATE TABLE dead_letters (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    batch_id     text     NOT NULL,
    channel      smallint NOT NULL REFERENCES channels,
    property_id  text     NOT NULL,
    family       family   NOT NULL,
    reason       text     NOT NULL,
    status       smallint,
    message      text,
    request      jsonb    NOT NULL,
    request_key  bytea    NOT NULL,
    mutation_ids text[]   NOT NULL,
    stay_dates   date[]   NOT NULL,
    parked_at    timestamptz NOT NULL,
    acked_at     timestamptz,
    ack_note     text,
    UNIQUE (batch_id, request_key)
);
CREATE INDEX dead_letters_open ON dead_letters (channel, id) WHERE acked_at IS NULL;
