package models

import (
	"github.com/shopspring/decimal"
	"golang.org/x/text/currency"
)

// MinorUnits is how many decimal places an amount in the ISO 4217 currency code may
// carry: JPY 0, EUR 2, KWD 3. The figures are golang.org/x/text/currency's copy of
// the CLDR data, so they follow the standard rather than a list kept here; ok is
// false for a code that is not an active currency (IsCurrencyCode).
func MinorUnits(code string) (places int, ok bool) {
	if !IsCurrencyCode(code) {
		return 0, false
	}
	u, err := currency.ParseISO(code)
	if err != nil {
		return 0, false
	}
	scale, _ := currency.Standard.Rounding(u)
	return scale, true
}

// FormatAmount writes amount with exactly the minor units of its currency, as
// channels that take a decimal string want it ("12000" JPY, "120.50" EUR, "45.125"
// KWD). A currency the data does not know keeps two places. It rounds an amount
// with more places: check FitsMinorUnits first, a price must never change on the
// way.
func FormatAmount(amount decimal.Decimal, code string) string {
	places, ok := MinorUnits(code)
	if !ok {
		places = 2
	}
	return amount.StringFixed(int32(places))
}

// FitsMinorUnits reports whether amount has no more significant decimal places than
// code allows; trailing zeros do not count ("120.50" EUR fits, "12000.50" JPY does
// not). An unknown currency fits nothing.
func FitsMinorUnits(amount decimal.Decimal, code string) bool {
	places, ok := MinorUnits(code)
	if !ok {
		return false
	}
	p, _ := decimalDigits(amount)
	return p <= places
}
