package models

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// rangeMutation is a valid rates-only range: 2026-04-01..2026-10-31, weekends.
func rangeMutation() Mutation {
	m := validMutation()
	m.Inventory, m.StopSell, m.MinLOS, m.MaxLOS, m.CTA, m.CTD = nil, nil, nil, nil, nil, nil
	m.StayDate = Date{}
	m.From, m.To = day("2026-04-01"), day("2026-10-31")
	m.Days = Weekdays(1<<time.Saturday | 1<<time.Sunday)
	return m
}

func TestValidateRangeRules(t *testing.T) {
	v := newTestValidator(t) // today 2026-03-10, horizon 730 days: last night 2028-03-09
	cases := []struct {
		name        string
		edit        func(*Mutation)
		field, rule string
	}{
		{"stay_date with from/to", func(m *Mutation) { m.StayDate = day("2026-04-01") }, "stay_date", RuleNotWithRange},
		{"from without to", func(m *Mutation) { m.To = Date{} }, "to", RuleRequiredWithFrm},
		{"to without from", func(m *Mutation) { m.From = Date{} }, "from", RuleRequiredWithTo},
		{"days alone", func(m *Mutation) { m.From, m.To = Date{}, Date{} }, "days", RuleDaysWithRange},
		{"from after to", func(m *Mutation) { m.From, m.To = day("2026-05-02"), day("2026-05-01") }, "from", RuleFromLETo},
		{"longer than the horizon", func(m *Mutation) { m.From, m.To = day("2026-03-10"), day("2028-03-10") }, "to", RuleRangeHorizon},
		{"no night on its days", func(m *Mutation) { m.From, m.To = day("2026-04-06"), day("2026-04-10") }, "days", RuleRangeNoNight},
		{"entirely past", func(m *Mutation) { m.From, m.To = day("2026-01-01"), day("2026-03-09") }, "from", RuleRangeOutside},
		{"entirely beyond the horizon", func(m *Mutation) { m.From, m.To = day("2028-03-10"), day("2028-04-30") }, "from", RuleRangeOutside},
		{"neither stay_date nor range", func(m *Mutation) { m.From, m.To, m.Days = Date{}, Date{}, 0 }, "stay_date", RuleRequired},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := rangeMutation()
			c.edit(&m)
			ve := v.Validate(m)
			if !ve.Has(c.field, c.rule) {
				t.Fatalf("Validate = %v, want %s: %s", ve, c.field, c.rule)
			}
		})
	}
	if ve := v.Validate(rangeMutation()); ve != nil {
		t.Fatalf("valid range refused: %v", ve)
	}
	// A range reaching past today and the horizon is valid: its outside nights are clipped.
	m := rangeMutation()
	m.From, m.To = day("2026-03-01"), day("2026-04-30")
	m.Days = 0
	if ve := v.Validate(m); ve != nil {
		t.Fatalf("partly past range refused: %v", ve)
	}
}

func TestExpandWeekendsIntoNights(t *testing.T) {
	v := newTestValidator(t)
	m := rangeMutation()
	m.From, m.To = day("2027-03-01"), day("2027-10-31")
	ex := v.Expand(m)
	// 2027-03-01 is a Monday; 35 weekends of March..October, and 2027-10-31 a Sunday.
	if len(ex.Nights) != 70 || ex.Clipped != "" {
		t.Fatalf("got %d nights, clipped %q; want 70, none", len(ex.Nights), ex.Clipped)
	}
	for _, n := range ex.Nights {
		wd := n.StayDate.Time().Weekday()
		if wd != time.Saturday && wd != time.Sunday {
			t.Fatalf("night %s is a %s", n.StayDate, wd)
		}
		if n.ID != m.ID || n.RangeNights != 70 || n.IsRange() || !n.Amount.Equal(*m.Amount) {
			t.Fatalf("night %+v: want id %s, RangeNights 70, no range, the amount", n, m.ID)
		}
		if ve := v.Validate(n); ve != nil {
			t.Fatalf("expanded night %s invalid: %v", n.StayDate, ve)
		}
	}
	if ex.Nights[0].StayDate != day("2027-03-06") || ex.Nights[69].StayDate != day("2027-10-31") {
		t.Fatalf("nights %s..%s", ex.Nights[0].StayDate, ex.Nights[69].StayDate)
	}

	m.Days = 0
	if n := len(v.Expand(m).Nights); n != 245 {
		t.Fatalf("every day of 2027-03-01..10-31: %d nights, want 245", n)
	}
	one := validMutation()
	if ex := v.Expand(one); len(ex.Nights) != 1 || ex.Nights[0].RangeNights != 0 || ex.Nights[0].StayDate != one.StayDate {
		t.Fatalf("stay_date mutation expanded to %+v", ex)
	}
}

