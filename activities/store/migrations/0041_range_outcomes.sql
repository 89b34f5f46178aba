-- Range mutations (from/to, days): PrepareBatch expands one into its nights, each
-- carrying the mutation's id, so the cells, the gate and superseding work per night
-- while the mutation keeps one outcome per family. Each night's end is kept in
-- range_nights; when every night of a family has ended, the mutation's outcome is
-- recorded in outcomes (the worst end wins, the reason lists the nights that ended
-- otherwise). nights is how many nights the range has after clipping; clipped says
-- which nights fell before today or beyond the channel's horizon.
CREATE TABLE range_mutations (
    batch       bigint  NOT NULL REFERENCES batches ON DELETE CASCADE,
    mutation_id text    NOT NULL,
    nights      integer NOT NULL,
    clipped     text,
    PRIMARY KEY (batch, mutation_id)
);
CREATE TABLE range_nights (
    batch       bigint  NOT NULL,
    mutation_id text    NOT NULL,
    family      family  NOT NULL,
    night       date    NOT NULL,
    outcome     outcome NOT NULL,
    reason      text,
    PRIMARY KEY (batch, mutation_id, family, night),
    FOREIGN KEY (batch, mutation_id) REFERENCES range_mutations ON DELETE CASCADE
);
