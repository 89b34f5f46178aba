package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paritysync/paritysync/models"
)

// The burst smoothers' claim check (table smoother_changes): a submit's changes are
// staged before the update that hands them to the smoother, admitted by the
// smoother, and taken into a batch's payload when it flushes. The workflow holds
// their counts, never their content.

// StageChanges stages ms for channel's smoother under submission, in order; the
// submit update then carries only the submission (models.SubmitRef). Staging the
// same submission again replaces what was staged and not admitted.
func (s *Store) StageChanges(ctx context.Context, channel, submission string, ms []models.Mutation) error {
	ch, err := s.channelID(ctx, channel)
	if err != nil {
		return err
	}
	idx := make([]int32, len(ms))
	prio := make([]int16, len(ms))
	bodies := make([][]byte, len(ms))
	for i, m := range ms {
		b, err := json.Marshal(m)
		if err != nil {
			return fmt.Errorf("stage change %d of %s: %w", i, submission, err)
		}
		idx[i], prio[i], bodies[i] = int32(i), int16(models.ClampPriority(m.EffectivePriority())), b
	}
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM smoother_changes WHERE channel = $1 AND submission = $2 AND admitted IS NULL`,
			ch, submission); err != nil {
			return err
		}
		for len(idx) > 0 {
			n := min(rowsPerStatement, len(idx))
			if _, err := tx.Exec(ctx, `
INSERT INTO smoother_changes (channel, submission, idx, priority, staged_at, body)
SELECT $1, $2, i, p, $3, b FROM unnest($4::integer[], $5::smallint[], $6::bytea[]) AS k(i, p, b)
ON CONFLICT DO NOTHING`, ch, submission, s.now(), idx[:n], prio[:n], bodies[:n]); err != nil {
				return err
			}
			idx, prio, bodies = idx[n:], prio[n:], bodies[n:]
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("stage %d changes of %s for %s: %w", len(ms), submission, channel, err)
	}
	return nil
}

// DropStaged deletes what was staged under submission and never admitted: the
// smoother refused the submit. Admitted changes stay.
func (s *Store) DropStaged(ctx context.Context, channel, submission string) error {
	ch, err := s.channelID(ctx, channel)
	if err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM smoother_changes WHERE channel = $1 AND submission = $2 AND admitted IS NULL`,
		ch, submission); err != nil {
		return fmt.Errorf("drop staged %s: %w", submission, err)
	}
	return nil
}

// AdmitChanges admits what was staged under submission: its changes join the
// channel's waiting ones, after every change admitted before. It answers their
// counts by priority, the same on a retry (admitting twice changes nothing). The
// smoother admits one submission at a time and never while it takes, so what it
// counts is exactly what a take finds. O(changes of the submission).
func (s *Store) AdmitChanges(ctx context.Context, channel, submission string) (models.PriorityCounts, error) {
	var counts models.PriorityCounts
	ch, err := s.channelID(ctx, channel)
	if err != nil {
		return counts, err
	}
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		// One number for the whole submission (an InitPlan, drawn once); its
		// changes keep their order by idx.
		if _, err := tx.Exec(ctx, `
UPDATE smoother_changes SET admitted = (SELECT nextval('smoother_admissions'))
WHERE channel = $1 AND submission = $2 AND admitted IS NULL`, ch, submission); err != nil {
			return err
		}
		rows, _ := tx.Query(ctx, `
SELECT priority, count(*) FROM smoother_changes WHERE channel = $1 AND submission = $2 GROUP BY 1`, ch, submission)
		var p int16
		var n int
		_, err := pgx.ForEachRow(rows, []any{&p, &n}, func() error {
			counts[models.ClampPriority(int(p))] += n
			return nil
		})
		return err
	})
	if err != nil {
		return counts, fmt.Errorf("admit %s for %s: %w", submission, channel, err)
	}
	return counts, nil
}

// WaitingChanges counts channel's admitted changes still waiting, by priority: a
// smoother started afresh (after its predecessor was terminated, say) takes on
// what that one admitted and never took. O(waiting changes), by index.
func (s *Store) WaitingChanges(ctx context.Context, channel string) (models.PriorityCounts, error) {
	var counts models.PriorityCounts
	ch, err := s.channelID(ctx, channel)
	if err != nil {
		return counts, err
	}
	rows, _ := s.pool.Query(ctx, `
SELECT priority, count(*) FROM smoother_changes WHERE channel = $1 AND admitted IS NOT NULL GROUP BY 1`, ch)
	var p int16
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&p, &n}, func() error {
		counts[models.ClampPriority(int(p))] += n
		return nil
	}); err != nil {
		return counts, fmt.Errorf("waiting changes of %s: %w", channel, err)
	}
	return counts, nil
}

