-- A batch written in parts (reconciliation's repairs, one part per property read
-- back), so that the writer never holds the whole batch and a retried writer
-- replaces the parts it wrote before instead of adding to them. LoadBatch appends the
-- parts, in part order, to the batch's payload; ReleaseBatch drops them, and they go
-- with their batch row otherwise.
CREATE TABLE batch_parts (
    batch     bigint  NOT NULL REFERENCES batches ON DELETE CASCADE,
    part      text    NOT NULL,
    mutations integer NOT NULL,
    payload   bytea   NOT NULL,
    PRIMARY KEY (batch, part)
);
ALTER TABLE batch_parts ALTER COLUMN payload SET STORAGE EXTERNAL;
