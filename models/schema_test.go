package models

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// compileMutationSchema compiles MutationSchema against the draft 2020-12
// meta-schema, with formats asserted (draft 2020-12 only annotates them by default).
func compileMutationSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(MutationSchema()))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource("mutation.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("mutation.schema.json")
	if err != nil {
		t.Fatalf("the schema is not a valid draft 2020-12 schema: %v", err)
	}
	return sch
}

// schemaFields names the fields a schema error is about, as Check names them:
// FieldMutation for the object as a whole.
func schemaFields(err error) []string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return nil
	}
	var fields []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		switch k := e.ErrorKind.(type) {
		case *kind.AnyOf:
			fields = append(fields, FieldMutation)
			return
		case *kind.Required:
			fields = append(fields, k.Missing...)
		case *kind.DependentRequired:
			fields = append(fields, append(k.Missing, k.Prop)...)
		case *kind.AdditionalProperties:
			fields = append(fields, k.Properties...)
		default:
			if len(e.Causes) == 0 {
				if len(e.InstanceLocation) > 0 {
					fields = append(fields, e.InstanceLocation[0])
				} else {
					fields = append(fields, FieldMutation)
				}
			}
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	return fields
}

func TestMutationSchemaNamesEveryFieldTheDecoderReads(t *testing.T) {
	sch := compileMutationSchema(t)
	var props []string
	for name := range sch.Properties {
		props = append(props, name)
	}
	slices.Sort(props)
	fields := MutationFields()
	slices.Sort(fields)
	if !slices.Equal(props, fields) {
		t.Fatalf("schema properties %v, decoder fields %v", props, fields)
	}
	if sch.AdditionalProperties != false {
		t.Errorf("additionalProperties is %v, want false", sch.AdditionalProperties)
	}
	b := MutationSchema()
	b[0] = 'x'
	if MutationSchema()[0] == 'x' {
		t.Error("MutationSchema hands out the embedded bytes")
	}
}