func TestExpandClipsPastAndBeyondTheHorizon(t *testing.T) {
	v := newTestValidator(t) // today 2026-03-10, last night 2028-03-09
	m := rangeMutation()
	m.Days = 0
	m.From, m.To = day("2026-03-08"), day("2026-03-12")
	ex := v.Expand(m)
	if len(ex.Nights) != 3 || ex.Nights[0].StayDate != day("2026-03-10") {
		t.Fatalf("nights %+v, want 2026-03-10..12", ex.Nights)
	}
	if want := "2 nights before today clipped (2026-03-08..2026-03-09)"; ex.Clipped != want {
		t.Fatalf("clipped %q, want %q", ex.Clipped, want)
	}
	m.From, m.To = day("2028-03-08"), day("2028-03-11")
	ex = v.Expand(m)
	if len(ex.Nights) != 2 || !strings.Contains(ex.Clipped, "2 nights beyond the channel's horizon clipped (2028-03-10..2028-03-11)") {
		t.Fatalf("nights %d, clipped %q", len(ex.Nights), ex.Clipped)
	}
}

func TestDecodeRangeFields(t *testing.T) {
	body := `{"id":"r1","property_id":"prop_0a1b2c3d","room_type_code":"DLXKING","rate_plan_code":"BAR_FLEX",` +
		`"channel":"booking_com","from":"2026-04-01","to":"2026-10-31","days":["sat","sun"],"amount":"129.00","currency":"EUR","version":1}`
	d, err := DecodeMutations([]byte(body), DecodeLimits{})
	if err != nil || len(d.Mutations) != 1 {
		t.Fatalf("decode: %v %+v", err, d)
	}
	m := d.Mutations[0]
	if m.From != day("2026-04-01") || m.To != day("2026-10-31") || !reflect.DeepEqual(m.Days.Names(), []string{"sat", "sun"}) {
		t.Fatalf("decoded %+v", m)
	}
	// The payload travels as JSON (the claim check in PG): the range reads back.
	b, _ := json.Marshal(m)
	var back Mutation
	err = json.Unmarshal(b, &back)
	if err != nil || !back.Amount.Equal(*m.Amount) {
		t.Fatalf("round trip %s: %v %+v", b, err, back)
	}
	back.Amount = m.Amount
	if !reflect.DeepEqual(back, m) {
		t.Fatalf("round trip %s: %v %+v", b, err, back)
	}
	for _, bad := range []string{`[]`, `["sat","sat"]`, `["saturday"]`, `"sat"`, `null`} {
		d, _ := DecodeMutations([]byte(strings.Replace(body, `["sat","sun"]`, bad, 1)), DecodeLimits{})
		if len(d.Problems) != 1 || d.Problems[0].Field != "days" || d.Problems[0].Rule != RuleDays {
			t.Errorf("days %s: problems %+v, want days: %s", bad, d.Problems, RuleDays)
		}
	}
	d, _ = DecodeMutations([]byte(strings.Replace(body, `"2026-10-31"`, `"2026-10-32"`, 1)), DecodeLimits{})
	if len(d.Problems) != 1 || d.Problems[0].Field != "to" || d.Problems[0].Rule != RuleDate {
		t.Errorf("bad to: %+v", d.Problems)
	}
}

// BenchmarkExpandAndCoalesceRanges measures what PrepareBatch does with the largest
// batch of ranges it takes: as many ranges as long as the horizon allows (731
// nights each, every day) as fit MaxBatchNights, expanded into nights and coalesced.
func BenchmarkExpandAndCoalesceRanges(b *testing.B) {
	v := newTestValidator(b)
	ms := make([]Mutation, MaxBatchNights/731)
	for i := range ms {
		m := rangeMutation()
		m.ID, m.Days = fmt.Sprintf("r%d", i), 0
		m.RoomTypeCode = fmt.Sprintf("R%03d", i)
		m.From, m.To = day("2026-03-10"), day("2028-03-09")
		ms[i] = m
	}
	chs := v.Channels
	b.ReportAllocs()
	for b.Loop() {
		var nights []Mutation
		for _, m := range ms {
			nights = append(nights, v.Expand(m).Nights...)
		}
		co := Coalesce(nights, chs)
		if len(nights) != len(ms)*731 || len(co.Requests) == 0 {
			b.Fatalf("%d nights, %d requests", len(nights), len(co.Requests))
		}
	}
}

func TestCheckRefusesRangesPastTheBodysNights(t *testing.T) {
	v := newTestValidator(t)
	var rows []string
	for i := range 137 { // 731 nights each: the 137th takes the body past 100000
		rows = append(rows, fmt.Sprintf(`{"id":"r%d","property_id":"prop_0a1b2c3d","room_type_code":"R%03d","rate_plan_code":"BAR_FLEX",`+
			`"channel":"booking_com","from":"2026-03-10","to":"2028-03-09","amount":"129.00","currency":"EUR","version":1}`, i, i))
	}
	d, err := DecodeMutations([]byte(strings.Join(rows, "\n")), DecodeLimits{})
	if err != nil {
		t.Fatal(err)
	}
	valid, problems := v.Check(d)
	if len(valid) != 136 || len(problems) != 1 || problems[0].ID != "r136" || problems[0].Field != "to" || problems[0].Rule != RuleBatchNights {
		t.Fatalf("%d valid, problems %+v; want 136 and r136 refused (to: %s)", len(valid), problems, RuleBatchNights)
	}
}
