-- Listing batches from the store (GET /v1/batches): the tenant is the batch id's
-- prefix before its first dot (intake's ids are <tenant>.<suffix>; an operator's
-- batch started without PARITYSYNC_TENANT has none). state is running until
-- FinishBatch records how the batch ended (done, cancelled) or an operator's cancel
-- found it terminated, failed or timed out; rows from before this migration stay
-- NULL (reported unknown).
ALTER TABLE batches
    ADD COLUMN tenant text GENERATED ALWAYS AS
        (CASE WHEN strpos(batch_id, '.') > 1 THEN split_part(batch_id, '.', 1) END) STORED,
    ADD COLUMN state text,
    ADD COLUMN ended_at timestamptz;
ALTER TABLE batches ALTER COLUMN state SET DEFAULT 'running';
-- A tenant's page, newest first; the operator's page uses batches_listing.
CREATE INDEX batches_tenant_listing ON batches (tenant, created_at DESC, id DESC);
CREATE INDEX batches_listing ON batches (created_at DESC, id DESC);

-- The completion callbacks' outbox: one event per batch that named a callback URL,
-- written with the batch's end in one transaction (FinishBatch), delivered at least
-- once by intake's delivery loop. body is the exact JSON every attempt sends, so a
-- redelivery carries the same event id; the signature (keyed with the tenant's
-- secret, which never reaches the store) is made at each attempt.
CREATE TABLE callbacks (
    event_id     text        PRIMARY KEY,
    batch        bigint      NOT NULL REFERENCES batches ON DELETE CASCADE,
    tenant       text        NOT NULL,
    url          text        NOT NULL,
    body         text        NOT NULL,
    created_at   timestamptz NOT NULL,
    next_at      timestamptz NOT NULL,
    attempts     integer     NOT NULL DEFAULT 0,
    last_error   text,
    delivered_at timestamptz,
    failed_at    timestamptz
);
-- The delivery loop's claim: due events not yet delivered nor given up.
CREATE INDEX callbacks_due ON callbacks (next_at) WHERE delivered_at IS NULL AND failed_at IS NULL;
