package models

import (
	"testing"

	"github.com/shopspring/decimal"
)

func TestMinorUnits(t *testing.T) {
	for code, want := range map[string]int{"JPY": 0, "KRW": 0, "EUR": 2, "USD": 2, "GBP": 2, "KWD": 3, "BHD": 3, "TND": 3} {
		if got, ok := MinorUnits(code); !ok || got != want {
			t.Errorf("MinorUnits(%s) = %d, %v; want %d", code, got, ok, want)
		}
	}
	for _, code := range []string{"", "EU", "eur", "ZZZ"} {
		if _, ok := MinorUnits(code); ok {
			t.Errorf("MinorUnits(%q) ok, want unknown", code)
		}
	}
}

// TestValidateAmountFollowsCurrencyMinorUnits is the money rule: the places an amount
// may carry are its currency's, not a fixed two.
func TestValidateAmountFollowsCurrencyMinorUnits(t *testing.T) {
	v := newTestValidator(t)
	cases := []struct {
		amount, currency string
		ok               bool
	}{
		{"12000", "JPY", true},
		{"12000.00", "JPY", true}, // trailing zeros are not places
		{"12000.50", "JPY", false},
		{"120.50", "EUR", true},
		{"120.505", "EUR", false},
		{"45.125", "KWD", true},
		{"45.1255", "KWD", false},
		{"99999999.999", "KWD", true},
		{"100000000", "KWD", false}, // nine whole digits
	}
	for _, c := range cases {
		m := validMutation()
		m.Amount, m.Currency = dec(c.amount), c.currency
		ve := v.Validate(m)
		if c.ok && ve != nil {
			t.Errorf("%s %s: %v, want valid", c.amount, c.currency, ve)
		}
		if !c.ok && ve == nil {
			t.Errorf("%s %s: valid, want a problem with amount", c.amount, c.currency)
		}
		if !c.ok && ve != nil && ve[0].Field != "amount" {
			t.Errorf("%s %s: %v, want the problem on amount", c.amount, c.currency, ve)
		}
	}
}

func TestFormatAmountWritesTheCurrencysPlaces(t *testing.T) {
	for _, c := range []struct{ in, cur, want string }{
		{"12000", "JPY", "12000"}, {"120.5", "EUR", "120.50"}, {"45.125", "KWD", "45.125"}, {"7", "KWD", "7.000"},
	} {
		if got := FormatAmount(decimal.RequireFromString(c.in), c.cur); got != c.want {
			t.Errorf("FormatAmount(%s %s) = %s, want %s", c.in, c.cur, got, c.want)
		}
	}
}
