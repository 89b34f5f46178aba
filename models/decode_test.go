package models

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// row is a valid mutation on the wire with the given id; edit swaps one substring
// of it for another ("" keeps it as it is).
func row(id string, edit ...string) string {
	s := fmt.Sprintf(`{"id":%q,"property_id":"prop_1a2b3c4d","room_type_code":"DLXKING","rate_plan_code":"BAR_FLEX",`+
		`"channel":"expedia","stay_date":"2026-04-01","amount":"129.90","currency":"EUR","version":3}`, id)
	for i := 0; i+1 < len(edit); i += 2 {
		if !strings.Contains(s, edit[i]) {
			panic("row: no " + edit[i])
		}
		s = strings.Replace(s, edit[i], edit[i+1], 1)
	}
	return s
}

func lines(rows ...string) string { return strings.Join(rows, "\n") + "\n" }

func array(rows ...string) string { return "[\n" + strings.Join(rows, ",\n") + "\n]\n" }

// problem is what the tests compare of a RowProblem: everything but the Detail.
type problem struct {
	Line, Index int
	ID, Field   string
	Rule        string
}

func problemsOf(ps []RowProblem) []problem {
	out := make([]problem, len(ps))
	for i, p := range ps {
		out[i] = problem{p.Line, p.Index, p.ID, p.Field, p.Rule}
	}
	return out
}

func idsOf(ms []Mutation) []string {
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	return ids
}

