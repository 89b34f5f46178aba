-- The burst smoothers' claim check: every change a PMS hands a channel's smoother is
-- staged here before the submit update, which carries only the submission's key; the
-- workflow keeps counts. admitted is NULL until the smoother admitted the
-- submission (AdmitChanges), then its place in admission order. TakeChanges moves
-- the oldest admitted changes of a priority range into a batch's payload and
-- deletes them here; staged changes never admitted (a refused or lost update) are
-- pruned (PruneStaged).
CREATE TABLE smoother_changes (
    channel    smallint    NOT NULL REFERENCES channels,
    submission text        NOT NULL,
    idx        integer     NOT NULL,
    priority   smallint    NOT NULL,
    admitted   bigint,
    staged_at  timestamptz NOT NULL,
    body       bytea       NOT NULL, -- the change as JSON
    PRIMARY KEY (channel, submission, idx)
);
CREATE SEQUENCE smoother_admissions;
-- A take reads the oldest admitted changes per priority: one range per priority.
CREATE INDEX smoother_changes_waiting ON smoother_changes (channel, priority, admitted, idx)
    WHERE admitted IS NOT NULL;
CREATE INDEX smoother_changes_staged ON smoother_changes (staged_at) WHERE admitted IS NULL;
