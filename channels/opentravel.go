package channels

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/paritysync/paritysync/channels/wire"
	"github.com/paritysync/paritysync/models"
)

// openTravel is the OpenTravel Alliance 2003/05 notifications: one message per
// family, posted to {base}/ota/{message}, with HTTP Basic authentication (the
// credentials file holds user:password). EchoToken carries the idempotency key and
// TimeStamp the send time. The answer, usually a 200, holds <Success/> (with
// <Warnings> for a partial success) or <Errors>, which is never a commit. There is
// no read-back.
type openTravel struct{}

// otaCodes is req under the channel's own codes where m maps them (HotelCode,
// InvTypeCode, RatePlanCode); what m does not map keeps paritysync's code. req's
// lines are copied, never written.
func otaCodes(m models.OpenTravelMapping, req models.ChannelRequest) models.ChannelRequest {
	p, ok := m.Properties[req.PropertyID]
	if !ok {
		return req
	}
	req.PropertyID = p.HotelCode
	lines := make([]models.ARILine, len(req.Lines))
	for i, l := range req.Lines {
		plan := models.RatePlanKey(l.RoomTypeCode, l.RatePlanCode)
		if code, ok := p.RoomTypes[l.RoomTypeCode]; ok {
			l.RoomTypeCode = code
		}
		if code, ok := p.RatePlans[plan]; ok {
			l.RatePlanCode = code
		}
		lines[i] = l
	}
	req.Lines = lines
	return req
}

func (openTravel) encode(cfg models.ChannelConfig, req models.ChannelRequest, now time.Time) (call, error) {
	hdr := wire.OTAHeader{EchoToken: req.IdempotencyKey(), TimeStamp: now.UTC().Format(time.RFC3339),
		Version: wire.OTAVersion}
	req = otaCodes(cfg.OpenTravel, req) // after the key: the same as the Idempotency-Key header's
	encodeMessage := otaEncoders.Of(req.Family)
	if encodeMessage == nil {
		return call{}, fmt.Errorf("family %q: no OpenTravel message", req.Family)
	}
	c := call{method: http.MethodPost, path: wire.OTAPathPrefix + wire.OTAMessage(req.Family),
		contentType: "application/xml; charset=utf-8", echo: hdr.EchoToken}
	unit := func(line int, v int64) {
		c.units = append(c.units, line)
		c.versions = append(c.versions, v)
	}
	// Intake refuses such codes for an OpenTravel channel; a request built another
	// way is refused here rather than sent as a message the channel must refuse.
	lim := models.ProtocolOpenTravel.CodeLimits()
	if n := utf8.RuneCountInString(req.PropertyID); n > lim.Property {
		return call{}, fmt.Errorf("HotelCode %s: %d characters, OpenTravel allows %d", req.PropertyID, n, lim.Property)
	}
	for i, l := range req.Lines {
		if n := utf8.RuneCountInString(l.RoomTypeCode); n > lim.RoomType {
			return call{}, fmt.Errorf("lines[%d]: InvTypeCode %s: %d characters, OpenTravel allows %d", i, l.RoomTypeCode, n, lim.RoomType)
		}
		if n := utf8.RuneCountInString(l.RatePlanCode); n > lim.RatePlan {
			return call{}, fmt.Errorf("lines[%d]: RatePlanCode: %d characters, OpenTravel allows %d", i, n, lim.RatePlan)
		}
	}
	msg, err := encodeMessage(hdr, req, unit)
	if err != nil {
		return call{}, err
	}
	body, err := xml.Marshal(msg)
	if err != nil {
		return call{}, fmt.Errorf("encode %s: %w", wire.OTAMessage(req.Family), err)
	}
	c.body = append([]byte(xml.Header), body...)
	return c, nil
}

// otaEncoders build the message of each family from a request's lines; unit
// records the line and version of each message element, in order.
var otaEncoders = models.ByFamily[func(hdr wire.OTAHeader, req models.ChannelRequest, unit func(line int, v int64)) (any, error)]{
	Rates:        otaRateAmounts,
	Availability: otaInvCounts,
	Restrictions: otaAvailStatuses,
}

func otaControl(l models.ARILine) wire.OTAStatusApplicationControl {
	c := wire.OTAStatusApplicationControl{Start: l.From, End: l.To, InvTypeCode: l.RoomTypeCode, RatePlanCode: l.RatePlanCode}
	c.SetDays(l.Days)
	return c
}