func TestDecodeMutationsRefusesBadRowsAndKeepsTheOthers(t *testing.T) {
	long := row("m2", `"version":3`, `"version":3,"correlation_id":"`+strings.Repeat("x", 5<<20)+`"`)
	for _, tc := range []struct {
		name       string
		body       string
		want       []problem
		detail     string // a part of the first problem's Detail
		kept       []string
		keptLines  []int
		keptOffset []int
	}{
		{"unknown field", lines(row("m1"), row("m2", `"amount"`, `"amout"`), row("m3")),
			[]problem{{2, 1, "m2", "amout", RuleUnknownField}}, `unknown field "amout"`, []string{"m1", "m3"}, []int{1, 3}, []int{0, 2}},
		{"field names are case-sensitive", lines(row("m1", `"channel"`, `"Channel"`)),
			[]problem{{1, 0, "m1", "Channel", RuleUnknownField}}, `unknown field "Channel"`, nil, nil, nil},
		{"amount as a JSON number", lines(row("m1", `"129.90"`, `129.90`), row("m2")),
			[]problem{{1, 0, "m1", "amount", RuleJSONString}}, `field amount: want string, got number (write "129.90")`, []string{"m2"}, []int{2}, []int{1}},
		{"amount with an exponent", lines(row("m1", `"129.90"`, `"1.2e2"`)),
			[]problem{{1, 0, "m1", "amount", RuleAmountFormat}}, `"1.2e2" is not a decimal string`, nil, nil, nil},
		{"amount longer than 32 characters", lines(row("m1", `"129.90"`, `"129.`+strings.Repeat("0", 30)+`"`)),
			[]problem{{1, 0, "m1", "amount", RuleAmountFormat}}, "is not a decimal string", nil, nil, nil},
		{"version as a string", array(row("m1"), row("m2", `"version":3`, `"version":"3"`)),
			[]problem{{3, 1, "m2", "version", RuleJSONInteger}}, "field version: want integer, got string", []string{"m1"}, []int{2}, []int{0}},
		{"version with a fraction", lines(row("m1", `"version":3`, `"version":3.5`)),
			[]problem{{1, 0, "m1", "version", RuleJSONInteger}}, "want integer, got 3.5", nil, nil, nil},
		{"version overflows int64", lines(row("m1", `"version":3`, `"version":9223372036854775808`), row("m2")),
			[]problem{{1, 0, "m1", "version", RuleIntegerRange}}, "does not fit a signed 64-bit integer", []string{"m2"}, []int{2}, []int{1}},
		{"version with a huge exponent", lines(row("m1", `"version":3`, `"version":1e999999999999`)),
			[]problem{{1, 0, "m1", "version", RuleIntegerRange}}, "", nil, nil, nil},
		{"inventory as a boolean", lines(row("m1", `"version":3`, `"version":3,"inventory":true`)),
			[]problem{{1, 0, "m1", "inventory", RuleJSONInteger}}, "field inventory: want integer, got boolean", nil, nil, nil},
		{"stop_sell as a string", lines(row("m1", `"version":3`, `"version":3,"stop_sell":"true"`)),
			[]problem{{1, 0, "m1", "stop_sell", RuleJSONBoolean}}, "field stop_sell: want boolean, got string", nil, nil, nil},
		{"null field", lines(row("m1", `"currency":"EUR"`, `"currency":null`)),
			[]problem{{1, 0, "m1", "currency", RuleJSONString}}, "want string, got null", nil, nil, nil},
		{"id as a number names no id", lines(row("m1", `"id":"m1"`, `"id":1`)),
			[]problem{{1, 0, "", "id", RuleJSONString}}, "field id: want string, got number", nil, nil, nil},
		{"nested garbage in a field", lines(row("m1", `"channel":"expedia"`, `"channel":{"a":[1,{"b":null}]}`)),
			[]problem{{1, 0, "m1", "channel", RuleJSONString}}, "want string, got object", nil, nil, nil},
		{"date in another format", lines(row("m1", "2026-04-01", "01/04/2026")),
			[]problem{{1, 0, "m1", "stay_date", RuleDate}}, `date "01/04/2026": want YYYY-MM-DD`, nil, nil, nil},
		{"date that does not exist", lines(row("m1", "2026-04-01", "2026-02-30")),
			[]problem{{1, 0, "m1", "stay_date", RuleDate}}, "", nil, nil, nil},
		{"repeated key", lines(row("m1", `"version":3`, `"version":3,"version":4`)),
			[]problem{{1, 0, "m1", "version", RuleDuplicateKey}}, `field "version" appears more than once`, nil, nil, nil},
		{"every problem of a row at once", lines(row("m1", `"amount":"129.90"`, `"amount":1,"colour":"red"`, `"version":3`, `"version":"x"`)),
			[]problem{{1, 0, "m1", "amount", RuleJSONString}, {1, 0, "m1", "colour", RuleUnknownField}, {1, 0, "m1", "version", RuleJSONInteger}}, "", nil, nil, nil},
		{"null element", array(row("m1"), "null", row("m3")),
			[]problem{{3, 1, "", FieldMutation, RuleJSONObject}}, "want a JSON object, got null", []string{"m1", "m3"}, []int{2, 4}, []int{0, 2}},
		{"null line", lines(row("m1"), "null"),
			[]problem{{2, 1, "", FieldMutation, RuleJSONObject}}, "got null", []string{"m1"}, []int{1}, []int{0}},
		{"element that is not an object", array(row("m1"), `"m2"`, `[1,2]`, `42`),
			[]problem{{3, 1, "", FieldMutation, RuleJSONObject}, {4, 2, "", FieldMutation, RuleJSONObject}, {5, 3, "", FieldMutation, RuleJSONObject}},
			"got string", []string{"m1"}, []int{2}, []int{0}},
		{"duplicate ids: the later ones", lines(row("m1"), row("m2"), row("m1", "2026-04-01", "2026-04-02"), row("m1", "2026-04-01", "2026-04-03")),
			[]problem{{3, 2, "m1", "id", RuleUniqueID}, {4, 3, "m1", "id", RuleUniqueID}}, "already used by the row at index 0, line 1", []string{"m1", "m2"}, []int{1, 2}, []int{0, 1}},
		{"a refused row's id still counts", lines(row("m1", `"version":3`, `"version":"3"`), row("m1")),
			[]problem{{1, 0, "m1", "version", RuleJSONInteger}, {2, 1, "m1", "id", RuleUniqueID}}, "", nil, nil, nil},
		{"5 MB line", lines(row("m1"), long, row("m3")),
			[]problem{{2, 1, "", FieldMutation, RuleRowTooLong}}, "more than the 1048576 allowed", []string{"m1", "m3"}, []int{1, 3}, []int{0, 2}},
		{"5 MB array element", array(row("m1"), long, row("m3")),
			[]problem{{3, 1, "", FieldMutation, RuleRowTooLong}}, "", []string{"m1", "m3"}, []int{2, 4}, []int{0, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := DecodeMutations([]byte(tc.body), DecodeLimits{})
			if err != nil {
				t.Fatalf("body refused: %v", err)
			}
			if got := problemsOf(d.Problems); !slices.Equal(got, tc.want) {
				t.Fatalf("problems\n got %+v\nwant %+v", got, tc.want)
			}
			if !strings.Contains(d.Problems[0].Detail, tc.detail) {
				t.Errorf("detail %q, want it to contain %q", d.Problems[0].Detail, tc.detail)
			}
			if !slices.Equal(idsOf(d.Mutations), tc.kept) || !slices.Equal(d.Lines, tc.keptLines) || !slices.Equal(d.Indexes, tc.keptOffset) {
				t.Errorf("kept %v on lines %v at %v, want %v on %v at %v", idsOf(d.Mutations), d.Lines, d.Indexes, tc.kept, tc.keptLines, tc.keptOffset)
			}
		})
	}
}

