package models

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/shopspring/decimal"
)

// Defaults of DecodeLimits.
const (
	DefaultMaxLineBytes = 1 << 20
	DefaultMaxMutations = 100_000
	// MaxAmountChars bounds the amount string: a price needs at most 8 whole digits
	// and a few places, and parsing an unbounded digit string costs quadratic time.
	MaxAmountChars = 32
)

// Rules of DecodeMutations, in the vocabulary of Validate. Body rules refuse the whole
// body (BodyError); the others refuse one row (RowProblem).
const (
	RuleBodyEmpty        = "must hold at least one mutation"
	RuleBodyUTF8         = "must be UTF-8"
	RuleBodyJSON         = "must be valid JSON"
	RuleBodyShape        = "must be a JSON array of mutations or JSON lines of mutations"
	RuleBodyTrailing     = "must end after the JSON array"
	RuleOneValuePerLine  = "must hold one JSON value per line"
	RuleTooManyMutations = "must hold at most the limit of mutations per body"

	RuleJSONObject   = "must be a JSON object"
	RuleJSONString   = "must be a JSON string"
	RuleJSONInteger  = "must be a JSON integer"
	RuleJSONBoolean  = "must be true or false"
	RuleIntegerRange = "must fit a signed 64-bit integer"
	RuleUnknownField = "is not a field of a mutation"
	RuleDuplicateKey = "must appear at most once in a mutation"
	RuleUniqueID     = "must be unique within the body"
	RuleRowTooLong   = "must not be longer than the row size limit"
	RuleDate         = "must be a date YYYY-MM-DD"
	RuleAmountFormat = `must be a decimal string such as "129.90": digits, an optional fraction, at most 32 characters`
	RuleIDFormat     = "must be 1-128 characters of [A-Za-z0-9._:@~-], starting with a letter or digit"
)

// DecodeLimits bounds what one body may hold; a zero field takes its default.
type DecodeLimits struct {
	// MaxLineBytes bounds one row: a line of JSON lines, an element of an array.
	// A longer row is refused unread. Default DefaultMaxLineBytes (1 MiB).
	MaxLineBytes int
	// MaxMutations bounds the rows of a body, refused ones included; a body with more
	// is refused whole. Default DefaultMaxMutations.
	MaxMutations int
}

func (l DecodeLimits) withDefaults() DecodeLimits {
	if l.MaxLineBytes <= 0 {
		l.MaxLineBytes = DefaultMaxLineBytes
	}
	if l.MaxMutations <= 0 {
		l.MaxMutations = DefaultMaxMutations
	}
	return l
}

// Decoded is a body split into the rows that decoded cleanly and the rows refused.
// Every row ends in exactly one of the two: Rows == len(Mutations) + the number of
// distinct Index values in Problems.
type Decoded struct {
	// Mutations are the rows that decoded cleanly, in body order; Lines and Indexes
	// run parallel to them.
	Mutations []Mutation
	// Lines is the 1-based line on which each mutation starts.
	Lines []int
	// Indexes is each mutation's 0-based position among the rows of the body.
	Indexes []int
	// Problems lists every problem of every refused row, in body order; a row refused
	// for two reasons appears twice with the same Index.
	Problems []RowProblem
	// Rows is how many rows the body holds (blank lines are not rows).
	Rows int
}

// RowProblem is one reason one row was refused. Field is the json name of the field
// (FieldMutation for the row as a whole) and Rule one of the Rule constants, so the
// PMS can match on them; Detail says what was found, for people.
type RowProblem struct {
	Line   int    `json:"line"`
	Index  int    `json:"index"`
	ID     string `json:"id,omitempty"`
	Field  string `json:"field"`
	Rule   string `json:"rule"`
	Detail string `json:"detail,omitempty"`
}

// Error is "line N: detail", or "line N: field: rule" without a detail.
func (p RowProblem) Error() string {
	if p.Detail != "" {
		return fmt.Sprintf("line %d: %s", p.Line, p.Detail)
	}
	return fmt.Sprintf("line %d: %s: %s", p.Line, p.Field, p.Rule)
}