// TestMutationSchemaAgreesWithDecodeAndValidate runs each mutation through the schema
// and through DecodeMutations and Validator.Check. Where the schema can express the
// rule they agree: both accept, or both refuse and the schema names the field Check
// names. Where it cannot, why says so, and the schema accepts what Check refuses.
func TestMutationSchemaAgreesWithDecodeAndValidate(t *testing.T) {
	sch := compileMutationSchema(t)
	v := newTestValidator(t)
	restrictions := func(set string) string {
		return row("m1", `"amount":"129.90","currency":"EUR",`, set)
	}
	for _, tc := range []struct {
		name string
		json string
		want []FieldError // Check's problems; none: valid
		why  string       // why the schema cannot tell, when it accepts what Check refuses
	}{
		{"rates", row("m1"), nil, ""},
		{"restrictions", restrictions(`"stop_sell":true,"min_los":2,"max_los":3,"cta":false,"ctd":true,`), nil, ""},
		{"inventory 0 and 999", restrictions(`"inventory":0,`), nil, ""},
		{"JPY without places", row("m1", `"129.90"`, `"12000"`, "EUR", "JPY"), nil, ""},
		{"amount below one", row("m1", `"129.90"`, `"0.5"`), nil, ""},
		{"amount with leading zeros", row("m1", `"129.90"`, `"00000000012.50"`), nil, ""},
		{"amount of 8 digits", row("m1", `"129.90"`, `"99999999.99"`), nil, ""},
		{"version written 1e2", row("m1", `"version":3`, `"version":1e2`), nil, ""},
		{"version at the ceiling", row("m1", `"version":3`, `"version":4102444800000000000`), nil, ""},
		{"version of a millisecond clock", row("m1", `"version":3`, `"version":1796083200000`), nil, ""},
		{"version of a nanosecond clock", row("m1", `"version":3`, `"version":1796083200123456789`), nil, ""},
		{"id of 128 characters", row(strings.Repeat("a", 128)), nil, ""},
		{"id of every allowed character", row("Az09._:@~-"), nil, ""},
		{"correlation_id of 128 characters", row("m1", `"version":3`, `"version":3,"correlation_id":"`+strings.Repeat("é", 128)+`"`), nil, ""},
		{"property_id of 64 characters", row("m1", "prop_1a2b3c4d", "prop_1a2b3c4d"+strings.Repeat("0", 51)), []FieldError{{"property_id", RulePropertyPattern}},
			"the property pattern is configured"},
		{"priority 0 is absent", row("m1", `"version":3`, `"version":3,"priority":0`), nil, ""},
		{"every optional field", row("m1", `"version":3`, `"version":3,"inventory":4,"stop_sell":false,"min_los":1,"max_los":365,`+
			`"cta":true,"ctd":false,"priority":5,"full_sync":true,"correlation_id":""`), nil, ""},

		{"range of weekends", row("m1", `"stay_date":"2026-04-01"`, `"from":"2026-04-01","to":"2026-10-31","days":["sat","sun"]`), nil, ""},
		{"range of every day", row("m1", `"stay_date":"2026-04-01"`, `"from":"2026-04-01","to":"2026-04-01"`), nil, ""},
		{"range with stay_date", row("m1", `"stay_date":"2026-04-01"`, `"stay_date":"2026-04-01","from":"2026-04-01","to":"2026-04-02"`),
			[]FieldError{{"stay_date", RuleNotWithRange}}, ""},
		{"from without to", row("m1", `"stay_date":"2026-04-01"`, `"from":"2026-04-01"`), []FieldError{{"to", RuleRequiredWithFrm}}, ""},
		{"days with stay_date", row("m1", `"stay_date":"2026-04-01"`, `"stay_date":"2026-04-01","days":["sat"]`),
			[]FieldError{{"days", RuleDaysWithRange}}, ""},
		{"unknown day", row("m1", `"stay_date":"2026-04-01"`, `"from":"2026-04-01","to":"2026-04-30","days":["sat","fun"]`),
			[]FieldError{{"days", RuleDays}}, ""},
		{"unknown field", row("m1", `"version":3`, `"version":3,"colour":"red"`), []FieldError{{"colour", RuleUnknownField}}, ""},
		{"amount as a number", row("m1", `"129.90"`, `129.90`), []FieldError{{"amount", RuleJSONString}}, ""},
		{"amount with an exponent", row("m1", `"129.90"`, `"1.2e2"`), []FieldError{{"amount", RuleAmountFormat}}, ""},
		{"amount with a plus sign", row("m1", `"129.90"`, `"+12"`), []FieldError{{"amount", RuleAmountFormat}}, ""},
		{"amount with a space", row("m1", `"129.90"`, `" 12"`), []FieldError{{"amount", RuleAmountFormat}}, ""},
		{"amount without a whole part", row("m1", `"129.90"`, `".5"`), []FieldError{{"amount", RuleAmountFormat}}, ""},
		{"amount over 32 characters", row("m1", `"129.90"`, `"1.`+strings.Repeat("0", 31)+`"`), []FieldError{{"amount", RuleAmountFormat}}, ""},
		{"negative amount", row("m1", `"129.90"`, `"-5"`), []FieldError{{"amount", RuleAmountPositive}}, ""},
		{"zero amount", row("m1", `"129.90"`, `"0.00"`), []FieldError{{"amount", RuleAmountPositive}}, ""},
		{"amount of 9 digits", row("m1", `"129.90"`, `"123456789"`), []FieldError{{"amount", RuleAmountDigits}}, ""},
		{"amount without currency", row("m1", `,"currency":"EUR"`, ``), []FieldError{{"currency", RuleCurrencyWithAmt}}, ""},
		{"currency without amount", restrictions(`"inventory":3,"currency":"EUR",`), []FieldError{{"currency", RuleCurrencyNoAmount}}, ""},
		{"currency in lower case", row("m1", `"EUR"`, `"eur"`), []FieldError{{"currency", RuleCurrencyISO}}, ""},
		{"null currency", row("m1", `"EUR"`, `null`), []FieldError{{"currency", RuleJSONString}}, ""},
		{"version as a string", row("m1", `"version":3`, `"version":"3"`), []FieldError{{"version", RuleJSONInteger}}, ""},
		{"version with a fraction", row("m1", `"version":3`, `"version":3.5`), []FieldError{{"version", RuleJSONInteger}}, ""},
		{"version 0", row("m1", `"version":3`, `"version":0`), []FieldError{{"version", RuleVersion}}, ""},
		{"version int64 max", row("m1", `"version":3`, `"version":9223372036854775807`), []FieldError{{"version", RuleVersionMax}}, ""},
		{"version past the ceiling", row("m1", `"version":3`, `"version":4102444800000000001`), []FieldError{{"version", RuleVersionMax}}, ""},
		{"id of 129 characters", row(strings.Repeat("a", 129)), []FieldError{{"id", RuleIDFormat}}, ""},
		{"id of 900 000 characters", row(strings.Repeat("a", 900_000)), []FieldError{{"id", RuleIDFormat}}, ""},
		{"id with a NUL", row("m1", `"m1"`, `"m\u0000"`), []FieldError{{"id", RuleIDFormat}}, ""},
		{"id with a line feed", row("m1", `"m1"`, `"m\n1"`), []FieldError{{"id", RuleIDFormat}}, ""},
		{"id with a slash", row("m1/2"), []FieldError{{"id", RuleIDFormat}}, ""},
		{"id with a space", row("m 1"), []FieldError{{"id", RuleIDFormat}}, ""},
		{"id starting with a dot", row(".."), []FieldError{{"id", RuleIDFormat}}, ""},
		{"id not ASCII", row("mé"), []FieldError{{"id", RuleIDFormat}}, ""},
		{"property_id of 65 characters", row("m1", "prop_1a2b3c4d", "prop_1a2b3c4d"+strings.Repeat("0", 52)), []FieldError{{"property_id", RulePropertyLength}}, ""},
		{"correlation_id of 129 characters", row("m1", `"version":3`, `"version":3,"correlation_id":"`+strings.Repeat("x", 129)+`"`), []FieldError{{"correlation_id", RuleCorrelationID}}, ""},
		{"correlation_id with a line feed", row("m1", `"version":3`, `"version":3,"correlation_id":"a\nb"`), []FieldError{{"correlation_id", RuleCorrelationID}}, ""},
		{"version over int64", row("m1", `"version":3`, `"version":9223372036854775808`), []FieldError{{"version", RuleIntegerRange}}, ""},
		{"version missing", row("m1", `,"version":3`, ``), []FieldError{{"version", RuleVersion}}, ""},
		{"inventory 1000", restrictions(`"inventory":1000,`), []FieldError{{"inventory", RuleInventoryRange}}, ""},
		{"inventory -1", restrictions(`"inventory":-1,`), []FieldError{{"inventory", RuleInventoryRange}}, ""},
		{"inventory as a boolean", restrictions(`"inventory":true,`), []FieldError{{"inventory", RuleJSONInteger}}, ""},
		{"inventory of 1e30", restrictions(`"inventory":1e30,`), []FieldError{{"inventory", RuleIntegerRange}}, ""},
		{"min_los 0", restrictions(`"min_los":0,`), []FieldError{{"min_los", RuleLOSRange}}, ""},
		{"max_los 366", restrictions(`"max_los":366,`), []FieldError{{"max_los", RuleLOSRange}}, ""},
		{"stop_sell as a string", restrictions(`"stop_sell":"true",`), []FieldError{{"stop_sell", RuleJSONBoolean}}, ""},
		{"priority 6", row("m1", `"version":3`, `"version":3,"priority":6`), []FieldError{{"priority", RulePriority}}, ""},
		{"priority -1", row("m1", `"version":3`, `"version":3,"priority":-1`), []FieldError{{"priority", RulePriority}}, ""},
		{"full_sync as 1", row("m1", `"version":3`, `"version":3,"full_sync":1`), []FieldError{{"full_sync", RuleJSONBoolean}}, ""},
		{"id missing", row("m1", `"id":"m1",`, ``), []FieldError{{"id", RuleRequired}}, ""},
		{"id empty", row(""), []FieldError{{"id", RuleRequired}}, ""},
		{"id as a number", row("m1", `"m1"`, `1`), []FieldError{{"id", RuleJSONString}}, ""},
		{"property_id empty", row("m1", `"prop_1a2b3c4d"`, `""`), []FieldError{{"property_id", RuleRequired}}, ""},
		{"channel missing", row("m1", `"channel":"expedia",`, ``), []FieldError{{"channel", RuleRequired}},
			"intake fans a mutation without channel out to the property's mapped channels before it is validated"},
		{"room type in lower case", row("m1", "DLXKING", "dlxking"), []FieldError{{"room_type_code", RuleRoomTypeCode}}, ""},
		{"room type of 1 character", row("m1", "DLXKING", "D"), []FieldError{{"room_type_code", RuleRoomTypeCode}}, ""},
		{"room type missing", row("m1", `"room_type_code":"DLXKING",`, ``), []FieldError{{"room_type_code", RuleRoomTypeCode}}, ""},
		{"rate plan of 25 characters", row("m1", "BAR_FLEX", strings.Repeat("B", 25)), []FieldError{{"rate_plan_code", RuleRatePlanCode}}, ""},
		{"date in another format", row("m1", "2026-04-01", "01/04/2026"), []FieldError{{"stay_date", RuleDate}}, ""},
		{"date that does not exist", row("m1", "2026-04-01", "2026-02-30"), []FieldError{{"stay_date", RuleDate}}, ""},
		{"date with a time", row("m1", "2026-04-01", "2026-04-01T00:00:00Z"), []FieldError{{"stay_date", RuleDate}}, ""},
		{"date empty", row("m1", `"2026-04-01"`, `""`), []FieldError{{"stay_date", RuleRequired}}, ""},
		{"nothing to change", row("m1", `"amount":"129.90","currency":"EUR",`, ``), []FieldError{{FieldMutation, RuleNothingToChange}}, ""},
		{"null row", `null`, []FieldError{{FieldMutation, RuleJSONObject}}, ""},
		{"array row", `[{"id":"m1"}]`, []FieldError{{FieldMutation, RuleJSONObject}}, ""},

		{"currency not in ISO 4217", row("m1", `"EUR"`, `"ABC"`), []FieldError{{"currency", RuleCurrencyISO}},
			"the list of active ISO 4217 codes is the server's"},
		{"JPY with places", row("m1", `"129.90"`, `"12000.50"`, "EUR", "JPY"), []FieldError{{"amount", RuleAmountPlaces}},
			"the places allowed depend on the currency"},
		{"min_los above max_los", restrictions(`"min_los":5,"max_los":3,`), []FieldError{{"min_los", RuleMinLEMax}},
			"it compares two fields"},
		{"past date", row("m1", "2026-04-01", "2026-03-09"), []FieldError{{"stay_date", RuleNotPast}},
			"it depends on today at the property"},
		{"beyond the horizon", row("m1", "2026-04-01", "2028-03-11"), []FieldError{{"stay_date", RuleWithinHorizon}},
			"it depends on the channel's configured horizon"},
		{"range from after to", row("m1", `"stay_date":"2026-04-01"`, `"from":"2026-04-02","to":"2026-04-01"`),
			[]FieldError{{"from", RuleFromLETo}}, "it compares two fields"},
		{"range with no night on its days", row("m1", `"stay_date":"2026-04-01"`, `"from":"2026-04-06","to":"2026-04-10","days":["sat"]`),
			[]FieldError{{"days", RuleRangeNoNight}}, "it depends on the calendar"},
		{"range entirely past", row("m1", `"stay_date":"2026-04-01"`, `"from":"2026-03-01","to":"2026-03-09"`),
			[]FieldError{{"from", RuleRangeOutside}}, "it depends on today at the property"},
		{"unknown channel", row("m1", "expedia", "nowhere"), []FieldError{{"channel", RuleChannelUnknown}},
			"channels are configured"},
		{"property id off the pattern", row("m1", "prop_1a2b3c4d", "hotel-1"), []FieldError{{"property_id", RulePropertyPattern}},
			"the property pattern is configured"},
		{"repeated key", row("m1", `"version":3`, `"version":3,"version":4`), []FieldError{{"version", RuleDuplicateKey}},
			"a JSON parser keeps one of the two values"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := DecodeMutations([]byte("["+tc.json+"]"), DecodeLimits{})
			if err != nil {
				t.Fatalf("body refused: %v", err)
			}
			_, problems := v.Check(d)
			var got []FieldError
			for _, p := range problems {
				got = append(got, FieldError{Field: p.Field, Rule: p.Rule})
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Check: got %v, want %v", got, tc.want)
			}

			inst, err := jsonschema.UnmarshalJSON(strings.NewReader(tc.json))
			if err != nil {
				t.Fatal(err)
			}
			schemaErr := sch.Validate(inst)
			if tc.why != "" {
				if schemaErr != nil {
					t.Fatalf("the schema refuses what it was said not to express (%s): %v", tc.why, schemaErr)
				}
				return
			}
			if (schemaErr == nil) != (len(tc.want) == 0) {
				t.Fatalf("the schema disagrees with Check %v: %v", tc.want, schemaErr)
			}
			fields := schemaFields(schemaErr)
			for _, p := range tc.want {
				if !slices.Contains(fields, p.Field) {
					t.Errorf("the schema names %v, Check names %s: %v", fields, p.Field, schemaErr)
				}
			}
		})
	}
}
