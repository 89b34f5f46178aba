package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"

	"github.com/shopspring/decimal"

	"github.com/paritysync/paritysync/models"
)

// Bounds a strict channel enforces on every line.
const (
	maxIDLen     = 64
	maxInventory = 999
	maxLOS       = 999
)

var (
	currencyRE = regexp.MustCompile(`^[A-Z]{3}$`)
	maxAmount  = decimal.New(1, 8) // 100,000,000.00 exclusive
)

// invalidError is a 400 invalid answer; its message starts with the field at fault.
type invalidError struct{ msg string }

func (e *invalidError) Error() string { return e.msg }

func invalid(field, format string, args ...any) error {
	return &invalidError{msg: field + ": " + fmt.Sprintf(format, args...)}
}

// decodeRequest reads a push body strictly: unknown fields, trailing data and wrong
// types are errors that name the field, so a client bug is found on the first call.
func decodeRequest(body []byte, cfg models.ChannelConfig) (models.ARIRequest, error) {
	var top struct {
		PropertyID *string            `json:"property_id"`
		Family     *models.Family     `json:"family"`
		Lines      *[]json.RawMessage `json:"lines"`
	}
	if err := strictUnmarshal(body, &top); err != nil {
		return models.ARIRequest{}, fieldError("body", body, err)
	}
	var req models.ARIRequest
	switch {
	case top.PropertyID == nil || *top.PropertyID == "":
		return req, invalid("property_id", "required")
	case len(*top.PropertyID) > maxIDLen:
		return req, invalid("property_id", "longer than %d characters", maxIDLen)
	case top.Family == nil || *top.Family == "":
		return req, invalid("family", "required")
	case !top.Family.Known():
		return req, invalid("family", "unknown family %q", string(*top.Family))
	case top.Lines == nil || len(*top.Lines) == 0:
		return req, invalid("lines", "at least one line is required")
	case cfg.MaxLinesPerRequest > 0 && len(*top.Lines) > cfg.MaxLinesPerRequest:
		return req, invalid("lines", "%d lines, at most %d allowed", len(*top.Lines), cfg.MaxLinesPerRequest)
	}
	req = models.ARIRequest{PropertyID: *top.PropertyID, Family: *top.Family, Lines: make([]models.ARILine, len(*top.Lines))}
	for i, raw := range *top.Lines {
		name := fmt.Sprintf("lines[%d]", i)
		if err := strictUnmarshal(raw, &req.Lines[i]); err != nil {
			return req, fieldError(name, raw, err)
		}
		if err := validateLine(name, req.Family, req.Lines[i], cfg); err != nil {
			return req, err
		}
	}
	return req, nil
}

