package models

import (
	"encoding/json"
	"slices"
	"testing"
)

// TestFamilyTableIsFamilies: the table and the exported list name the same
// families in the same order, and every value belongs to exactly one family.
func TestFamilyTableIsFamilies(t *testing.T) {
	if want := []Family{FamilyRates, FamilyAvailability, FamilyRestrictions}; !slices.Equal(Families, want) {
		t.Fatalf("Families %v, want %v", Families, want)
	}
	for _, f := range Families {
		if !f.Known() {
			t.Errorf("%s is not known", f)
		}
	}
	if Family("breakfast").Known() {
		t.Error("breakfast is known")
	}
	var all valueField
	for _, d := range familyTable {
		if all&d.fields != 0 {
			t.Errorf("%s shares a value with another family", d.family)
		}
		all |= d.fields
	}
	if want := fieldPrice | fieldInventory | fieldStopSell | fieldMinLOS | fieldMaxLOS | fieldCTA | fieldCTD; all != want {
		t.Errorf("families carry values %b, want every value %b", all, want)
	}
}

// TestValuesPerFamily: which families a change sets, a family's part of it (with
// pointers of its own) and the rest of it.
func TestValuesPerFamily(t *testing.T) {
	v := Values{Amount: dec("129.90"), Currency: "EUR", Inventory: ptr(0), MinLOS: ptr(2), CTD: ptr(true)}
	if got := v.Families(); !slices.Equal(got, Families) {
		t.Errorf("Families %v, want all three", got)
	}
	if got := (Values{Currency: "EUR"}).Families(); !slices.Equal(got, []Family{FamilyRates}) {
		t.Errorf("a currency alone: families %v, want rates (validation refuses it)", got)
	}
	rates := v.Of(FamilyRates)
	if rates.Amount == v.Amount || !rates.Amount.Equal(*v.Amount) || rates.Currency != "EUR" ||
		rates.Inventory != nil || rates.MinLOS != nil || rates.CTD != nil {
		t.Errorf("Of(rates) = %+v: want a copy of the price alone", rates)
	}
	restr := v.Of(FamilyRestrictions)
	if restr.MinLOS == v.MinLOS || *restr.MinLOS != 2 || *restr.CTD != true || restr.Amount != nil || restr.Inventory != nil {
		t.Errorf("Of(restrictions) = %+v: want a copy of min_los and ctd alone", restr)
	}
	rest := v.Without(FamilyAvailability)
	if rest.Inventory != nil || rest.Sets(FamilyAvailability) || !rest.Sets(FamilyRates) || !rest.Sets(FamilyRestrictions) {
		t.Errorf("Without(availability) = %+v", rest)
	}
	if v.Sets("breakfast") || v.Of("breakfast") != (Values{}) {
		t.Error("an unknown family has no values")
	}
}

// TestValuesSameAndHolds: equality per family compares amounts numerically and
// judges only that family's values; holding judges only what was asked for.
func TestValuesSameAndHolds(t *testing.T) {
	a := Values{Amount: dec("120.5"), Currency: "EUR", Inventory: ptr(3), StopSell: ptr(false)}
	b := Values{Amount: dec("120.50"), Currency: "EUR", Inventory: ptr(4), StopSell: ptr(false)}
	for _, c := range []struct {
		name string
		got  bool
		want bool
	}{
		{"same price written two ways", a.Same(FamilyRates, b), true},
		{"other inventory", a.Same(FamilyAvailability, b), false},
		{"same restrictions", a.Same(FamilyRestrictions, b), true},
		{"a restriction set against none", a.Same(FamilyRestrictions, Values{}), false},
		{"another currency", a.Same(FamilyRates, Values{Amount: dec("120.5"), Currency: "USD"}), false},
		{"channel holds the asked price", b.Holds(FamilyRates, a), true},
		{"channel holds what nobody asked", Values{}.Holds(FamilyRestrictions, Values{}), true},
		{"channel lacks the asked stop-sell", Values{}.Holds(FamilyRestrictions, a), false},
		{"channel holds more restrictions than asked", Values{StopSell: ptr(false), CTA: ptr(true)}.Holds(FamilyRestrictions, a), true},
		{"channel holds the price in another currency", Values{Amount: dec("120.5"), Currency: "USD"}.Holds(FamilyRates, a), false},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
}

// TestValuesKeepTheFlatJSON: embedding Values changes no JSON field of a
// mutation, a line or a cell, so stored data, the API and workflow histories read
// the same.
func TestValuesKeepTheFlatJSON(t *testing.T) {
	l := ARILine{RoomTypeCode: "DBL", RatePlanCode: "BAR", From: day("2030-04-10"), To: day("2030-04-10"),
		Values: Values{Amount: dec("99.5"), Currency: "EUR", MinLOS: ptr(2)}, Version: 7}
	got, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"room_type_code":"DBL","rate_plan_code":"BAR","from":"2030-04-10","to":"2030-04-10","amount":"99.5","currency":"EUR","min_los":2,"version":7}`
	if string(got) != want {
		t.Errorf("line JSON\n%s\nwant\n%s", got, want)
	}
	var back ARILine
	if err := json.Unmarshal(got, &back); err != nil || !back.Amount.Equal(*l.Amount) || *back.MinLOS != 2 || back.Currency != "EUR" {
		t.Errorf("read back %+v, %v", back, err)
	}
}