func TestDecodeMutationsRefusesBody(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		lim        DecodeLimits
		line       int
		rule       string
		detail     string
	}{
		{"empty", "", DecodeLimits{}, 0, RuleBodyEmpty, "no mutations"},
		{"white space only", " \r\n\t\n", DecodeLimits{}, 0, RuleBodyEmpty, "no mutations"},
		{"BOM only", "\xef\xbb\xbf\n", DecodeLimits{}, 0, RuleBodyEmpty, "no mutations"},
		{"empty array", "[ ]", DecodeLimits{}, 0, RuleBodyEmpty, "no mutations"},
		{"not UTF-8", lines(row("m1"), row("m2", "BAR_FLEX", "BAR_\xff"), row("m3")), DecodeLimits{}, 2, RuleBodyUTF8, "byte 0xff is not UTF-8"},
		{"Latin-1 file", "\n\n" + row("m1", "expedia", "exp\xe9dia"), DecodeLimits{}, 3, RuleBodyUTF8, "byte 0xe9"},
		{"syntax error in an array", "[\n" + row("m1") + ",\n{\"id\": }\n]", DecodeLimits{}, 3, RuleBodyJSON, "invalid character '}'"},
		{"syntax error on a line", lines(row("m1"), `{"id": "m2",}`, row("m3")), DecodeLimits{}, 2, RuleBodyJSON, "invalid character '}'"},
		{"cut-off array", "[\n" + row("m1") + ",\n" + row("m2")[:40], DecodeLimits{}, 3, RuleBodyJSON, "unexpected end of JSON input"},
		{"cut-off last line", lines(row("m1")) + row("m2")[:40], DecodeLimits{}, 2, RuleBodyJSON, "unexpected end of JSON input"},
		{"pretty-printed object", "{\n  \"id\": \"m1\"\n}\n", DecodeLimits{}, 1, RuleBodyJSON, "unexpected end"},
		{"]garbage after the array", "[" + row("m1") + "]]garbage", DecodeLimits{}, 1, RuleBodyTrailing, "data after the JSON array: ]garbage"},
		{"a word after the array", array(row("m1")) + "\n x\n", DecodeLimits{}, 5, RuleBodyTrailing, "data after the JSON array: x"},
		{"a second array", array(row("m1")) + array(row("m2")), DecodeLimits{}, 4, RuleBodyTrailing, "data after the JSON array"},
		{"two values on a line", lines(row("m1"), row("m2")+" "+row("m3")), DecodeLimits{}, 2, RuleOneValuePerLine, "more than one JSON value on the line"},
		{"two objects on a line without space", row("m1") + row("m2"), DecodeLimits{}, 1, RuleOneValuePerLine, ""},
		{"a string", `"mutations"`, DecodeLimits{}, 1, RuleBodyShape, "got string"},
		{"null body", "\n null", DecodeLimits{}, 2, RuleBodyShape, "got null"},
		{"a number", "42", DecodeLimits{}, 1, RuleBodyShape, "got number"},
		{"garbage", "<xml/>", DecodeLimits{}, 1, RuleBodyShape, `got "<xml/>"`},
		{"nesting beyond the decoder's depth", "[" + strings.Repeat("[", 20000) + strings.Repeat("]", 20001), DecodeLimits{}, 1, RuleBodyJSON, "exceeded max depth"},
		{"too many mutations in an array", array(row("m1"), row("m2"), row("m3")), DecodeLimits{MaxMutations: 2}, 4, RuleTooManyMutations, "more than 2 mutations"},
		{"too many mutations on lines", lines(row("m1"), "", "null", row("m3")), DecodeLimits{MaxMutations: 2}, 4, RuleTooManyMutations, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := DecodeMutations([]byte(tc.body), tc.lim)
			var be *BodyError
			if !errors.As(err, &be) {
				t.Fatalf("got %v (%d mutations, %d problems), want a *BodyError", err, len(d.Mutations), len(d.Problems))
			}
			if be.Line != tc.line || be.Rule != tc.rule || !strings.Contains(be.Detail, tc.detail) {
				t.Errorf("got line %d %q %q, want line %d %q containing %q", be.Line, be.Rule, be.Detail, tc.line, tc.rule, tc.detail)
			}
			if d.Rows != 0 || d.Mutations != nil || d.Problems != nil {
				t.Errorf("a refused body returned rows: %+v", d)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q spans lines", err)
			}
		})
	}
}