// BodyError says the body as a whole cannot be read, so nothing in it may be started.
// Line is 1-based, 0 when the problem is not on one line (an empty body).
type BodyError struct {
	Line   int    `json:"line,omitempty"`
	Rule   string `json:"rule"`
	Detail string `json:"detail,omitempty"`
}

// Error is "line N: detail" ("detail" alone when Line is 0).
func (e *BodyError) Error() string {
	msg := e.Detail
	if msg == "" {
		msg = "body " + e.Rule
	}
	if e.Line == 0 {
		return msg
	}
	return fmt.Sprintf("line %d: %s", e.Line, msg)
}

var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// DecodeMutations reads a body of mutations: a JSON array, or JSON lines (one object
// per line; blank lines skipped). The first character that is not white space says
// which: '[' an array, '{' JSON lines, anything else is refused. A UTF-8 byte order
// mark at the start is dropped; CRLF line ends are white space.
//
// A body that cannot be read as a whole is a *BodyError and nothing of it is
// returned: not UTF-8, a JSON syntax error (a cut-off upload looks like one, so no
// part of it may be started), data after the array, two values on one line, more
// rows than lim.MaxMutations, no row at all. Otherwise each row is decoded on its
// own and strictly: a row that is not an object, has an unknown or repeated field, a
// field of the wrong JSON type, an id used by an earlier row, or is longer than
// lim.MaxLineBytes is refused in Problems and the other rows are kept. A null field
// is a wrong type: leave a field out to leave it unchanged.
//
// The values themselves (codes, ranges, currencies, dates against today) are
// Validator.Validate's; Validator.Check runs both.
func DecodeMutations(body []byte, lim DecodeLimits) (Decoded, error) {
	d := decoder{lim: lim.withDefaults(), ids: map[string][2]int{}}
	body = bytes.TrimPrefix(body, utf8BOM)
	d.lines = lineCounter{body: body, line: 1}
	if at := invalidUTF8(body); at >= 0 {
		return Decoded{}, &BodyError{Line: d.lines.at(at), Rule: RuleBodyUTF8,
			Detail: fmt.Sprintf("byte 0x%02x is not UTF-8", body[at])}
	}
	start := skipSpace(body, 0)
	if start == len(body) {
		return Decoded{}, &BodyError{Rule: RuleBodyEmpty, Detail: "no mutations"}
	}
	var err error
	switch body[start] {
	case '[':
		err = d.array(body)
	case '{':
		err = d.jsonLines(body)
	default:
		err = &BodyError{Line: d.lines.at(start), Rule: RuleBodyShape,
			Detail: fmt.Sprintf("want a JSON array or JSON lines of objects, got %s", kindOf(body[start:]))}
	}
	if err != nil {
		return Decoded{}, err
	}
	if d.out.Rows == 0 {
		return Decoded{}, &BodyError{Rule: RuleBodyEmpty, Detail: "no mutations"}
	}
	return d.out, nil
}

type decoder struct {
	lim   DecodeLimits
	lines lineCounter
	ids   map[string][2]int // id → line and index of its first row
	out   Decoded
}

// array decodes every element into raw bytes first, so a syntax error anywhere
// refuses the body while a bad element refuses only itself.
func (d *decoder) array(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if _, err := dec.Token(); err != nil {
		return d.syntax(body, err, dec)
	}
	for dec.More() {
		// The decoder stops before the comma; the element starts after it.
		start := skipSpaceAndCommas(body, int(dec.InputOffset()))
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return d.syntax(body, err, dec)
		}
		line := d.lines.at(start)
		if err := d.row(raw, line); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		return d.syntax(body, err, dec)
	}
	if at := skipSpace(body, int(dec.InputOffset())); at < len(body) {
		return &BodyError{Line: d.lines.at(at), Rule: RuleBodyTrailing,
			Detail: fmt.Sprintf("data after the JSON array: %s", snippet(body[at:]))}
	}
	return nil
}