func otaRateAmounts(hdr wire.OTAHeader, req models.ChannelRequest, unit func(int, int64)) (any, error) {
	rq := wire.OTAHotelRateAmountNotifRQ{OTAHeader: hdr, RateAmountMessages: wire.OTARateAmountMessages{HotelCode: req.PropertyID}}
	for i, l := range req.Lines {
		if l.Amount == nil {
			return nil, fmt.Errorf("lines[%d]: rates line without amount", i)
		}
		if !models.FitsMinorUnits(*l.Amount, l.Currency) {
			return nil, fmt.Errorf("lines[%d]: amount %s has more places than %s allows", i, l.Amount, l.Currency)
		}
		rq.RateAmountMessages.Messages = append(rq.RateAmountMessages.Messages, wire.OTARateAmountMessage{
			StatusApplicationControl: otaControl(l),
			Rates: []wire.OTARate{{BaseByGuestAmts: []wire.OTABaseByGuestAmt{{
				AmountAfterTax: models.FormatAmount(*l.Amount, l.Currency), CurrencyCode: l.Currency}}}},
		})
		unit(i, l.Version)
	}
	return rq, nil
}

func otaInvCounts(hdr wire.OTAHeader, req models.ChannelRequest, unit func(int, int64)) (any, error) {
	rq := wire.OTAHotelInvCountNotifRQ{OTAHeader: hdr, Inventories: wire.OTAInventories{HotelCode: req.PropertyID}}
	for i, l := range req.Lines {
		if l.Inventory == nil {
			return nil, fmt.Errorf("lines[%d]: availability line without inventory", i)
		}
		rq.Inventories.Inventories = append(rq.Inventories.Inventories, wire.OTAInventory{
			StatusApplicationControl: otaControl(l),
			InvCounts:                []wire.OTAInvCount{{CountType: wire.OTACountTypeAvailable, Count: *l.Inventory}},
		})
		unit(i, l.Version)
	}
	return rq, nil
}

func otaAvailStatuses(hdr wire.OTAHeader, req models.ChannelRequest, unit func(int, int64)) (any, error) {
	rq := wire.OTAHotelAvailNotifRQ{OTAHeader: hdr, AvailStatusMessages: wire.OTAAvailStatusMessages{HotelCode: req.PropertyID}}
	for i, l := range req.Lines {
		for _, m := range availMessages(l) {
			m.StatusApplicationControl = otaControl(l)
			rq.AvailStatusMessages.Messages = append(rq.AvailStatusMessages.Messages, m)
			unit(i, l.Version)
		}
	}
	return rq, nil
}

// availMessages are the AvailStatusMessages of one restrictions line: a message
// holds at most one RestrictionStatus, so the first carries the lengths of stay and
// the first status, and each further status takes its own message.
func availMessages(l models.ARILine) []wire.OTAAvailStatusMessage {
	status := func(b bool) string {
		if b {
			return wire.OTAStatusClose
		}
		return wire.OTAStatusOpen
	}
	var statuses []*wire.OTARestrictionStatus
	for _, r := range wire.OTARestrictions {
		if b := *wire.OTARestrictionValue(r, &l.Values); b != nil {
			statuses = append(statuses, &wire.OTARestrictionStatus{Restriction: r, Status: status(*b)})
		}
	}
	var los *wire.OTALengthsOfStay
	if l.MinLOS != nil || l.MaxLOS != nil {
		los = &wire.OTALengthsOfStay{}
		if l.MinLOS != nil {
			los.LengthOfStay = append(los.LengthOfStay, wire.OTALengthOfStay{MinMaxMessageType: wire.OTASetMinLOS, Time: *l.MinLOS, TimeUnit: wire.OTATimeUnitDay})
		}
		if l.MaxLOS != nil {
			los.LengthOfStay = append(los.LengthOfStay, wire.OTALengthOfStay{MinMaxMessageType: wire.OTASetMaxLOS, Time: *l.MaxLOS, TimeUnit: wire.OTATimeUnitDay})
		}
	}
	first := wire.OTAAvailStatusMessage{LengthsOfStay: los}
	if len(statuses) > 0 {
		first.RestrictionStatus = statuses[0]
		statuses = statuses[1:]
	}
	out := []wire.OTAAvailStatusMessage{first}
	for _, s := range statuses {
		out = append(out, wire.OTAAvailStatusMessage{RestrictionStatus: s})
	}
	return out
}

func (openTravel) authorize(h http.Header, secret string) {
	// The secret is user:password, exactly what Basic carries in base64.
	h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(secret)))
	h.Set("Accept", "application/xml")
}

