package models

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// ChannelRequest is one HTTP call to a channel: one property, one endpoint family,
// many date-range lines.
type ChannelRequest struct {
	Channel    string        `json:"channel"`
	PropertyID string        `json:"property_id"`
	Family     Family        `json:"family"`
	Priority   int           `json:"priority"`
	Lines      []ARILine     `json:"lines"`
	Refs       []MutationRef `json:"refs"`
	// KeySalt, when set, is mixed into the idempotency key. A deliberate re-send of
	// content the channel already acknowledged (a reconciliation repair) needs a new
	// key, or the channel would replay its first answer instead of applying it.
	KeySalt string `json:"key_salt,omitempty"`
}

// MutationRef ties a mutation (the part of it in this request's family) to the line
// that carries it.
type MutationRef struct {
	ID            string `json:"id"`
	Version       int64  `json:"version"`
	Line          int    `json:"line"`
	StayDate      Date   `json:"stay_date"`
	CorrelationID string `json:"correlation_id,omitempty"`
	// Nights is set on a night of a range mutation: how many nights the range has.
	// Its outcome is recorded once all of them ended (store.foldRanges).
	Nights int `json:"nights,omitempty"`
}

// Cost is what the request takes from a budget counted in lines.
func (r ChannelRequest) Cost() int { return len(r.Lines) }

// Body is the wire body of the request.
func (r ChannelRequest) Body() ARIRequest {
	return ARIRequest{PropertyID: r.PropertyID, Family: r.Family, Lines: r.Lines}
}

// IdempotencyKey is the SHA-256 hex of the request's canonical content: channel,
// wire body and KeySalt when set. encoding/json writes struct fields in declaration
// order and decimals as their exact string, so the key is the same in every process
// and Go version.
func (r ChannelRequest) IdempotencyKey() string {
	body, err := json.Marshal(struct {
		Channel string     `json:"channel"`
		Body    ARIRequest `json:"body"`
		Salt    string     `json:"salt,omitempty"`
	}{r.Channel, r.Body(), r.KeySalt})
	if err != nil {
		// Only unsupported types fail to marshal, and the body has none.
		panic("models: marshal channel request: " + err.Error())
	}
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

// LineNight is one stay date of one line (0-based index) of a request.
type LineNight struct {
	Line int  `json:"line"`
	Date Date `json:"date"`
}

// WithoutNights is r without the given nights: a line losing some of its nights is
// split into the runs that remain (a line with Days into runs of its days), and the
// refs of dropped nights are returned apart (their outcome is superseded). The refs
// left point at the lines that now carry their nights.
func (r ChannelRequest) WithoutNights(drop []LineNight) (ChannelRequest, []MutationRef) {
	if len(drop) == 0 {
		return r, nil
	}
	gone := make(map[LineNight]bool, len(drop))
	for _, n := range drop {
		gone[n] = true
	}
	out := r
	out.Lines, out.Refs = nil, nil
	// newLine[old line][night] is the index of the new line carrying that night.
	newLine := make([]map[Date]int, len(r.Lines))
	for i, l := range r.Lines {
		newLine[i] = map[Date]int{}
		if !l.Days.IsZero() && !losesNights(l, i, gone) {
			for d := l.From; !d.After(l.To); d = d.AddDays(1) {
				newLine[i][d] = len(out.Lines)
			}
			out.Lines = append(out.Lines, l)
			continue
		}
		start := -1
		for d := l.From; !d.After(l.To); d = d.AddDays(1) {
			if gone[LineNight{i, d}] || !l.Covers(d) {
				start = -1
				continue
			}
			if start < 0 {
				nl := l
				nl.From, nl.To, nl.Days = d, d, 0
				out.Lines = append(out.Lines, nl)
				start = len(out.Lines) - 1
			} else {
				out.Lines[start].To = d
			}
			newLine[i][d] = start
		}
	}
	var dropped []MutationRef
	for _, ref := range r.Refs {
		if ref.Line < 0 || ref.Line >= len(r.Lines) {
			continue
		}
		n, ok := newLine[ref.Line][ref.StayDate]
		if !ok {
			dropped = append(dropped, ref)
			continue
		}
		ref.Line = n
		out.Refs = append(out.Refs, ref)
	}
	return out, dropped
}

// losesNights reports whether gone drops a night line i sets.
func losesNights(l ARILine, i int, gone map[LineNight]bool) bool {
	for n := range gone {
		if n.Line == i && l.Covers(n.Date) {
			return true
		}
	}
	return false
}