func TestDecodeMutationsAccepts(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		lines      []int
	}{
		{"JSON lines with blank lines", "\n" + row("m1") + "\n\n   \n" + row("m2") + "\n", []int{2, 5}},
		{"JSON lines with CRLF", row("m1") + "\r\n\r\n" + row("m2") + "\r\n", []int{1, 3}},
		{"JSON lines without a final newline", row("m1") + "\n" + row("m2"), []int{1, 2}},
		{"array with CRLF", "[\r\n" + row("m1") + ",\r\n" + row("m2") + "\r\n]\r\n", []int{2, 3}},
		{"array on one line", "[" + row("m1") + "," + row("m2") + "]", []int{1, 1}},
		{"BOM before JSON lines", "\xef\xbb\xbf" + row("m1") + "\n" + row("m2") + "\n", []int{1, 2}},
		{"BOM before an array", "\xef\xbb\xbf[" + row("m1") + ",\n" + row("m2") + "]", []int{1, 2}},
		{"indented lines", "  " + row("m1") + "  \n\t" + row("m2"), []int{1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := DecodeMutations([]byte(tc.body), DecodeLimits{})
			if err != nil || len(d.Problems) != 0 {
				t.Fatalf("refused: %v %+v", err, d.Problems)
			}
			if !slices.Equal(idsOf(d.Mutations), []string{"m1", "m2"}) || !slices.Equal(d.Lines, tc.lines) || !slices.Equal(d.Indexes, []int{0, 1}) || d.Rows != 2 {
				t.Fatalf("got %v on lines %v at %v (%d rows)", idsOf(d.Mutations), d.Lines, d.Indexes, d.Rows)
			}
			m := d.Mutations[0]
			if m.Amount.String() != "129.9" || m.Currency != "EUR" || m.Version != 3 || m.StayDate != day("2026-04-01") || m.Channel != "expedia" {
				t.Errorf("decoded %+v", m)
			}
		})
	}
}

func TestDecodeMutationsReadsEveryField(t *testing.T) {
	body := `{"id":"m1","property_id":"prop_1a2b3c4d","room_type_code":"DLXKING","rate_plan_code":"BAR_FLEX",` +
		`"channel":"expedia","stay_date":"2026-04-01","amount":"12000","currency":"JPY","inventory":0,"stop_sell":true,` +
		`"min_los":2,"max_los":1.4e1,"cta":false,"ctd":true,"version":9223372036854775807,"priority":1,"full_sync":true,` +
		`"correlation_id":"c-1"}`
	d, err := DecodeMutations([]byte(body), DecodeLimits{})
	if err != nil || len(d.Problems) != 0 {
		t.Fatalf("refused: %v %+v", err, d.Problems)
	}
	got := d.Mutations[0]
	want := Mutation{ID: "m1", PropertyID: "prop_1a2b3c4d", RoomTypeCode: "DLXKING", RatePlanCode: "BAR_FLEX",
		Channel: "expedia", StayDate: day("2026-04-01"), Values: Values{Amount: dec("12000"), Currency: "JPY", Inventory: ptr(0), StopSell: ptr(true), MinLOS: ptr(2), MaxLOS: ptr(14), CTA: ptr(false), CTD: ptr(true)}, Version: 1<<63 - 1,
		Priority: 1, FullSync: true, CorrelationID: "c-1"}
	if fmt.Sprint(got.Cell(), *got.Amount, got.Currency, *got.Inventory, *got.StopSell, *got.MinLOS, *got.MaxLOS, *got.CTA, *got.CTD,
		got.Version, got.Priority, got.FullSync, got.CorrelationID, got.ID) !=
		fmt.Sprint(want.Cell(), *want.Amount, want.Currency, *want.Inventory, *want.StopSell, *want.MinLOS, *want.MaxLOS, *want.CTA, *want.CTD,
			want.Version, want.Priority, want.FullSync, want.CorrelationID, want.ID) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	// from, to and days exclude stay_date; TestDecodeRangeFields reads them.
	if len(MutationFields()) != strings.Count(body, `":`)+3 {
		t.Errorf("the body sets %d fields, MutationFields lists %d", strings.Count(body, `":`), len(MutationFields()))
	}
}