// TakeChanges moves channel's oldest admitted changes of priority at most
// maxPriority, max of them at most, into the payload of batch batchID (the claim
// check BatchSync loads) and returns their counts by priority and the payload key.
// A retry answers what the first attempt took. O(max × priorities): one index
// range per priority.
func (s *Store) TakeChanges(ctx context.Context, channel, batchID string, maxPriority, max int) (models.Taken, error) {
	var out models.Taken
	ch, err := s.channelID(ctx, channel)
	if err != nil {
		return out, err
	}
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		// Two attempts of one take (a timed-out one still running) never both move.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('paritysync.smoother:' || $1::text, 0))`,
			channel); err != nil {
			return err
		}
		var payload []byte
		err := tx.QueryRow(ctx, `SELECT payload FROM batches WHERE batch_id = $1`, batchID).Scan(&payload)
		if err == nil && payload != nil {
			var ms []models.Mutation
			if err := inflate(payload, &ms); err != nil {
				return fmt.Errorf("decode batch: %w", err)
			}
			for _, m := range ms {
				out.Changes[models.ClampPriority(m.EffectivePriority())]++
			}
			return nil
		}
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		rows, _ := tx.Query(ctx, `
SELECT submission, idx, priority, body FROM generate_series(1, $2::integer) AS p(priority)
CROSS JOIN LATERAL (
	SELECT submission, idx, admitted, body FROM smoother_changes c
	WHERE c.channel = $1 AND c.priority = p.priority AND c.admitted IS NOT NULL
	ORDER BY c.admitted, c.idx LIMIT $3) c
ORDER BY admitted, idx LIMIT $3`, ch, models.ClampPriority(maxPriority), max)
		var subs []string
		var idx []int32
		var sub string
		var i int32
		var p int16
		var body []byte
		var buf bytes.Buffer
		buf.WriteByte('[')
		if _, err := pgx.ForEachRow(rows, []any{&sub, &i, &p, &body}, func() error {
			if len(idx) > 0 {
				buf.WriteByte(',')
			}
			buf.Write(body)
			subs, idx = append(subs, sub), append(idx, i)
			out.Changes[models.ClampPriority(int(p))]++
			return nil
		}); err != nil {
			return err
		}
		buf.WriteByte(']')
		if len(idx) == 0 {
			return nil
		}
		if _, err := tx.Exec(ctx, `
DELETE FROM smoother_changes WHERE channel = $1 AND (submission, idx) IN (SELECT * FROM unnest($2::text[], $3::integer[]))`,
			ch, subs, idx); err != nil {
			return err
		}
		packed, err := deflate(json.RawMessage(buf.Bytes()))
		if err != nil {
			return fmt.Errorf("encode batch: %w", err)
		}
		if _, err := tx.Exec(ctx, `
INSERT INTO batches (batch_id, mutations, payload, created_at) VALUES ($1, $2, $3, $4)
ON CONFLICT (batch_id) DO UPDATE SET mutations = excluded.mutations, payload = excluded.payload`,
			batchID, len(idx), packed, s.now()); err != nil {
			return err
		}
		out.PayloadKey = models.BatchWorkflowID(batchID)
		return nil
	})
	if err != nil {
		return models.Taken{}, fmt.Errorf("take changes of %s into %s: %w", channel, batchID, err)
	}
	if out.Changes.Total() > 0 {
		out.PayloadKey = models.BatchWorkflowID(batchID)
	}
	return out, nil
}

// ClosePending gives every update of batch batchID still without an outcome the
// outcome cancelled, with reason: the updates of its payload (when PrepareBatch
// never finished, they have none) and of its stored requests (CancelPending). An
// update with an outcome keeps it, and a mutation rejected whole gets no other, so
// each update ends with exactly one. It returns how many it closed, the same count
// of cancelled outcomes on a retry. The smoother calls it when a batch it started
// failed, was terminated or timed out.
func (s *Store) ClosePending(ctx context.Context, batchID, reason string) (int, error) {
	ms, err := s.LoadBatch(ctx, models.BatchWorkflowID(batchID))
	if err != nil && !errors.Is(err, ErrBatchNotFound) {
		return 0, err
	}
	closed := 0
	if len(ms) > 0 {
		ids := make([]string, len(ms))
		for i := range ms {
			// The ids PrepareBatch gives, so the outcomes meet those it recorded.
			ms[i].ApplyDefaults(func() string { return batchID + "#" + strconv.Itoa(i) })
			ids[i] = ms[i].ID
		}
		batch, err := s.batchRef(ctx, batchID)
		if err != nil {
			return 0, err
		}
		rows, _ := s.pool.Query(ctx, `
SELECT mutation_id FROM outcomes WHERE batch = $1 AND mutation_id = ANY($2) AND family IS NULL`, batch, ids)
		whole := map[string]bool{}
		var id string
		if _, err := pgx.ForEachRow(rows, []any{&id}, func() error {
			whole[id] = true
			return nil
		}); err != nil {
			return 0, fmt.Errorf("close %s: %w", batchID, err)
		}
		var pending []MutationOutcome
		for _, m := range ms {
			if whole[m.ID] {
				continue
			}
			fams := m.Families()
			if len(fams) == 0 {
				pending = append(pending, MutationOutcome{MutationID: m.ID, Channel: m.Channel,
					Outcome: models.OutcomeCancelled, Reason: reason})
			}
			for _, f := range fams {
				pending = append(pending, MutationOutcome{MutationID: m.ID, Channel: m.Channel, Family: f,
					Outcome: models.OutcomeCancelled, Reason: reason})
			}
		}
		counts, err := s.RecordOutcomes(ctx, batchID, pending)
		if err != nil {
			return 0, err
		}
		closed = counts[models.OutcomeCancelled]
	}
	n, err := s.CancelPending(ctx, batchID, reason)
	if err != nil {
		return closed, err
	}
	return max(closed, n), nil
}

// PruneStaged deletes staged changes never admitted and staged before olderThan:
// a submit the smoother refused or never received. O(rows deleted), by index.
func (s *Store) PruneStaged(ctx context.Context, olderThan time.Time) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM smoother_changes WHERE admitted IS NULL AND staged_at < $1`, olderThan)
	if err != nil {
		return 0, fmt.Errorf("prune staged changes: %w", err)
	}
	return tag.RowsAffected(), nil
}
