-- Per batch and channel, how many updates PrepareBatch planned (decided ones and
-- those handed to chunks), so that a batch's progress reads done/total from the
-- store alone: outcome_counts holds the done, this the total.
CREATE TABLE batch_expected (
    batch   bigint   NOT NULL REFERENCES batches ON DELETE CASCADE,
    channel smallint NOT NULL REFERENCES channels,
    updates integer  NOT NULL,
    PRIMARY KEY (batch, channel)
);

-- The batch's planned updates over every channel, NULL until PrepareBatch recorded
-- them: a batch planned with no update at all is told from one not yet planned.
ALTER TABLE batches ADD COLUMN planned_updates integer;
