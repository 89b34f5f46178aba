package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paritysync/paritysync/models"
)

// TestRecordSendingHoldsOneConnection: a worker's first push reads its request in a
// transaction and meets room rates it has not numbered yet. Numbering them takes a
// connection of its own; inside the transaction that would wait on the pool, and
// with every connection held by such a transaction the pool stalls until the
// deadline. On a pool of one connection, it completes.
func TestRecordSendingHoldsOneConnection(t *testing.T) {
	ctx := context.Background()
	url := testSchema(t)
	setup, err := Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer setup.Close()
	if err := setup.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	today := models.DateOf(time.Now())
	ms := make([]models.Mutation, 3)
	for i := range ms {
		ms[i] = price(fmt.Sprintf("p-%d", i), 2, "90", 0)
		ms[i].StayDate = today.AddDays(10 + i)
	}
	if _, err := setup.RecordDesired(ctx, ms); err != nil {
		t.Fatal(err)
	}
	req := requestOf(t, ms...)
	key, err := setup.SaveChunk(ctx, "pool", models.Chunk{Channel: req.Channel, Priority: req.Priority},
		[]models.ChannelRequest{req, req})
	if err != nil {
		t.Fatal(err)
	}

	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	fresh := New(pool) // no room rate cached
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	got, ahead, err := fresh.RecordSending(ctx, key, 0, nil, 1)
	if err != nil {
		t.Fatalf("RecordSending on a one-connection pool: %v", err)
	}
	if len(got.Lines) == 0 || len(ahead) != 1 {
		t.Fatalf("RecordSending read %d lines and %d requests ahead, want the request and 1 ahead", len(got.Lines), len(ahead))
	}
	sent := 0
	if err := fresh.SentVersions(ctx, req.Channel, today, func(SentVersion) error { sent++; return nil }); err != nil {
		t.Fatal(err)
	}
	if sent == 0 {
		t.Fatal("no sent version recorded")
	}
}
