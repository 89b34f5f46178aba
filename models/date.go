package models

import (
	"encoding/json"
	"fmt"
	"time"
)

// Date is a calendar date with no time of day and no time zone: a stay date.
type Date struct {
	Year  int
	Month time.Month
	Day   int
}

// DateLayout is the wire form of a Date.
const DateLayout = "2006-01-02"

// ParseDate reads a YYYY-MM-DD date.
func ParseDate(s string) (Date, error) {
	t, err := time.Parse(DateLayout, s)
	if err != nil {
		return Date{}, fmt.Errorf("date %q: want YYYY-MM-DD", s)
	}
	return DateOf(t), nil
}

// DateOf is the calendar date of t in UTC.
func DateOf(t time.Time) Date {
	y, m, d := t.UTC().Date()
	return Date{Year: y, Month: m, Day: d}
}

// Time is midnight UTC at the start of d.
func (d Date) Time() time.Time { return time.Date(d.Year, d.Month, d.Day, 0, 0, 0, 0, time.UTC) }

// AddDays is the date n days after d.
func (d Date) AddDays(n int) Date { return DateOf(d.Time().AddDate(0, 0, n)) }

// DaysSince is the number of days from o to d.
func (d Date) DaysSince(o Date) int { return int(d.Time().Sub(o.Time()).Hours() / 24) }

// Before reports whether d is earlier than o.
func (d Date) Before(o Date) bool { return d.Time().Before(o.Time()) }

// After reports whether d is later than o.
func (d Date) After(o Date) bool { return d.Time().After(o.Time()) }

// IsZero reports whether d is unset.
func (d Date) IsZero() bool { return d == Date{} }

// String is the YYYY-MM-DD form.
func (d Date) String() string { return fmt.Sprintf("%04d-%02d-%02d", d.Year, int(d.Month), d.Day) }

// MarshalJSON writes "YYYY-MM-DD", or "" for the zero Date so that it reads back.
func (d Date) MarshalJSON() ([]byte, error) {
	if d.IsZero() {
		return []byte(`""`), nil
	}
	return json.Marshal(d.String())
}

// UnmarshalJSON reads "YYYY-MM-DD".
func (d *Date) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("date: want a \"YYYY-MM-DD\" string")
	}
	if s == "" {
		*d = Date{}
		return nil
	}
	v, err := ParseDate(s)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// MarshalText writes YYYY-MM-DD (XML attributes, query parameters), or nothing for
// the zero Date.
func (d Date) MarshalText() ([]byte, error) {
	if d.IsZero() {
		return nil, nil
	}
	return []byte(d.String()), nil
}

// UnmarshalText reads YYYY-MM-DD; empty is the zero Date.
func (d *Date) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*d = Date{}
		return nil
	}
	v, err := ParseDate(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}
