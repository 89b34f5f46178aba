package main

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/otasim/sim"
)

// The Channex ids of prop_0000abcd, as the channel knows them.
const (
	cxProperty = "6f1c5e0a-2b7d-4c1e-9a3f-0d4e5f6a7b8c"
	cxRoom     = "0b2d4f6a-8c1e-4a3b-9d5f-7e9a1c3b5d7f"
	cxPlan     = "1c3e5a7b-9d2f-4b4c-8e6a-8f0b2d4c6e8a"
)

// cxKnown maps prop_0000abcd to its Channex ids, room DBL and rate plan DBL/plan.
func cxKnown(plan string) models.ChannexMapping {
	return models.ChannexMapping{Properties: map[string]models.ChannexProperty{"prop_0000abcd": {
		PropertyID: cxProperty, Currency: "EUR",
		RoomTypes: map[string]string{"DBL": cxRoom}, RatePlans: map[string]string{"DBL/" + plan: cxPlan}}}}
}

// TestPropertyMappedOverTheAPIIsPushedWithoutAWorkerRestart runs a worker whose
// YAML maps no property on its Channex channel. A batch for prop_0000abcd there
// is refused as unmapped; the property is then mapped over the API with its
// Channex ids (stored in PostgreSQL) while the worker runs, and the next batch —
// one row with channel "*", one with none — is committed: the simulator received
// availability under the mapped Channex property and room type ids. Bad codes are
// a 400 naming the field; every call is checked against openapi.yaml.
func TestPropertyMappedOverTheAPIIsPushedWithoutAWorkerRestart(t *testing.T) {
	t.Parallel()
	c := loadContract(t)
	known := cxKnown("BAR")
	s := startStackWith(t,
		[]models.ChannelConfig{models.NewChannexChannel("channex_eu", models.ChannexMapping{})}, // the worker's YAML: none
		[]models.ChannelConfig{models.NewChannexChannel("channex_eu", known)})                   // the channel knows its ids
	h := s.api
	post := func(body string) *http.Response {
		req := request(http.MethodPost, "/v1/batches", body)
		req.Header.Set("Content-Type", "application/x-ndjson")
		return c.do(t, h, req, true)
	}

	resp := post(mutationRow("cx0", "channex_eu", 1) + "\n")
	require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode, "not mapped yet")
	p := decodeProblem(t, resp)
	require.Len(t, p.Problems, 1, "%+v", p.Problems)
	require.Equal(t, "property_id", p.Problems[0].Field)
	require.Equal(t, models.RuleChannexUnmapped, p.Problems[0].Rule)

	put := func(body string) *http.Response {
		return c.do(t, h, request(http.MethodPut, "/v1/properties/prop_0000abcd/channels", body), true)
	}
	bad := `{"channels":["channex_eu"],"codes":{"channex_eu":{"property_id":"42","currency":"EUR","room_types":{"DBL":"` + cxRoom + `"}}}}`
	resp = put(bad)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, "codes.channex_eu.property_id", decodeProblem(t, resp).Field)
	resp = put(`{"channels":["expedia"],"codes":{"channex_eu":{"property_id":"` + cxProperty + `","currency":"EUR","room_types":{"DBL":"` + cxRoom + `"}}}}`)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, "codes.channex_eu", decodeProblem(t, resp).Field, "codes of a channel not listed")
	resp = put(`{"channels":["expedia"],"codes":{"expedia":{"property_id":"` + cxProperty + `","currency":"EUR","room_types":{"DBL":"` + cxRoom + `"}}}}`)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, ruleCodesProtocol, decodeProblem(t, resp).Rule)

	good := `{"channels":["channex_eu"],"codes":{"channex_eu":{"property_id":"` + cxProperty + `","currency":"EUR",` +
		`"room_types":{"DBL":"` + cxRoom + `"},"rate_plans":{"DBL/BAR":"` + cxPlan + `"}}}}`
	resp = put(good)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	got := decodeJSON[propertyChannels](t, resp)
	require.Equal(t, []string{"channex_eu"}, got.Channels)
	stored, err := json.Marshal(got.Codes["channex_eu"])
	require.NoError(t, err)
	want, err := json.Marshal(known.Properties["prop_0000abcd"])
	require.NoError(t, err)
	require.JSONEq(t, string(want), string(stored), "read back as stored")
	got = decodeJSON[propertyChannels](t, c.do(t, h, request(http.MethodGet, "/v1/properties/prop_0000abcd/channels", ""), true))
	require.Contains(t, got.Codes, "channex_eu")

	// The worker was started before the mapping and is not restarted.
	since := time.Now()
	star := mutationRow("cx1", "*", 2)
	week := models.DateOf(time.Now().UTC().AddDate(0, 0, 7)).String()
	nextDay := models.DateOf(time.Now().UTC().AddDate(0, 0, 8)).String()
	// No channel: every mapped one (on another night, so neither supersedes the other).
	none := mutationRow("cx2", "*", 3, `"channel":"*",`, ``, week, nextDay)
	require.NotContains(t, none, "channel")
	resp = post(star + "\n" + none + "\n")
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	acc := decodeJSON[batchAccepted](t, resp)
	require.Equal(t, 2, acc.Accepted, "%+v", acc.Rejected)
	for _, id := range []string{"cx1@channex_eu", "cx2@channex_eu"} {
		var out outcomeList
		require.Eventually(t, func() bool {
			out = decodeJSON[outcomeList](t, c.do(t, h, request(http.MethodGet, acc.StatusURL+"/outcomes?mutation="+id, ""), true))
			return len(out.Outcomes) == 1 && out.Outcomes[0].Outcome == models.OutcomeCommitted
		}, time.Minute, 250*time.Millisecond, "%s is committed on Channex: %+v", id, &out)
	}
	applied := slices.DeleteFunc(s.Sim.Applied("channex_eu"), func(a sim.ApplyRecord) bool { return a.At.Before(since) })
	require.NotEmpty(t, applied)
	for _, a := range applied {
		require.Equal(t, cxProperty, a.Property, "the Channex property id stored over the API")
		require.Equal(t, cxRoom, a.RoomTypeCode, "the Channex room type id stored over the API")
	}
}

