-- Which channels each property is on: a mutation for channel "*" goes to every one
-- of them (intake fans it out). Managed over the API (PUT /v1/properties/{id}/channels),
-- read per request, so a property mapped now is pushed without a restart.
CREATE TABLE property_channels (
    property_id text        NOT NULL,
    channel     smallint    NOT NULL REFERENCES channels,
    updated_at  timestamptz NOT NULL,
    PRIMARY KEY (property_id, channel)
);
