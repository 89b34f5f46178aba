package models

// The burst smoother holds references, not payloads: a submit's changes are staged
// in PostgreSQL (the claim check) before the update, the update carries a
// SubmitRef, and the workflow keeps counts per priority. Every payload stays a few
// hundred bytes whatever the admission limit.

// SubmitRef is the argument of a submit update: Changes changes staged for the
// smoother's channel under Submission (store.StageChanges).
type SubmitRef struct {
	Submission string `json:"submission"`
	Changes    int    `json:"changes"`
}

// PriorityCounts counts changes by priority: index p holds those of priority p
// (PriorityUrgent … PriorityBulk); index 0 is unused.
type PriorityCounts [PriorityBulk + 1]int

// Total is the number of changes counted.
func (c PriorityCounts) Total() int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

// Through is the number of changes of priority at most p.
func (c PriorityCounts) Through(p int) int {
	n := 0
	for q := PriorityUrgent; q <= min(p, PriorityBulk); q++ {
		n += c[q]
	}
	return n
}

// MostUrgent is the smallest priority with a change, 0 when there is none.
func (c PriorityCounts) MostUrgent() int {
	for p := PriorityUrgent; p <= PriorityBulk; p++ {
		if c[p] > 0 {
			return p
		}
	}
	return 0
}

// ClampPriority is p within PriorityUrgent … PriorityBulk: where a change is
// counted whatever priority it claims.
func ClampPriority(p int) int { return min(max(p, PriorityUrgent), PriorityBulk) }

// AdmitInput asks AdmitChanges to admit the changes staged under Submission: they
// join the channel's waiting changes, in admission order.
type AdmitInput struct {
	Channel    string `json:"channel"`
	Submission string `json:"submission"`
}

// Admitted counts the changes an admission took, by priority; the same on a retry.
type Admitted struct {
	Changes PriorityCounts `json:"changes"`
}

// TakeInput asks TakeChanges to move the channel's oldest waiting changes of
// priority at most MaxPriority, Max of them at most, into batch BatchID's claim
// check.
type TakeInput struct {
	Channel     string `json:"channel"`
	BatchID     string `json:"batch_id"`
	MaxPriority int    `json:"max_priority"`
	Max         int    `json:"max"`
}

// Taken is what TakeChanges moved: the changes by priority and the key the
// BatchSync input carries (BatchSyncInput.PayloadKey); the same on a retry.
type Taken struct {
	Changes    PriorityCounts `json:"changes"`
	PayloadKey string         `json:"payload_key,omitempty"`
}

// CloseInput asks CloseBatch to give every update of batch BatchID still without an
// outcome the outcome cancelled, with Reason: the smoother's batch ended (failed,
// terminated, timed out) before it closed them.
type CloseInput struct {
	BatchID string `json:"batch_id"`
	Reason  string `json:"reason"`
}