func TestIntegerValue(t *testing.T) {
	for _, tc := range []struct {
		lit         string
		n           int64
		whole, fits bool
	}{
		{"0", 0, true, true}, {"-0", 0, true, true}, {"7", 7, true, true}, {"-7", -7, true, true},
		{"7.0", 7, true, true}, {"7.5", 0, false, false}, {"7e2", 700, true, true}, {"7E+2", 700, true, true},
		{"700e-2", 7, true, true}, {"7e-1", 0, false, false}, {"0.0e99999999999999999999", 0, true, true},
		{"1e99999999999999999999", 0, true, false}, {"1e-99999999999999999999", 0, false, false},
		{"9223372036854775807", 1<<63 - 1, true, true}, {"-9223372036854775808", -1 << 63, true, true},
		{"9223372036854775808", 0, true, false}, {"1e19", 0, true, false}, {"100000000000000000000e-2", 1e18, true, true}, {"10000000000000000000e0", 0, true, false},
	} {
		n, whole, fits := integerValue(tc.lit)
		if n != tc.n || whole != tc.whole || fits != tc.fits {
			t.Errorf("integerValue(%s) = %d, %v, %v; want %d, %v, %v", tc.lit, n, whole, fits, tc.n, tc.whole, tc.fits)
		}
	}
}

func TestCheckJoinsDecodeAndValidationProblemsInBodyOrder(t *testing.T) {
	body := lines(
		row("m1"),
		row("m2", `"129.90"`, `"12000.50"`, `"EUR"`, `"JPY"`), // JPY has no minor units
		row("m3", `"version":3`, `"version":"3"`),
		row("m4", `"property_id":"prop_1a2b3c4d",`, ``, `"channel":"expedia",`, ``), // required fields missing
		row("m5", "expedia", "nowhere"),
		row("m6"),
	)
	d, err := DecodeMutations([]byte(body), DecodeLimits{})
	if err != nil {
		t.Fatal(err)
	}
	valid, problems := newTestValidator(t).Check(d)
	want := []problem{
		{2, 1, "m2", "amount", RuleAmountPlaces},
		{3, 2, "m3", "version", RuleJSONInteger},
		{4, 3, "m4", "property_id", RuleRequired},
		{4, 3, "m4", "channel", RuleRequired},
		{5, 4, "m5", "channel", RuleChannelUnknown},
	}
	if got := problemsOf(problems); !slices.Equal(got, want) {
		t.Fatalf("problems\n got %+v\nwant %+v", got, want)
	}
	if !slices.Equal(idsOf(valid), []string{"m1", "m6"}) {
		t.Fatalf("valid %v", idsOf(valid))
	}
	if got := problems[0].Error(); got != "line 2: amount: "+RuleAmountPlaces {
		t.Errorf("Error() = %q", got)
	}
}