func (openTravel) interpret(out *PushResponse, c call, _ http.Header, raw []byte) {
	resp, err := decodeOTAResponse(raw)
	if !is2xx(out.Status) {
		out.Class = byStatus(out.Status, out.ServerWait)
		out.Message = bodyText(out.Status, raw)
		if errs := resp.ErrorList(); err == nil && len(errs) > 0 {
			out.Message = otaIssueText(errs[0])
		}
		return
	}
	want := strings.TrimPrefix(c.path, wire.OTAPathPrefix) + "RS"
	switch {
	case err != nil:
		// Whether the message applied is unknown; the same message again is safe.
		out.Class, out.Message = ClassTransient, unreadable(err, raw)
		return
	case c.path != "" && resp.XMLName.Local != want:
		out.Class, out.Message = ClassTransient, fmt.Sprintf("answer <%s> to an %sRQ: %s", resp.XMLName.Local,
			strings.TrimSuffix(want, "RS"), bodyText(out.Status, raw))
		return
	case c.echo != "" && resp.EchoToken != "" && resp.EchoToken != c.echo:
		// Another message's answer (a cache, a mixed-up proxy) confirms nothing of this one.
		out.Class, out.Message = ClassTransient, "answer echoes another message's EchoToken"
		return
	case len(resp.ErrorList()) > 0:
		out.Class, out.Message = otaErrorClass(resp.ErrorList()), otaIssueText(resp.ErrorList()[0])
		return
	case resp.Success == nil:
		out.Class, out.Message = ClassTransient, "OpenTravel answer without Success or Errors"
		return
	}
	out.ConfirmationID = resp.CorrelationID
	if out.ConfirmationID == "" {
		out.ConfirmationID = resp.EchoToken
	}
	failed := map[int]bool{}
	for _, w := range resp.WarningList() {
		// A warning without RPH is advice about the whole message, not a refusal.
		rph, err := strconv.Atoi(strings.TrimSpace(w.RPH))
		if err != nil || rph < 1 || rph > c.nUnits() {
			continue
		}
		l := c.line(rph - 1)
		if !failed[l] {
			failed[l] = true
			out.Failed = append(out.Failed, LineFailure{Line: l, Code: w.Code, Message: otaIssueText(w)})
		}
	}
	out.Accepted = c.lines - len(failed)
	out.classifyFailed("message")
}

// classifyFailed classes a readable 2xx answer by the lines it failed: committed
// when none, rejected when every one (each unit, a change object or a message, was
// refused), partial otherwise.
func (out *PushResponse) classifyFailed(unit string) {
	switch {
	case len(out.Failed) == 0:
		out.Class = ClassCommitted
	case out.Accepted == 0:
		out.Class, out.Message = ClassRejected, "every "+unit+" refused: "+out.Failed[0].Message
	default:
		out.Class = ClassPartial
	}
}

// otaErrorClass classifies an <Errors> answer by its error types: authentication
// errors refresh the credential, processing and application errors are the
// channel's own trouble and transient, anything else (business rule, required field,
// …) is a rejection.
func otaErrorClass(errs []wire.OTAIssue) Class {
	class := ClassRejected
	for _, e := range errs {
		switch strings.TrimSpace(e.Type) {
		case wire.OTAErrorAuthentication, wire.OTAErrorAuthenticationTimeout:
			return ClassAuthExpired
		case wire.OTAErrorProcessingException, wire.OTAErrorApplication:
			class = ClassTransient
		default:
			// One refused error among transient ones still means the message as
			// sent can never succeed.
			return ClassRejected
		}
	}
	return class
}

func otaIssueText(e wire.OTAIssue) string {
	parts := []string{}
	if e.Code != "" {
		parts = append(parts, e.Code)
	}
	if t := strings.TrimSpace(e.ShortText); t != "" {
		parts = append(parts, t)
	}
	if t := strings.TrimSpace(e.Text); t != "" && t != strings.TrimSpace(e.ShortText) {
		parts = append(parts, t)
	}
	if len(parts) == 0 {
		return "type " + e.Type
	}
	return truncate(strings.Join(parts, " "))
}

// errNotOTAResponse is an XML answer that is not an OpenTravel …RS message.
var errNotOTAResponse = errors.New("not an OpenTravel response")

// decodeOTAResponse reads an …RS answer in the OpenTravel namespace; the decoder
// never resolves external entities, and trailing elements are refused.
func decodeOTAResponse(raw []byte) (wire.OTAResponse, error) {
	var resp wire.OTAResponse
	if len(bytes.TrimSpace(raw)) == 0 {
		return resp, errEmptyAnswer
	}
	dec := xml.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&resp); err != nil {
		return wire.OTAResponse{}, err
	}
	if resp.XMLName.Space != wire.OTANamespace || !strings.HasPrefix(resp.XMLName.Local, "OTA_") ||
		!strings.HasSuffix(resp.XMLName.Local, "RS") {
		return wire.OTAResponse{}, fmt.Errorf("%w: root <%s>", errNotOTAResponse, resp.XMLName.Local)
	}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return resp, nil
		}
		if err != nil {
			return wire.OTAResponse{}, err
		}
		switch tok.(type) {
		case xml.CharData, xml.Comment, xml.ProcInst:
		default:
			return wire.OTAResponse{}, errors.New("trailing data after the response")
		}
	}
}

func (openTravel) readBack(_ context.Context, r reader, _ string, _, _ models.Date) (models.ARIState, error) {
	return models.ARIState{}, fmt.Errorf("read %s state: %w", r.ch.cfg.Slug, ErrNoReadBack)
}
