package models

import (
	"strings"
	"testing"
)

// testChannexMapping maps prop_0a1b2c3d's DLXKING room and its BAR_FLEX plan.
func testChannexMapping() ChannexMapping {
	return ChannexMapping{Properties: map[string]ChannexProperty{
		"prop_0a1b2c3d": {
			PropertyID: "716305c4-561a-4561-a187-7f5b8aeb5920", Currency: "EUR",
			RoomTypes: map[string]string{"DLXKING": "994d1375-dbbd-4072-8724-b2ab32ce781b"},
			RatePlans: map[string]string{"DLXKING/BAR_FLEX": "bab451e7-9ab1-4cc4-aa16-107bf7bbabb2"},
		},
	}}
}

func TestChannelValidateNamesProtocolFieldAndRule(t *testing.T) {
	cases := []struct {
		name string
		mod  func(*ChannelConfig)
		want string
	}{
		{"unknown protocol", func(c *ChannelConfig) { c.Protocol = "soap" }, "protocol: must be paritysync, channex or opentravel"},
		{"bad base url", func(c *ChannelConfig) { c.BaseURL = "ftp://x" }, "base_url: must be an http(s) URL"},
		{"opentravel read-back", func(c *ChannelConfig) { c.Protocol, c.Channex = ProtocolOpenTravel, ChannexMapping{} },
			"read_back: must be false: protocol opentravel has no read-back"},
		{"mapping on another protocol", func(c *ChannelConfig) { c.Protocol = ProtocolParitySync }, "channex: only for protocol channex"},
		{"channel scope", func(c *ChannelConfig) { c.Scope = ScopeChannel }, "scope: must be property"},
		{"too fast", func(c *ChannelConfig) { c.RatePerMinute = 11 }, "rate_per_minute: must be at most 10"},
		{"property id", func(c *ChannelConfig) {
			p := c.Channex.Properties["prop_0a1b2c3d"]
			p.PropertyID = "42"
			c.Channex.Properties["prop_0a1b2c3d"] = p
		}, "channex.properties.prop_0a1b2c3d.property_id: must be a UUID"},
		{"currency", func(c *ChannelConfig) {
			p := c.Channex.Properties["prop_0a1b2c3d"]
			p.Currency = "EURO"
			c.Channex.Properties["prop_0a1b2c3d"] = p
		}, "channex.properties.prop_0a1b2c3d.currency: must be an active ISO 4217 code"},
		{"rate plan of unmapped room", func(c *ChannelConfig) {
			c.Channex.Properties["prop_0a1b2c3d"].RatePlans["STD/BAR"] = "bab451e7-9ab1-4cc4-aa16-107bf7bbabb3"
		}, "channex.properties.prop_0a1b2c3d.rate_plans.STD/BAR: room type STD must be in room_types"},
		{"rate plan key", func(c *ChannelConfig) {
			c.Channex.Properties["prop_0a1b2c3d"].RatePlans["BAR"] = "bab451e7-9ab1-4cc4-aa16-107bf7bbabb3"
		}, "channex.properties.prop_0a1b2c3d.rate_plans.BAR: key must be ROOM/PLAN"},
		{"room type id", func(c *ChannelConfig) {
			c.Channex.Properties["prop_0a1b2c3d"].RoomTypes["DLXKING"] = "dlx"
		}, "channex.properties.prop_0a1b2c3d.room_types.DLXKING: must be a UUID"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := NewChannexChannel("channex_eu", testChannexMapping())
			if err := cfg.Validate(); err != nil {
				t.Fatalf("house Channex defaults invalid: %v", err)
			}
			c.mod(&cfg)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), "channel channex_eu: "+c.want) {
				t.Errorf("Validate = %v, want %q", err, c.want)
			}
		})
	}
}

func TestValidateRejectsWhatChannexCannotTake(t *testing.T) {
	chs := append(DefaultChannels(), NewChannexChannel("channex_eu", testChannexMapping()))
	v := newValidatorFor(t, chs, "")
	m := validMutation()
	m.Channel = "channex_eu"
	if ve := v.Validate(m); ve != nil {
		t.Fatalf("mapped mutation: %v", ve)
	}
	cases := []ruleCase{
		{"property", func(m *Mutation) { m.PropertyID = "prop_ffffffff" }, "property_id", RuleChannexUnmapped},
		{"room type", func(m *Mutation) { m.RoomTypeCode = "STD" }, "room_type_code", RuleChannexUnmapped},
		{"rate plan", func(m *Mutation) { m.RatePlanCode = "NRF" }, "rate_plan_code", RuleChannexUnmapped},
		{"currency", func(m *Mutation) { m.Currency = "USD" }, "currency", RuleChannexCurrency},
	}
	for _, c := range cases {
		m := validMutation()
		m.Channel = "channex_eu"
		c.mod(&m)
		if ve := v.Validate(m); !ve.Has(c.field, c.rule) {
			t.Errorf("%s: %v, want %s: %s", c.name, ve, c.field, c.rule)
		}
	}
}

// TestChannexChannelWithoutYAMLMappingIsValid: a Channex channel may start with no
// property in its YAML; its properties then come over the API (PostgreSQL).
func TestChannexChannelWithoutYAMLMappingIsValid(t *testing.T) {
	if err := NewChannexChannel("channex_eu", ChannexMapping{}).Validate(); err != nil {
		t.Fatalf("a Channex channel without YAML properties: %v", err)
	}
	p := testChannexMapping().Properties["prop_0a1b2c3d"]
	if f, r := p.Problem(); f != "" {
		t.Fatalf("sound codes refused: %s %s", f, r)
	}
	p.Currency = "EURO"
	if f, _ := p.Problem(); f != "currency" {
		t.Fatalf("Problem named %q, want currency", f)
	}
}
