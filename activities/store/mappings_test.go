package store

import (
	"context"
	"testing"
	"time"

	"github.com/paritysync/paritysync/models"
)

// TestMappingsLayStoredCodesOverTheYAMLAndSeeANewPropertyAtOnce: the YAML's
// Channex property stays in force, a property stored over the API joins it (and
// wins over the YAML for its own id); a property the cache does not map is looked
// up at once, a remapped one within the TTL.
func TestMappingsLayStoredCodesOverTheYAMLAndSeeANewPropertyAtOnce(t *testing.T) {
	ctx := context.Background()
	s := testStore(t)
	uuid := func(last string) string { return "6f1c5e0a-2b7d-4c1e-9a3f-0d4e5f6a7b" + last }
	codes := func(p string) *models.ChannexProperty {
		return &models.ChannexProperty{PropertyID: uuid(p), Currency: "EUR", RoomTypes: map[string]string{"DBL": uuid("d0")}}
	}
	yaml := models.NewChannexChannel("channex_eu", models.ChannexMapping{Properties: map[string]models.ChannexProperty{
		"prop_yaml": *codes("a0"), "prop_both": *codes("b0")}})
	m := s.NewMappings([]models.ChannelConfig{yaml, models.NewChannelConfig("expedia", 60)}, time.Hour)
	cfg, err := m.ChannelFor(ctx, "channex_eu", "prop_yaml")
	if err != nil || cfg.Channex.Properties["prop_yaml"].PropertyID != uuid("a0") {
		t.Fatalf("YAML property: %+v (%v)", cfg.Channex, err)
	}
	if err := s.SetPropertyMappings(ctx, "prop_new", []PropertyChannel{{Channel: "channex_eu", Channex: codes("c0")}, {Channel: "expedia"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetPropertyMappings(ctx, "prop_both", []PropertyChannel{{Channel: "channex_eu", Channex: codes("e0")}}); err != nil {
		t.Fatal(err)
	}
	chs, _ := m.Channels(ctx)
	if _, ok := chs["channex_eu"].Channex.Properties["prop_new"]; ok {
		t.Fatal("the cache re-read within its TTL without cause")
	}
	cfg, err = m.ChannelFor(ctx, "channex_eu", "prop_new")
	if err != nil || cfg.Channex.Properties["prop_new"].PropertyID != uuid("c0") {
		t.Fatalf("a property mapped a moment ago: %+v (%v)", cfg.Channex, err)
	}
	if cfg.Channex.Properties["prop_both"].PropertyID != uuid("e0") || cfg.Channex.Properties["prop_yaml"].PropertyID != uuid("a0") {
		t.Fatalf("stored codes win, the YAML's stay: %+v", cfg.Channex)
	}
	if chs, _ := m.Channels(ctx); len(yaml.Channex.Properties) != 2 || len(chs["channex_eu"].Channex.Properties) != 3 {
		t.Fatalf("the YAML's map was written to, or the merge lost one: %d", len(chs["channex_eu"].Channex.Properties))
	}
	got, err := s.PropertyMappings(ctx, "prop_new")
	if err != nil || len(got) != 2 || got[0].Channel != "channex_eu" || got[0].Channex == nil || got[1].Channex != nil {
		t.Fatalf("PropertyMappings: %+v (%v)", got, err)
	}
}

// TestMappingsLayStoredOpenTravelCodesOverTheYAML: an OpenTravel channel's codes
// from the YAML stay in force for a property without stored codes, and the codes
// stored over the API win for theirs, as for Channex.
func TestMappingsLayStoredOpenTravelCodesOverTheYAML(t *testing.T) {
	ctx := context.Background()
	s := testStore(t)
	ota := models.ChannelConfig{Slug: "booking_xml", Protocol: models.ProtocolOpenTravel, RatePerMinute: 60, Burst: 6,
		OpenTravel: models.OpenTravelMapping{Properties: map[string]models.OpenTravelProperty{
			"prop_yaml": {HotelCode: "H-YAML", RoomTypes: map[string]string{"DBL": "DOUBLE1"}},
			"prop_both": {HotelCode: "H-SEED"}}}}
	m := s.NewMappings([]models.ChannelConfig{ota}, time.Hour)
	cfg, err := m.ChannelFor(ctx, "booking_xml", "prop_yaml")
	if err != nil || cfg.OpenTravel.Properties["prop_yaml"].HotelCode != "H-YAML" {
		t.Fatalf("YAML codes: %+v (%v)", cfg.OpenTravel, err)
	}
	if err := s.SetPropertyMappings(ctx, "prop_both", []PropertyChannel{{Channel: "booking_xml",
		OpenTravel: &models.OpenTravelProperty{HotelCode: "H-API"}}}); err != nil {
		t.Fatal(err)
	}
	m.Invalidate()
	chs, err := m.Channels(ctx)
	props := chs["booking_xml"].OpenTravel.Properties
	if err != nil || props["prop_both"].HotelCode != "H-API" || props["prop_yaml"].HotelCode != "H-YAML" ||
		props["prop_yaml"].RoomTypes["DBL"] != "DOUBLE1" {
		t.Fatalf("stored codes win, the YAML's stay: %+v (%v)", props, err)
	}
	if ota.OpenTravel.Properties["prop_both"].HotelCode != "H-SEED" {
		t.Fatal("the YAML's map was written to")
	}
}
