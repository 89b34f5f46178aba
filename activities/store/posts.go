package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Post is a webhook post (POST /v1/changes) that named a callback URL: Answer is
// the answer it got, Members its accepted changes, each awaiting its outcomes.
type Post struct {
	EventID string
	Tenant  string
	URL     string
	Answer  json.RawMessage
	Members []PostMember
}

// PostMember is one accepted change of a post on one channel, under the id the
// smoother carries (<tenant>:<id>), spanning Families endpoint families.
type PostMember struct {
	Channel    string
	MutationID string
	Families   int
}

// RegisterPost records p, whose callback QueuePostCallbacks queues once every
// member has an outcome. A post without members is complete at once.
func (s *Store) RegisterPost(ctx context.Context, p Post) error {
	slugs := make([]string, 0, 4)
	for _, m := range p.Members {
		slugs = append(slugs, m.Channel)
	}
	ids, err := s.channelIDs(ctx, slugs...)
	if err != nil {
		return fmt.Errorf("register post %s: %w", p.EventID, err)
	}
	chs := make([]int16, len(p.Members))
	muts := make([]string, len(p.Members))
	fams := make([]int16, len(p.Members))
	for i, m := range p.Members {
		chs[i], muts[i], fams[i] = ids[m.Channel], m.MutationID, int16(max(1, m.Families))
	}
	now := s.now()
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO change_posts (event_id, tenant, url, body, created_at) VALUES ($1, $2, $3, $4, $5)`,
			p.EventID, p.Tenant, p.URL, string(p.Answer), now); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `
INSERT INTO change_post_members (event_id, channel, mutation_id, families)
SELECT $1, * FROM unnest($2::smallint[], $3::text[], $4::smallint[]) ON CONFLICT DO NOTHING`, p.EventID, chs, muts, fams)
		return err
	})
	if err != nil {
		return fmt.Errorf("register post %s: %w", p.EventID, err)
	}
	return nil
}

// EventChangesCompleted is the type of a post's callback event.
const EventChangesCompleted = "changes.completed"

// PostCompleted is the body of a post's callback: the answer the post got and
// every outcome of its accepted changes, under the ids the PMS gave them.
type PostCompleted struct {
	EventID     string            `json:"event_id"`
	Type        string            `json:"type"`
	CompletedAt time.Time         `json:"completed_at"`
	Answer      json.RawMessage   `json:"answer"`
	Outcomes    []MutationOutcome `json:"outcomes"`
}

// QueuePostCallbacks puts in the callbacks outbox the event of up to n posts whose
// every accepted change has an outcome in a batch whose id starts with
// batchPrefix (one per family it spans, or one for the whole change), marking
// each post done in the same transaction: a post's event is queued once, and two
// intakes sweeping at once skip each other's posts. It returns how many it queued.
func (s *Store) QueuePostCallbacks(ctx context.Context, batchPrefix string, n int) (int, error) {
	queued := 0
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, `
SELECT p.event_id, p.tenant, p.url, p.body::text FROM change_posts p
WHERE p.done_at IS NULL AND NOT EXISTS (
	SELECT 1 FROM change_post_members m
	WHERE m.event_id = p.event_id AND NOT EXISTS (
		SELECT 1 FROM (SELECT count(DISTINCT o.family) AS fams, bool_or(o.family IS NULL) AS whole
			FROM outcomes o JOIN batches b ON b.id = o.batch
			WHERE o.mutation_id = m.mutation_id AND o.channel = m.channel AND starts_with(b.batch_id, $1)) k
		WHERE k.whole OR k.fams >= m.families))
ORDER BY p.created_at LIMIT $2
FOR UPDATE OF p SKIP LOCKED`, batchPrefix, n)
		type post struct{ id, tenant, url, body string }
		posts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (post, error) {
			var p post
			return p, r.Scan(&p.id, &p.tenant, &p.url, &p.body)
		})
		if err != nil {
			return err
		}
		now := s.now()
		for _, p := range posts {
			outs, err := postOutcomes(ctx, tx, batchPrefix, p.id)
			if err != nil {
				return err
			}
			for i := range outs {
				// The smoother's id is <tenant>:<id>; the PMS knows <id>.
				outs[i].MutationID = strings.TrimPrefix(outs[i].MutationID, p.tenant+":")
			}
			body, err := json.Marshal(PostCompleted{EventID: p.id, Type: EventChangesCompleted, CompletedAt: now.UTC(),
				Answer: json.RawMessage(p.body), Outcomes: outs})
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `
INSERT INTO callbacks (event_id, tenant, url, body, created_at, next_at) VALUES ($1, $2, $3, $4, $5, $5)
ON CONFLICT (event_id) DO NOTHING`, p.id, p.tenant, p.url, string(body), now); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE change_posts SET done_at = $2 WHERE event_id = $1`, p.id, now); err != nil {
				return err
			}
			queued++
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("queue post callbacks: %w", err)
	}
	return queued, nil
}

// postOutcomes is every outcome of post eventID's changes, by channel and id.
func postOutcomes(ctx context.Context, tx pgx.Tx, batchPrefix, eventID string) ([]MutationOutcome, error) {
	rows, _ := tx.Query(ctx, `
SELECT o.mutation_id, ch.slug, coalesce(o.family::text, ''), o.outcome::text, coalesce(o.reason, ''), o.recorded_at
FROM change_post_members m
JOIN outcomes o ON o.mutation_id = m.mutation_id AND o.channel = m.channel
JOIN batches b ON b.id = o.batch AND starts_with(b.batch_id, $1)
JOIN channels ch ON ch.id = m.channel
WHERE m.event_id = $2
ORDER BY ch.slug, o.mutation_id, o.recorded_at, o.family NULLS FIRST`, batchPrefix, eventID)
	out, err := scanMutationOutcomes(rows, []MutationOutcome{})
	if err != nil {
		return nil, fmt.Errorf("outcomes of post %s: %w", eventID, err)
	}
	return out, nil
}

// PrunePosts deletes the posts registered before olderThan, with their members
// and their delivered or given-up callbacks (a post's callback has no batch to
// cascade from); a post still waiting then would never complete, its changes'
// outcomes being pruned with their batches at the same age.
func (s *Store) PrunePosts(ctx context.Context, olderThan time.Time) (int64, error) {
	var n int64
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM change_posts WHERE created_at < $1`, olderThan)
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		_, err = tx.Exec(ctx, `DELETE FROM callbacks WHERE batch IS NULL AND created_at < $1
			AND (delivered_at IS NOT NULL OR failed_at IS NOT NULL)`, olderThan)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("prune posts: %w", err)
	}
	return n, nil
}
