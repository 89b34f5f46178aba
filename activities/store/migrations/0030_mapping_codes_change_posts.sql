-- A property's codes on a channel (Channex: the channel's property id, currency and
-- the ids of its room types and rate plans), managed over the API with the channels
-- it is on (PUT /v1/properties/{id}/channels). NULL: none given; the worker's YAML
-- (channex.properties) is the fallback. Workers read them through a cache that
-- reloads when mapping_version moves, so a property mapped now is pushed without a
-- restart.
ALTER TABLE property_channels ADD COLUMN codes jsonb;
CREATE TABLE mapping_version (
    one     boolean PRIMARY KEY DEFAULT true CHECK (one),
    version bigint  NOT NULL
);
INSERT INTO mapping_version (version) VALUES (1);

-- Completion callbacks of webhook posts (POST /v1/changes?callback_url=): a post's
-- accepted changes, each awaiting an outcome in a burst smoother's batch. Intake's
-- delivery loop finds the posts whose every change has one (per family it spans)
-- and puts their event in the callbacks outbox, with the post's row marked done,
-- in one transaction; a post's event is queued once.
CREATE TABLE change_posts (
    event_id   text        PRIMARY KEY,
    tenant     text        NOT NULL,
    url        text        NOT NULL,
    body       jsonb       NOT NULL, -- the answer the post got: the callback carries it with the outcomes
    created_at timestamptz NOT NULL,
    done_at    timestamptz
);
CREATE INDEX change_posts_open ON change_posts (created_at) WHERE done_at IS NULL;
-- PrunePosts: posts (and their members) older than the outcomes' retention.
CREATE INDEX change_posts_created ON change_posts (created_at);
CREATE TABLE change_post_members (
    event_id    text     NOT NULL REFERENCES change_posts ON DELETE CASCADE,
    channel     smallint NOT NULL REFERENCES channels,
    mutation_id text     NOT NULL, -- as the smoother carries it: <tenant>:<id>
    families    smallint NOT NULL, -- how many endpoint families the change spans
    PRIMARY KEY (event_id, channel, mutation_id)
);
-- A post's event is not a batch's: its batch is NULL.
ALTER TABLE callbacks ALTER COLUMN batch DROP NOT NULL;
