package models

import "github.com/shopspring/decimal"

// Values are a cell's values, each optional (nil: not set): what a mutation
// changes, a request line sets, a channel holds and the store records. Mutation,
// ARILine and ARICell embed them, so their JSON keeps the flat field names.
// Which values an endpoint family carries is said once, in familyTable; every
// per-family question (which families a change touches, a family's part of it,
// equality, a channel holding it) is a method here.
type Values struct {
	Amount    *decimal.Decimal `json:"amount,omitempty"`
	Currency  string           `json:"currency,omitempty"`
	Inventory *int             `json:"inventory,omitempty"`
	StopSell  *bool            `json:"stop_sell,omitempty"`
	MinLOS    *int             `json:"min_los,omitempty"`
	MaxLOS    *int             `json:"max_los,omitempty"`
	CTA       *bool            `json:"cta,omitempty"`
	CTD       *bool            `json:"ctd,omitempty"`
}

// valueField is a set of the values of Values. The price is one value: an amount
// means nothing without its currency.
type valueField uint8

const (
	fieldPrice valueField = 1 << iota // Amount and Currency
	fieldInventory
	fieldStopSell
	fieldMinLOS
	fieldMaxLOS
	fieldCTA
	fieldCTD
)

// familyDesc is what paritysync knows of one endpoint family.
type familyDesc struct {
	family Family
	fields valueField // the values its requests carry
}

// familyTable is the one home of the endpoint families, in the order of Families.
var familyTable = [...]familyDesc{
	{FamilyRates, fieldPrice},
	{FamilyAvailability, fieldInventory},
	{FamilyRestrictions, fieldStopSell | fieldMinLOS | fieldMaxLOS | fieldCTA | fieldCTD},
}

// familyIndex is f's index in familyTable (and Families); len(familyTable) for a
// family paritysync does not know.
func familyIndex(f Family) int {
	for i, d := range familyTable {
		if d.family == f {
			return i
		}
	}
	return len(familyTable)
}

// Known reports whether f is one of Families.
func (f Family) Known() bool { return familyIndex(f) < len(familyTable) }

// fieldsOf are the values family f carries; none for an unknown family.
func fieldsOf(f Family) valueField {
	if i := familyIndex(f); i < len(familyTable) {
		return familyTable[i].fields
	}
	return 0
}

// ByFamily holds one T per endpoint family: a channel's shares, a protocol's
// message or endpoint for each family. Protocols look a family up here rather than
// switch on it.
type ByFamily[T any] struct {
	Rates, Availability, Restrictions T
}

// Of is the T of family f; the zero T for a family paritysync does not know.
func (b ByFamily[T]) Of(f Family) T {
	all := [len(familyTable)]T{b.Rates, b.Availability, b.Restrictions}
	if i := familyIndex(f); i < len(all) {
		return all[i]
	}
	var zero T
	return zero
}

// Families lists the endpoint families v sets a value of, in the order of Families.
func (v Values) Families() []Family {
	var fs []Family
	set := v.familySet()
	for i, d := range familyTable {
		if set.has(i) {
			fs = append(fs, d.family)
		}
	}
	return fs
}

// Sets reports whether v sets any value of family f.
func (v Values) Sets(f Family) bool { return v.only(fieldsOf(f)) != Values{} }

// Of is v's values of family f alone, with pointers of their own, so the result
// never aliases v.
func (v Values) Of(f Family) Values { return v.only(fieldsOf(f)).clone() }

// Without is v with the values of family f cleared.
func (v Values) Without(f Family) Values { return v.only(^fieldsOf(f)) }

// Same reports whether v and w set the same values of family f. Amounts compare
// numerically: 120.5 and 120.50 are one price.
func (v Values) Same(f Family, w Values) bool { return v.agree(fieldsOf(f), w, false) }

// Holds reports whether v, a channel's values, carries every value of family f
// that want sets; values want leaves unset are not want's to judge.
func (v Values) Holds(f Family, want Values) bool { return v.agree(fieldsOf(f), want, true) }

// familySet is the set behind Families, without allocating a slice.
func (v Values) familySet() familySet {
	var s familySet
	for i, d := range familyTable {
		if v.only(d.fields) != (Values{}) {
			s |= 1 << i
		}
	}
	return s
}

// changesNothing reports whether v sets no value; a currency alone is no value.
func (v Values) changesNothing() bool { return v.only(^fieldPrice) == Values{} && v.Amount == nil }

// urgent reports whether v stops selling: a stop-sell or no rooms left. Until it
// lands the channel can sell a room the hotel no longer has.
func (v Values) urgent() bool {
	return (v.StopSell != nil && *v.StopSell) || (v.Inventory != nil && *v.Inventory == 0)
}