func FuzzDecodeMutations(f *testing.F) {
	for _, s := range []string{
		lines(row("m1"), row("m2")), array(row("m1"), row("m2")), "", "[]", "null", "[null,1,\"x\",[],{}]",
		"\xef\xbb\xbf" + row("m1"), row("m1") + "\r\n" + row("m1"), "[" + row("m1") + "]]garbage", row("m1") + " " + row("m2"),
		row("m1", `"version":3`, `"version":1e400`), row("m1", `"version":3`, `"version":-0.0e-5`),
		row("m1", `"129.90"`, `129.90`), row("m1", `"129.90"`, `"-1e9999"`), row("m1", `"amount"`, `"x"`),
		`{"id":"a","id":"b"}`, "[{\"id\":\"\xff\"}]", `{"stay_date":"2026-02-30"}`, `[{"id":"a"},{"id":"a"}]`,
		"{\"id\":\"\\ud800\"}\n\n{}", "[" + strings.Repeat(`{"min_los":1},`, 50) + "{}]",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, lim := range []DecodeLimits{{}, {MaxLineBytes: 64, MaxMutations: 8}} {
			d, err := DecodeMutations(body, lim)
			if err != nil {
				var be *BodyError
				if !errors.As(err, &be) || be.Rule == "" || be.Line < 0 {
					t.Fatalf("error %v is not a BodyError with a rule", err)
				}
				if d.Rows != 0 || len(d.Mutations) != 0 || len(d.Problems) != 0 {
					t.Fatalf("a refused body returned rows")
				}
				continue
			}
			if len(d.Lines) != len(d.Mutations) || len(d.Indexes) != len(d.Mutations) {
				t.Fatalf("%d mutations, %d lines, %d indexes", len(d.Mutations), len(d.Lines), len(d.Indexes))
			}
			// Every row ends in exactly one place.
			refused := map[int]bool{}
			for _, p := range d.Problems {
				if (p.Field == "" && p.Rule != RuleUnknownField) || p.Rule == "" || p.Line < 1 || p.Index < 0 || p.Index >= d.Rows {
					t.Fatalf("problem %+v", p)
				}
				refused[p.Index] = true
			}
			for i, idx := range d.Indexes {
				if refused[idx] || (i > 0 && idx <= d.Indexes[i-1]) || d.Lines[i] < 1 {
					t.Fatalf("mutation %d at index %d line %d also refused or out of order", i, idx, d.Lines[i])
				}
			}
			if d.Rows == 0 || d.Rows != len(d.Mutations)+len(refused) {
				t.Fatalf("%d rows, %d kept, %d refused", d.Rows, len(d.Mutations), len(refused))
			}
			if d.Rows > max(lim.MaxMutations, 0) && lim.MaxMutations > 0 {
				t.Fatalf("%d rows, limit %d", d.Rows, lim.MaxMutations)
			}
		}
	})
}

func TestMutationsDocExamplesAreValid(t *testing.T) {
	doc, err := os.ReadFile("MUTATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := strings.Split(string(doc), "```")
	n := 0
	for i := 1; i < len(blocks); i += 2 {
		body := strings.TrimPrefix(blocks[i], "json")
		d, err := DecodeMutations([]byte(body), DecodeLimits{})
		if err != nil {
			t.Fatalf("example %d: %v", n+1, err)
		}
		valid, problems := newTestValidator(t).Check(d)
		if len(problems) != 0 || len(valid) != 2 {
			t.Fatalf("example %d: %d valid, problems %+v", n+1, len(valid), problems)
		}
		n++
	}
	if n != 3 {
		t.Fatalf("%d examples, want the ranges, the JSON lines and the array", n)
	}
}

// TestAnIDOffTheRuleIsNeitherKeptNorEchoed decodes a row whose id is 900,000
// characters: the row is refused on field id, and neither the problem's id nor
// its detail carries the id, so nothing downstream stores or answers it.
func TestAnIDOffTheRuleIsNeitherKeptNorEchoed(t *testing.T) {
	long := strings.Repeat("a", 900_000)
	d, err := DecodeMutations([]byte(lines(row(long), row("m2"))), DecodeLimits{})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Problems) != 1 || d.Problems[0].Field != "id" || d.Problems[0].Rule != RuleIDFormat {
		t.Fatalf("problems %+v, want one on id", d.Problems)
	}
	if p := d.Problems[0]; p.ID != "" || len(p.Detail) > 100 {
		t.Fatalf("the refused id is echoed: id of %d bytes, detail %q", len(p.ID), p.Detail)
	}
	if len(d.Mutations) != 1 || d.Mutations[0].ID != "m2" {
		t.Fatalf("the other row is kept: %+v", d.Mutations)
	}
	v := newTestValidator(t)
	m := d.Mutations[0]
	m.ID = "acme:" + strings.Repeat("b", 300)
	if !v.Validate(m).Has("id", RuleIDStored) {
		t.Fatal("Validate refuses an id longer than the stored bound")
	}
	m.ID = "acme:" + strings.Repeat("b", MaxMutationIDLength)
	if ve := v.Validate(m); ve.Has("id", RuleIDStored) {
		t.Fatalf("a tenant-prefixed wire id is valid inside paritysync: %v", ve)
	}
}