func (d *decoder) jsonLines(body []byte) error {
	for line, off := 1, 0; off < len(body); line++ {
		end := len(body)
		if i := bytes.IndexByte(body[off:], '\n'); i >= 0 {
			end = off + i
		}
		text := bytes.Trim(body[off:end], " \t\r")
		off = end + 1
		if len(text) == 0 {
			continue
		}
		if len(text) > d.lim.MaxLineBytes {
			if err := d.row(text, line); err != nil {
				return err
			}
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(text))
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return &BodyError{Line: line, Rule: RuleBodyJSON, Detail: jsonDetail(err)}
		}
		if skipSpace(text, int(dec.InputOffset())) < len(text) {
			return &BodyError{Line: line, Rule: RuleOneValuePerLine, Detail: "more than one JSON value on the line"}
		}
		if err := d.row(raw, line); err != nil {
			return err
		}
	}
	return nil
}

// row decodes one row into Mutations or Problems; it fails only when the body has
// more rows than allowed.
func (d *decoder) row(raw []byte, line int) error {
	index := d.out.Rows
	if index >= d.lim.MaxMutations {
		return &BodyError{Line: line, Rule: RuleTooManyMutations,
			Detail: fmt.Sprintf("more than %d mutations", d.lim.MaxMutations)}
	}
	d.out.Rows++
	var m Mutation
	var id string
	var probs []fieldProblem
	if len(raw) > d.lim.MaxLineBytes {
		probs = []fieldProblem{{FieldMutation, RuleRowTooLong,
			fmt.Sprintf("row of %d bytes, more than the %d allowed", len(raw), d.lim.MaxLineBytes)}}
	} else {
		m, id, probs = decodeRow(raw)
	}
	if id != "" {
		if first, dup := d.ids[id]; dup {
			probs = append(probs, fieldProblem{"id", RuleUniqueID,
				fmt.Sprintf("id %q is already used by the row at index %d, line %d", id, first[1], first[0])})
		} else {
			d.ids[id] = [2]int{line, index}
		}
	}
	for _, p := range probs {
		d.out.Problems = append(d.out.Problems, RowProblem{Line: line, Index: index, ID: id,
			Field: p.field, Rule: p.rule, Detail: p.detail})
	}
	if len(probs) == 0 {
		d.out.Mutations = append(d.out.Mutations, m)
		d.out.Lines = append(d.out.Lines, line)
		d.out.Indexes = append(d.out.Indexes, index)
	}
	return nil
}

func (d *decoder) syntax(body []byte, err error, dec *json.Decoder) error {
	at := len(body) - 1
	var se *json.SyntaxError
	if errors.As(err, &se) {
		// Offset counts the offending byte itself.
		at = int(se.Offset) - 1
	} else if !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		at = int(dec.InputOffset())
	}
	at = min(max(at, 0), len(body)-1)
	return &BodyError{Line: d.lines.at(at), Rule: RuleBodyJSON, Detail: jsonDetail(err)}
}

