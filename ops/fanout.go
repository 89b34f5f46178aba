package ops

import (
	"context"
	"slices"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/models"
)

// tooLongWithSuffix reports whether a valid id would pass the id length with one
// of the channel suffixes (an invalid id is the validator's to reject).
func tooLongWithSuffix(id string, chs []string) bool {
	if !models.ValidMutationID(id) {
		return false
	}
	for _, ch := range chs {
		if len(id)+1+len(ch) > models.MaxMutationIDLength {
			return true
		}
	}
	return false
}

// AllChannels is the channel of a mutation meant for every channel its property
// is on; a mutation without a channel means the same.
const AllChannels = "*"

// EveryChannel reports whether m is meant for every channel its property is on:
// channel "*", or no channel (a row without a property is left to the validator,
// which names both fields).
func EveryChannel(m models.Mutation) bool {
	return m.Channel == AllChannels || m.Channel == "" && m.PropertyID != ""
}

// NeedsFanOut reports whether a mutation of ms is meant for every channel its
// property is on (EveryChannel), so FanOut has work and reads the store.
func NeedsFanOut(ms []models.Mutation) bool {
	return slices.ContainsFunc(ms, EveryChannel)
}

// Rules of a fanned-out mutation, as a rejection names them.
const (
	RuleNoMappedChannel = `the property is on no channel (PUT /v1/properties/{id}/channels maps it); "*" needs one`
	RuleFanOutID        = `with "@<channel>" appended (one id per channel of "*") must keep to the id rule: at most 128 characters`
)

// FanOut replaces every mutation of d for channel "*" (or without a channel) with one per channel its
// property is on (store.PropertyChannels, read now: a property mapped a moment ago
// counts), each under the id <id>@<channel> so every channel's outcome is reported
// apart. A property on no channel, or an id too long to carry the suffix, makes the
// row a problem on field channel or id. d's other rows are untouched.
func FanOut(ctx context.Context, st *store.Store, d models.Decoded) (models.Decoded, error) {
	var props []string
	for _, m := range d.Mutations {
		if EveryChannel(m) {
			props = append(props, m.PropertyID)
		}
	}
	mapped := map[string][]string{}
	if len(props) == 0 {
		return d, nil
	}
	if st != nil { // without a store no property is mapped
		var err error
		if mapped, err = st.PropertyChannels(ctx, props); err != nil {
			return d, err
		}
	}
	out := d
	out.Mutations, out.Lines, out.Indexes = nil, nil, nil
	out.Problems = nil
	next := 0
	for i, m := range d.Mutations {
		for next < len(d.Problems) && d.Problems[next].Index < d.Indexes[i] {
			out.Problems = append(out.Problems, d.Problems[next])
			next++
		}
		if !EveryChannel(m) {
			out.Mutations, out.Lines, out.Indexes = append(out.Mutations, m), append(out.Lines, d.Lines[i]), append(out.Indexes, d.Indexes[i])
			continue
		}
		chs := mapped[m.PropertyID]
		if len(chs) == 0 {
			out.Problems = append(out.Problems, models.RowProblem{Line: d.Lines[i], Index: d.Indexes[i], ID: m.ID,
				Field: "channel", Rule: RuleNoMappedChannel})
			continue
		}
		if tooLongWithSuffix(m.ID, chs) {
			out.Problems = append(out.Problems, models.RowProblem{Line: d.Lines[i], Index: d.Indexes[i], ID: m.ID,
				Field: "id", Rule: RuleFanOutID})
			continue
		}
		for _, ch := range chs {
			fm := m
			fm.Channel = ch
			if m.ID != "" {
				fm.ID = m.ID + "@" + ch
			}
			out.Mutations, out.Lines, out.Indexes = append(out.Mutations, fm), append(out.Lines, d.Lines[i]), append(out.Indexes, d.Indexes[i])
		}
	}
	out.Problems = append(out.Problems, d.Problems[next:]...)
	return out, nil
}

// FanOutMutations is FanOut over ms read as rows 1 to len(ms): the mutations
// fanned out, and the rows that could not be (Index is the row's index in ms).
func FanOutMutations(ctx context.Context, st *store.Store, ms []models.Mutation) ([]models.Mutation, []models.RowProblem, error) {
	in := models.Decoded{Mutations: ms, Rows: len(ms)}
	for i := range ms {
		in.Lines, in.Indexes = append(in.Lines, i+1), append(in.Indexes, i)
	}
	out, err := FanOut(ctx, st, in)
	return out.Mutations, out.Problems, err
}