func strictUnmarshal(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

// fieldError turns a decode error of object raw into an invalid answer that names
// the offending field. encoding/json does not say which field a custom unmarshaler
// (dates, decimals) failed on, so each member is decoded alone to find it.
func fieldError(prefix string, raw []byte, err error) error {
	var unknown, typeErr = "", (*json.UnmarshalTypeError)(nil)
	if msg := err.Error(); strings.HasPrefix(msg, "json: unknown field ") {
		unknown = strings.Trim(strings.TrimPrefix(msg, "json: unknown field "), `"`)
	}
	if unknown != "" {
		return invalid(join(prefix, unknown), "unknown field")
	}
	if errors.As(err, &typeErr) && typeErr.Field != "" {
		return invalid(join(prefix, typeErr.Field), "want %s", typeErr.Type)
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(raw, &members) == nil && prefix != "body" {
		keys := make([]string, 0, len(members))
		for k := range members {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			var line models.ARILine
			one, _ := json.Marshal(map[string]json.RawMessage{k: members[k]})
			if e := json.Unmarshal(one, &line); e != nil {
				return invalid(join(prefix, k), "%s", cleanJSONError(e))
			}
		}
	}
	return invalid(prefix, "%s", cleanJSONError(err))
}

func join(prefix, field string) string {
	if prefix == "body" {
		return field
	}
	return prefix + "." + field
}

func cleanJSONError(err error) string {
	return strings.TrimPrefix(err.Error(), "json: ")
}

// validateLine applies the channel's rules to one line; fields of another family
// are refused rather than ignored, because silently dropping them hides a bug.
func validateLine(name string, fam models.Family, l models.ARILine, cfg models.ChannelConfig) error {
	switch {
	case l.RoomTypeCode == "":
		return invalid(name+".room_type_code", "required")
	case len(l.RoomTypeCode) > maxIDLen:
		return invalid(name+".room_type_code", "longer than %d characters", maxIDLen)
	case l.RatePlanCode == "":
		return invalid(name+".rate_plan_code", "required")
	case len(l.RatePlanCode) > maxIDLen:
		return invalid(name+".rate_plan_code", "longer than %d characters", maxIDLen)
	case l.From.IsZero():
		return invalid(name+".from", "required")
	case l.To.IsZero():
		return invalid(name+".to", "required")
	case l.To.Before(l.From):
		return invalid(name+".to", "before from")
	case l.Nights() > cfg.HorizonDays:
		return invalid(name+".to", "line spans %d nights, at most %d", l.Nights(), cfg.HorizonDays)
	case l.Version < 1:
		return invalid(name+".version", "must be >= 1")
	}
	rule := lineRules.Of(fam)
	if rule.check == nil {
		return nil
	}
	if l.Without(fam) != (models.Values{}) {
		return invalid(name, "%s", rule.foreign)
	}
	return rule.check(name, l)
}

// lineRule is a strict channel's rule for the lines of one family.
type lineRule struct {
	foreign string // the answer to a line carrying another family's values
	check   func(name string, l models.ARILine) error
}

var lineRules = models.ByFamily[lineRule]{
	Rates: lineRule{"availability or restriction fields in a rates request", func(name string, l models.ARILine) error {
		switch {
		case l.Amount == nil:
			return invalid(name+".amount", "required")
		case !currencyRE.MatchString(l.Currency):
			return invalid(name+".currency", "want a 3-letter ISO 4217 code")
		}
		if err := validAmount(*l.Amount, l.Currency); err != nil {
			return invalid(name+".amount", "%s", err)
		}
		return nil
	}},
	Availability: lineRule{"rate or restriction fields in an availability request", func(name string, l models.ARILine) error {
		switch {
		case l.Inventory == nil:
			return invalid(name+".inventory", "required")
		case *l.Inventory < 0 || *l.Inventory > maxInventory:
			return invalid(name+".inventory", "must be in 0..%d", maxInventory)
		}
		return nil
	}},
	Restrictions: lineRule{"rate or availability fields in a restrictions request", func(name string, l models.ARILine) error {
		switch {
		case !l.Sets(models.FamilyRestrictions):
			return invalid(name, "no restriction set")
		case l.MinLOS != nil && (*l.MinLOS < 1 || *l.MinLOS > maxLOS):
			return invalid(name+".min_los", "must be in 1..%d", maxLOS)
		case l.MaxLOS != nil && (*l.MaxLOS < 1 || *l.MaxLOS > maxLOS):
			return invalid(name+".max_los", "must be in 1..%d", maxLOS)
		case l.MinLOS != nil && l.MaxLOS != nil && *l.MinLOS > *l.MaxLOS:
			return invalid(name+".max_los", "below min_los")
		}
		return nil
	}},
}

// validAmountAnyPlaces checks range and sign, leaving places to the caller.
func validAmountAnyPlaces(a decimal.Decimal) error {
	if exp := a.Exponent(); exp < -20 || exp > 20 {
		return errors.New("out of range")
	}
	switch {
	case !a.IsPositive():
		return errors.New("must be > 0")
	case !a.LessThan(maxAmount):
		return errors.New("must be < 100000000")
	}
	return nil
}

// validAmount checks an amount in currency: range, sign and no more places than the
// currency's minor units (JPY 0, EUR 2, KWD 3).
func validAmount(a decimal.Decimal, currency string) error {
	// Bound the exponent before rounding: a value like 1e-999999999 would otherwise
	// make Round allocate a huge coefficient.
	if err := validAmountAnyPlaces(a); err != nil {
		return err
	}
	places, ok := models.MinorUnits(currency)
	if !ok {
		return fmt.Errorf("currency %s: unknown", currency)
	}
	if !a.Equal(a.Round(int32(places))) {
		return fmt.Errorf("at most %d decimal places in %s", places, currency)
	}
	return nil
}