func jsonDetail(err error) string {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return "unexpected end of JSON input"
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

type fieldProblem struct{ field, rule, detail string }

// decodeRow decodes one syntactically valid JSON value as a mutation, reporting every
// problem of the row; id is the row's id when it is readable, even from a refused row.
func decodeRow(raw []byte) (m Mutation, id string, probs []fieldProblem) {
	if len(raw) == 0 || raw[0] != '{' {
		return m, "", []fieldProblem{{FieldMutation, RuleJSONObject, "want a JSON object, got " + kindOf(raw)}}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil {
		return m, "", []fieldProblem{{FieldMutation, RuleJSONObject, jsonDetail(err)}}
	}
	seen := make([]bool, len(mutationFields))
	idSet := false
	for dec.More() {
		tok, err := dec.Token()
		key, ok := tok.(string)
		var v json.RawMessage
		if err == nil && ok {
			err = dec.Decode(&v)
		}
		if err != nil || !ok {
			// raw has passed a JSON decoder already; this is only a safety net.
			return m, id, append(probs, fieldProblem{FieldMutation, RuleJSONObject, "unreadable object"})
		}
		i, known := fieldIndex[key]
		switch {
		case !known:
			probs = append(probs, fieldProblem{key, RuleUnknownField, fmt.Sprintf("unknown field %q", key)})
		case seen[i]:
			probs = append(probs, fieldProblem{key, RuleDuplicateKey, fmt.Sprintf("field %q appears more than once", key)})
		default:
			seen[i] = true
			if p := mutationFields[i].set(&m, key, v); p != nil {
				probs = append(probs, *p)
			} else if key == "id" {
				idSet = true
			}
		}
	}
	if idSet {
		id = m.ID
	}
	return m, id, probs
}

// mutationField is one json field of Mutation with its strict decoder; set gets the
// field's name for its messages.
type mutationField struct {
	name string
	set  func(m *Mutation, field string, v []byte) *fieldProblem
}

// MutationFields lists the json names of a mutation's fields in wire order; a body
// with any other field is refused (RuleUnknownField).
func MutationFields() []string {
	names := make([]string, len(mutationFields))
	for i, f := range mutationFields {
		names[i] = f.name
	}
	return names
}

var mutationFields = []mutationField{
	{"id", func(m *Mutation, field string, v []byte) *fieldProblem {
		s, p := jsonString(field, v)
		if p == nil && s != "" && !ValidMutationID(s) {
			// Neither kept nor echoed: an id off the rule could be a megabyte, and it
			// would travel into answers, workflows and the outcomes index.
			return &fieldProblem{field, RuleIDFormat, fmt.Sprintf("id of %d bytes off the rule", len(s))}
		}
		if p == nil {
			m.ID = s
		}
		return p
	}},
	{"property_id", stringField(func(m *Mutation, s string) { m.PropertyID = s })},
	{"room_type_code", stringField(func(m *Mutation, s string) { m.RoomTypeCode = s })},
	{"rate_plan_code", stringField(func(m *Mutation, s string) { m.RatePlanCode = s })},
	{"channel", stringField(func(m *Mutation, s string) { m.Channel = s })},
	{"stay_date", setDate(func(m *Mutation, d Date) { m.StayDate = d })},
	{"from", setDate(func(m *Mutation, d Date) { m.From = d })},
	{"to", setDate(func(m *Mutation, d Date) { m.To = d })},
	{"days", setDays},
	{"amount", setAmount},
	{"currency", stringField(func(m *Mutation, s string) { m.Currency = s })},
	{"inventory", intField(func(m *Mutation, n int) { m.Inventory = &n })},
	{"stop_sell", boolField(func(m *Mutation, b bool) { m.StopSell = &b })},
	{"min_los", intField(func(m *Mutation, n int) { m.MinLOS = &n })},
	{"max_los", intField(func(m *Mutation, n int) { m.MaxLOS = &n })},
	{"cta", boolField(func(m *Mutation, b bool) { m.CTA = &b })},
	{"ctd", boolField(func(m *Mutation, b bool) { m.CTD = &b })},
	{"version", func(m *Mutation, field string, v []byte) *fieldProblem {
		n, p := jsonInteger(field, v)
		m.Version = n
		return p
	}},
	{"priority", intField(func(m *Mutation, n int) { m.Priority = n })},
	{"full_sync", boolField(func(m *Mutation, b bool) { m.FullSync = b })},
	{"correlation_id", stringField(func(m *Mutation, s string) { m.CorrelationID = s })},
}

var fieldIndex = func() map[string]int {
	idx := make(map[string]int, len(mutationFields))
	for i, f := range mutationFields {
		idx[f.name] = i
	}
	return idx
}()

func wrongType(field, want string, v []byte, rule string) *fieldProblem {
	return &fieldProblem{field, rule, fmt.Sprintf("field %s: want %s, got %s", field, want, kindOf(v))}
}

func jsonString(field string, v []byte) (string, *fieldProblem) {
	var s string
	if len(v) == 0 || v[0] != '"' || json.Unmarshal(v, &s) != nil {
		return "", wrongType(field, "string", v, RuleJSONString)
	}
	return s, nil
}

func stringField(set func(m *Mutation, s string)) func(*Mutation, string, []byte) *fieldProblem {
	return func(m *Mutation, field string, v []byte) *fieldProblem {
		s, p := jsonString(field, v)
		if p == nil {
			set(m, s)
		}
		return p
	}
}

func boolField(set func(m *Mutation, b bool)) func(*Mutation, string, []byte) *fieldProblem {
	return func(m *Mutation, field string, v []byte) *fieldProblem {
		switch string(v) {
		case "true":
			set(m, true)
		case "false":
			set(m, false)
		default:
			return wrongType(field, "boolean", v, RuleJSONBoolean)
		}
		return nil
	}
}

func intField(set func(m *Mutation, n int)) func(*Mutation, string, []byte) *fieldProblem {
	return func(m *Mutation, field string, v []byte) *fieldProblem {
		n, p := jsonInteger(field, v)
		if p == nil && int64(int(n)) != n {
			p = &fieldProblem{field, RuleIntegerRange, fmt.Sprintf("field %s: %s does not fit an int", field, v)}
		}
		if p == nil {
			set(m, int(n))
		}
		return p
	}
}

// jsonInteger reads a JSON number whose value is whole, as JSON Schema's "integer"
// does: 3, 3.0 and 3e2 are integers, 3.5 is not.
func jsonInteger(field string, v []byte) (int64, *fieldProblem) {
	if kindOf(v) != "number" {
		return 0, wrongType(field, "integer", v, RuleJSONInteger)
	}
	n, whole, fits := integerValue(string(v))
	switch {
	case !whole:
		return 0, &fieldProblem{field, RuleJSONInteger, fmt.Sprintf("field %s: want integer, got %s", field, snippet(v))}
	case !fits:
		return 0, &fieldProblem{field, RuleIntegerRange, fmt.Sprintf("field %s: %s does not fit a signed 64-bit integer", field, snippet(v))}
	}
	return n, nil
}

// integerValue reads a JSON number literal exactly, without floating point: whole
// says its value has no fraction, fits that it is within int64. A literal is at most
// a row long, so the digit counts below cannot overflow.
func integerValue(lit string) (n int64, whole, fits bool) {
	sign, s := "", lit
	if strings.HasPrefix(s, "-") {
		sign, s = "-", s[1:]
	}
	mant, exp := s, int64(0)
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant = s[:i]
		e, err := strconv.ParseInt(strings.TrimPrefix(s[i+1:], "+"), 10, 64)
		if err != nil || e > 1<<40 || e < -(1<<40) {
			// An exponent this large leaves zero, a huge number or a tiny fraction.
			switch {
			case strings.Trim(mant, "0.") == "":
				return 0, true, true
			case strings.HasPrefix(s[i+1:], "-"):
				return 0, false, false
			}
			return 0, true, false
		}
		exp = e
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(intPart+frac, "0")
	exp -= int64(len(frac))
	trimmed := strings.TrimRight(digits, "0")
	exp += int64(len(digits) - len(trimmed))
	switch {
	case trimmed == "":
		return 0, true, true
	case exp < 0:
		return 0, false, false
	case int64(len(trimmed))+exp > 19:
		return 0, true, false
	}
	n, err := strconv.ParseInt(sign+trimmed+strings.Repeat("0", int(exp)), 10, 64)
	if err != nil {
		return 0, true, false
	}
	return n, true, true
}

// setDate decodes a YYYY-MM-DD string field; "" is the zero Date, which Validate
// reports where a date is required.
func setDate(set func(m *Mutation, d Date)) func(*Mutation, string, []byte) *fieldProblem {
	return func(m *Mutation, field string, v []byte) *fieldProblem {
		s, p := jsonString(field, v)
		if p != nil {
			return p
		}
		if s == "" {
			return nil
		}
		d, err := ParseDate(s)
		if err != nil {
			return &fieldProblem{field, RuleDate, err.Error()}
		}
		set(m, d)
		return nil
	}
}

// setDays decodes days: a non-empty JSON array of distinct day names.
func setDays(m *Mutation, field string, v []byte) *fieldProblem {
	var names []string
	if len(v) == 0 || v[0] != '[' || json.Unmarshal(v, &names) != nil {
		return &fieldProblem{field, RuleDays, fmt.Sprintf("field %s: want an array of day names, got %s", field, snippet(v))}
	}
	w, err := ParseWeekdays(names)
	if err != nil {
		return &fieldProblem{field, RuleDays, err.Error()}
	}
	m.Days = w
	return nil
}

// amountSyntax is the plain decimal notation an amount is written in: no exponent, no
// plus sign, no spaces. A minus sign is read so that Validate can say "must be > 0".
var amountSyntax = regexp.MustCompile(`^-?[0-9]+(\.[0-9]+)?$`)

// setAmount takes only a JSON string: a JSON number passes through floating point in
// most PMS languages (129.9 may arrive as 129.90000000000001), a string keeps the
// digits the hotel typed.
func setAmount(m *Mutation, field string, v []byte) *fieldProblem {
	s, p := jsonString(field, v)
	if p != nil {
		if kindOf(v) == "number" {
			p.detail += fmt.Sprintf(` (write "%s")`, snippet(v))
		}
		return p
	}
	if len(s) > MaxAmountChars || !amountSyntax.MatchString(s) {
		return &fieldProblem{field, RuleAmountFormat, fmt.Sprintf("field %s: %s is not a decimal string like \"129.90\"", field, snippet(v))}
	}
	d, err := decimal.NewFromString(s)
	if err != nil {
		return &fieldProblem{field, RuleAmountFormat, fmt.Sprintf("field %s: %s", field, err)}
	}
	m.Amount = &d
	return nil
}

// kindOf names the JSON type of the value v starts with.
func kindOf(v []byte) string {
	if len(v) == 0 {
		return "nothing"
	}
	switch v[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return "number"
	}
	return fmt.Sprintf("%q", snippet(v))
}

// snippet is the start of b's first line, short enough for a one-line message.
func snippet(b []byte) string {
	const n = 40
	if i := bytes.IndexAny(b, "\r\n"); i >= 0 {
		b = b[:i]
	}
	if len(b) <= n {
		return string(b)
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return string(b[:cut]) + "…"
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

func skipSpaceAndCommas(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n' || b[i] == ',') {
		i++
	}
	return i
}

// invalidUTF8 is the offset of the first byte that is not UTF-8, or -1.
func invalidUTF8(b []byte) int {
	if utf8.Valid(b) {
		return -1
	}
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return -1
}

// lineCounter turns byte offsets into 1-based line numbers, counting forward from
// the last offset asked so that a body of many rows is scanned once.
type lineCounter struct {
	body []byte
	off  int
	line int
}

func (c *lineCounter) at(off int) int {
	off = min(max(off, 0), len(c.body))
	if off < c.off {
		c.off, c.line = 0, 1
	}
	c.line += bytes.Count(c.body[c.off:off], []byte("\n"))
	c.off = off
	return c.line
}

// Check runs Validate on every decoded mutation and returns the valid ones and one
// list of every refused row, decode and validation problems together, in body order.
func (v *Validator) Check(d Decoded) (valid []Mutation, problems []RowProblem) {
	problems = make([]RowProblem, 0, len(d.Problems))
	next, nights := 0, 0
	for i, m := range d.Mutations {
		for next < len(d.Problems) && d.Problems[next].Index < d.Indexes[i] {
			problems = append(problems, d.Problems[next])
			next++
		}
		ve := v.Validate(m)
		if len(ve) == 0 {
			if n := v.NightCount(m); nights+n > MaxBatchNights {
				ve = ValidationError{{Field: "to", Rule: RuleBatchNights}}
			} else {
				nights += n
				valid = append(valid, m)
				continue
			}
		}
		for _, fe := range ve {
			id := m.ID
			if ve.Has("id", RuleIDStored) {
				id = "" // never echoed: it may be anything
			}
			problems = append(problems, RowProblem{Line: d.Lines[i], Index: d.Indexes[i], ID: id, Field: fe.Field, Rule: fe.Rule})
		}
	}
	return valid, append(problems, d.Problems[next:]...)
}
