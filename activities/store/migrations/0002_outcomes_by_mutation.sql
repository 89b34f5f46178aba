-- The outcomes of one mutation whichever batch carried it: the HTTP API answers a
-- webhook change's fate by its id alone (the burst smoother names its batches).
CREATE INDEX outcomes_by_mutation ON outcomes (mutation_id);
