-- Per batch, channel and outcome, how many outcomes are recorded: kept by every
-- writer of outcomes in the same statement, so that a push answers its tallies and
-- a batch's status reads its counts without counting the batch's outcomes.
CREATE TABLE outcome_counts (
    batch   bigint   NOT NULL REFERENCES batches ON DELETE CASCADE,
    channel smallint NOT NULL REFERENCES channels,
    outcome outcome  NOT NULL,
    n       integer  NOT NULL,
    PRIMARY KEY (batch, channel, outcome)
);
INSERT INTO outcome_counts (batch, channel, outcome, n)
SELECT batch, channel, outcome, count(*) FROM outcomes GROUP BY 1, 2, 3;