// problems reports each value of v that breaks its rule, in field order.
func (v Values) problems(add func(field, rule string)) {
	if v.Amount != nil {
		if !v.Amount.IsPositive() {
			add("amount", RuleAmountPositive)
		}
		places, whole := decimalDigits(*v.Amount)
		// Without a known currency the places cannot be judged; the currency's own
		// problem is reported below.
		if minor, ok := MinorUnits(v.Currency); ok && places > minor {
			add("amount", RuleAmountPlaces)
		}
		if whole > MaxAmountWholeDigits {
			add("amount", RuleAmountDigits)
		}
	}
	switch {
	case v.Amount != nil && v.Currency == "":
		add("currency", RuleCurrencyWithAmt)
	case v.Amount == nil && v.Currency != "":
		add("currency", RuleCurrencyNoAmount)
	case v.Currency != "" && !IsCurrencyCode(v.Currency):
		add("currency", RuleCurrencyISO)
	}
	if v.Inventory != nil && (*v.Inventory < 0 || *v.Inventory > MaxInventory) {
		add("inventory", RuleInventoryRange)
	}
	minOK := v.MinLOS == nil || (*v.MinLOS >= 1 && *v.MinLOS <= MaxStayNights)
	maxOK := v.MaxLOS == nil || (*v.MaxLOS >= 1 && *v.MaxLOS <= MaxStayNights)
	if !minOK {
		add("min_los", RuleLOSRange)
	}
	if !maxOK {
		add("max_los", RuleLOSRange)
	}
	if minOK && maxOK && v.MinLOS != nil && v.MaxLOS != nil && *v.MinLOS > *v.MaxLOS {
		add("min_los", RuleMinLEMax)
	}
}

// only is v with the values outside fs cleared; it shares v's pointers.
func (v Values) only(fs valueField) Values {
	o := Values{Amount: pick(fs, fieldPrice, v.Amount), Inventory: pick(fs, fieldInventory, v.Inventory),
		StopSell: pick(fs, fieldStopSell, v.StopSell), MinLOS: pick(fs, fieldMinLOS, v.MinLOS),
		MaxLOS: pick(fs, fieldMaxLOS, v.MaxLOS), CTA: pick(fs, fieldCTA, v.CTA), CTD: pick(fs, fieldCTD, v.CTD)}
	if fs&fieldPrice != 0 {
		o.Currency = v.Currency
	}
	return o
}

// pick is p when fs holds field f, else nil.
func pick[T any](fs, f valueField, p *T) *T {
	if fs&f == 0 {
		return nil
	}
	return p
}

// clone is v with pointers of its own.
func (v Values) clone() Values {
	v.Amount, v.Inventory, v.StopSell = clonePtr(v.Amount), clonePtr(v.Inventory), clonePtr(v.StopSell)
	v.MinLOS, v.MaxLOS, v.CTA, v.CTD = clonePtr(v.MinLOS), clonePtr(v.MaxLOS), clonePtr(v.CTA), clonePtr(v.CTD)
	return v
}

// agree compares the values fs of v and w. With loose, a value w leaves unset
// agrees with anything (a channel holding what was asked); without, v and w must
// set and leave unset the same values.
func (v Values) agree(fs valueField, w Values, loose bool) bool {
	return (fs&fieldPrice == 0 || samePrice(v, w, loose)) &&
		(fs&fieldInventory == 0 || same(v.Inventory, w.Inventory, loose)) &&
		(fs&fieldStopSell == 0 || same(v.StopSell, w.StopSell, loose)) &&
		(fs&fieldMinLOS == 0 || same(v.MinLOS, w.MinLOS, loose)) &&
		(fs&fieldMaxLOS == 0 || same(v.MaxLOS, w.MaxLOS, loose)) &&
		(fs&fieldCTA == 0 || same(v.CTA, w.CTA, loose)) &&
		(fs&fieldCTD == 0 || same(v.CTD, w.CTD, loose))
}

func same[T comparable](v, w *T, loose bool) bool {
	switch {
	case w == nil:
		return loose || v == nil
	case v == nil:
		return false
	}
	return *v == *w
}

// samePrice compares amount and currency as one value; w sets a price when it sets
// an amount.
func samePrice(v, w Values, loose bool) bool {
	if w.Amount == nil {
		return loose || (v.Amount == nil && v.Currency == w.Currency)
	}
	return v.Amount != nil && v.Currency == w.Currency && v.Amount.Equal(*w.Amount)
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}

// familySet is a bit set of indexes into Families.
type familySet uint8

func (s familySet) has(i int) bool { return s&(1<<i) != 0 }