// TestOpenTravelCodesOverTheAPIAreSentWithoutARestart maps prop_0000abcd on an
// OpenTravel channel with its HotelCode and InvTypeCode while the worker runs: a
// change without channel is committed and the simulator received it under the
// channel's codes; the rate plan, not listed, keeps paritysync's code. A HotelCode
// over OpenTravel's 16 characters is a 400 naming it.
func TestOpenTravelCodesOverTheAPIAreSentWithoutARestart(t *testing.T) {
	t.Parallel()
	c := loadContract(t)
	ota := models.NewChannelConfig("ota_eu", 600)
	ota.Protocol, ota.ReadBack = models.ProtocolOpenTravel, false
	s := startStackWith(t, []models.ChannelConfig{ota}, []models.ChannelConfig{ota})
	h := s.api
	put := func(body string) *http.Response {
		return c.do(t, h, request(http.MethodPut, "/v1/properties/prop_0000abcd/channels", body), true)
	}
	// Off the schema on purpose: the answer is still checked against it.
	resp := c.do(t, h, request(http.MethodPut, "/v1/properties/prop_0000abcd/channels",
		`{"channels":["ota_eu"],"codes":{"ota_eu":{"hotel_code":"HOTEL-CODE-OF-17C"}}}`), false)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, "codes.ota_eu.hotel_code", decodeProblem(t, resp).Field)
	resp = put(`{"channels":["ota_eu"],"codes":{"ota_eu":{"hotel_code":"H0042","room_types":{"DBL":"DOUBLE1"}}}}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)

	since := time.Now()
	resp = c.do(t, h, request(http.MethodPost, "/v1/changes", "["+mutationRow("o1", "*", 1, `"channel":"*",`, ``)+"]"), true)
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	ans := decodeJSON[changesAnswer](t, resp)
	require.Len(t, ans.Changes[0].Channels, 1)
	require.Equal(t, "o1@ota_eu", ans.Changes[0].Channels[0].ID)
	awaitCommitted(t, c, h, "/v1/changes/o1@ota_eu", time.Minute, "committed on the OpenTravel channel")
	applied := slices.DeleteFunc(s.Sim.Applied("ota_eu"), func(a sim.ApplyRecord) bool { return a.At.Before(since) })
	require.NotEmpty(t, applied)
	for _, a := range applied {
		require.Equal(t, "H0042", a.Property, "the HotelCode stored over the API")
		require.Equal(t, "DOUBLE1", a.RoomTypeCode, "the InvTypeCode stored over the API")
	}
}

// TestOpenTravelCodesSeededFromTheYAMLAreSent: an OpenTravel channel whose
// channel file lists a property's codes (opentravel.properties) pushes that
// property under them with nothing stored; codes stored over the API then win
// (within the mappings cache's TTL, as for a remapped Channex property).
func TestOpenTravelCodesSeededFromTheYAMLAreSent(t *testing.T) {
	t.Parallel()
	c := loadContract(t)
	ota := models.NewChannelConfig("ota_seed", 600)
	ota.Protocol, ota.ReadBack = models.ProtocolOpenTravel, false
	seeded := ota
	seeded.OpenTravel = models.OpenTravelMapping{Properties: map[string]models.OpenTravelProperty{
		"prop_0000abcd": {HotelCode: "H-YAML", RoomTypes: map[string]string{"DBL": "DOUBLE-Y"}}}}
	s := startStackWith(t, []models.ChannelConfig{seeded}, []models.ChannelConfig{ota})
	h := s.api
	push := func(id string, version int) []sim.ApplyRecord {
		t.Helper()
		since := time.Now()
		acc := decodeJSON[batchAccepted](t, c.do(t, h, request(http.MethodPost, "/v1/batches",
			"["+mutationRow(id, "ota_seed", version)+"]"), true))
		require.Equal(t, 1, acc.Accepted)
		awaitCommitted(t, c, h, acc.StatusURL+"/outcomes?mutation="+id, time.Minute, "committed on the OpenTravel channel")
		applied := slices.DeleteFunc(s.Sim.Applied("ota_seed"), func(a sim.ApplyRecord) bool { return a.At.Before(since) })
		require.NotEmpty(t, applied)
		return applied
	}
	for _, a := range push("y1", 1) {
		require.Equal(t, "H-YAML", a.Property, "the HotelCode from the channel file")
		require.Equal(t, "DOUBLE-Y", a.RoomTypeCode, "the InvTypeCode from the channel file")
	}
	resp := c.do(t, h, request(http.MethodPut, "/v1/properties/prop_0000abcd/channels",
		`{"channels":["ota_seed"],"codes":{"ota_seed":{"hotel_code":"H-API","room_types":{"DBL":"DOUBLE-A"}}}}`), true)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	// A property the cache maps already is remapped within its TTL.
	time.Sleep(store.DefaultMappingsTTL + 500*time.Millisecond)
	for _, a := range push("y2", 2) {
		require.Equal(t, "H-API", a.Property, "the codes stored over the API win")
		require.Equal(t, "DOUBLE-A", a.RoomTypeCode)
	}
}
