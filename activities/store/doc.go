// Package store is paritysync's system of record in PostgreSQL: per cell and
// endpoint family the desired state (what the PMS asked for), the newest version
// sent and the acknowledged state (what the channel confirmed); per-mutation
// outcomes; replayable dead letters; and the payloads of running batches, so that
// losing Redis loses nothing but limiter state.
//
// The worker opens it with Open(ctx, settings.DatabaseURL) and calls Migrate at
// start. Every method is idempotent, so a retried activity records nothing twice,
// and every method's comment names its caller. README.md describes the tables, their
// owners and retention, and what a PostgreSQL loss costs.
package store
