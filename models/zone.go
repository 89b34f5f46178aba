package models

import (
	"fmt"
	"strings"
	"time"
)

// PropertyZones knows each property's IANA time zone, which decides the property's
// "today": a hotel in Los Angeles may still close tonight at 22:00 local time, when
// the date in UTC is already tomorrow. The zero value puts every property in UTC.
type PropertyZones struct {
	fallback   *time.Location
	byProperty map[string]*time.Location
}

// ParsePropertyZones reads the default zone (PARITYSYNC_TIME_ZONE, "" means UTC) and
// a list of property=Zone pairs separated by commas (PARITYSYNC_PROPERTY_ZONES), e.g.
// "prop_1a2b3c4d=America/Los_Angeles,prop_5e6f7a8b=Europe/Paris". Every bad entry is
// reported, naming the variable and the entry.
func ParsePropertyZones(fallback, list string) (PropertyZones, error) {
	var z PropertyZones
	var errs []string
	if fallback = strings.TrimSpace(fallback); fallback != "" {
		loc, err := time.LoadLocation(fallback)
		if err != nil {
			errs = append(errs, fmt.Sprintf("PARITYSYNC_TIME_ZONE: %q is not an IANA time zone", fallback))
		} else {
			z.fallback = loc
		}
	}
	for entry := range strings.SplitSeq(list, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		prop, name, ok := strings.Cut(entry, "=")
		prop, name = strings.TrimSpace(prop), strings.TrimSpace(name)
		if !ok || prop == "" || name == "" {
			errs = append(errs, fmt.Sprintf("PARITYSYNC_PROPERTY_ZONES: entry %q: want property_id=Area/City", entry))
			continue
		}
		loc, err := time.LoadLocation(name)
		if err != nil {
			errs = append(errs, fmt.Sprintf("PARITYSYNC_PROPERTY_ZONES: entry %q: %q is not an IANA time zone", entry, name))
			continue
		}
		if _, dup := z.byProperty[prop]; dup {
			errs = append(errs, fmt.Sprintf("PARITYSYNC_PROPERTY_ZONES: property %s listed twice", prop))
			continue
		}
		if z.byProperty == nil {
			z.byProperty = map[string]*time.Location{}
		}
		z.byProperty[prop] = loc
	}
	if len(errs) > 0 {
		return PropertyZones{}, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return z, nil
}

// Default is the zone of properties not listed by name.
func (z PropertyZones) Default() *time.Location {
	if z.fallback == nil {
		return time.UTC
	}
	return z.fallback
}

// Listed is how many properties have a zone of their own.
func (z PropertyZones) Listed() int { return len(z.byProperty) }

// Of is property's time zone.
func (z PropertyZones) Of(property string) *time.Location {
	if loc, ok := z.byProperty[property]; ok {
		return loc
	}
	return z.Default()
}

// Today is the calendar date at the property at instant now.
func (z PropertyZones) Today(property string, now time.Time) Date {
	y, m, d := now.In(z.Of(property)).Date()
	return Date{Year: y, Month: m, Day: d}
}
