package sim

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/shopspring/decimal"

	"github.com/paritysync/paritysync/channels/wire"
	"github.com/paritysync/paritysync/models"
)

// OpenTravel in the simulator: OTA_HotelRateAmountNotifRQ, OTA_HotelAvailNotifRQ and
// OTA_HotelInvCountNotifRQ posted to {base}/ota/{message}, HTTP Basic with a valid
// token as the password, and answers that are mostly 200s: <Success/>, <Success/>
// with <Warnings RPH=> for refused messages (the others apply), or <Errors> — for a
// malformed message, a wrong password (Type 4) or an injected processing error
// (Type 12). EchoToken is the idempotency key; a repeated EchoToken with the same
// content (TimeStamp aside) replays the first answer.

// OTA error types and codes the simulator answers with (OpenTravel EWT and ERR).
const (
	otaTypeBizRule      = "3"
	otaTypeProtocol     = "7"
	otaTypeRequired     = "10"
	otaCodeAuth         = "497"
	otaCodeUnableToProc = "450"
	otaCodeInvalid      = "321"
)

// otaMaxEchoToken is the longest EchoToken OpenTravel allows.
const otaMaxEchoToken = 128

func (s *Simulator) serveOpenTravel(w http.ResponseWriter, r *http.Request, ch *channel, msg string) {
	if _, ok := wire.OTAFamily(msg); !ok {
		writeJSON(w, http.StatusNotFound, models.ARIError{Error: models.ErrorInvalid, Message: "path: no such OpenTravel message"})
		return
	}
	if r.Method != http.MethodPost {
		// OpenTravel notifications have no read-back.
		allow(w, r, http.MethodPost)
		return
	}
	s.handlePush(w, r, ch, func(body []byte, readErr error, now time.Time, f Faults, _ *RequestRecord) reply {
		return s.otaPush(ch, r, msg, body, readErr, now, f)
	})
}

// otaAnswer builds an …RS answer.
func otaAnswer(status int, msg, echo, correlation string, now time.Time, success bool, warnings, errs []wire.OTAIssue) reply {
	resp := wire.OTAResponse{
		XMLName:   xml.Name{Space: wire.OTANamespace, Local: msg + "RS"},
		OTAHeader: wire.OTAHeader{EchoToken: echo, CorrelationID: correlation, TimeStamp: now.UTC().Format(time.RFC3339), Version: wire.OTAVersion},
	}
	// Success (with Warnings only when there are some), or Errors: never an empty
	// element, which no OpenTravel schema allows.
	if len(errs) > 0 {
		resp.Errors = &wire.OTAErrors{Error: otaIssues(errs)}
	} else if success {
		resp.Success = &struct{}{}
		if len(warnings) > 0 {
			resp.Warnings = &wire.OTAWarnings{Warning: otaIssues(warnings)}
		}
	}
	body, err := xml.Marshal(resp)
	if err != nil {
		return errorReply(http.StatusInternalServerError, models.ErrorServer, "encode")
	}
	h := http.Header{}
	h.Set("Content-Type", "application/xml; charset=utf-8")
	return reply{status: status, header: h, body: append([]byte(xml.Header), body...)}
}

// otaIssues fits each issue's ShortText to the schemas' 64 characters, moving a
// longer one into the element's text.
func otaIssues(in []wire.OTAIssue) []wire.OTAIssue {
	out := slices.Clone(in)
	for i, e := range out {
		// The schemas count characters, not bytes.
		if r := []rune(e.ShortText); len(r) > wire.OTAShortTextMax {
			out[i].Text, out[i].ShortText = e.ShortText, string(r[:wire.OTAShortTextMax-1])+"…"
		}
	}
	return out
}

func otaError(status int, msg, echo string, now time.Time, typ, code, text string) reply {
	return otaAnswer(status, msg, echo, "", now, false, nil, []wire.OTAIssue{{Type: typ, Code: code, ShortText: text}})
}

// otaUnit is one message of a request: the line it sets and its family.
type otaUnit struct {
	family  models.Family
	line    models.ARILine
	problem string
}

// otaPush decides one POST under s.mu.
func (s *Simulator) otaPush(ch *channel, r *http.Request, msg string, body []byte, readErr error, now time.Time, f Faults) reply {
	user, pass, ok := r.BasicAuth()
	if !ok || user == "" {
		ch.stats.AuthFailures++
		rep := otaError(http.StatusUnauthorized, msg, "", now, wire.OTAErrorAuthentication, otaCodeAuth, "Basic credentials required")
		rep.header.Set("WWW-Authenticate", `Basic realm="otasim"`)
		return rep
	}
	if !s.tokenValid(pass, now) {
		// Many OpenTravel endpoints say so inside a 200.
		ch.stats.AuthFailures++
		return otaError(http.StatusOK, msg, "", now, wire.OTAErrorAuthentication, otaCodeAuth, "Authorization error")
	}
	if readErr != nil {
		ch.stats.Invalid++
		return otaError(http.StatusRequestEntityTooLarge, msg, "", now, otaTypeProtocol, otaCodeInvalid, "body too large or unreadable")
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || (mt != "application/xml" && mt != "text/xml") {
		ch.stats.Invalid++
		return otaError(http.StatusUnsupportedMediaType, msg, "", now, otaTypeProtocol, otaCodeInvalid, "Content-Type: want application/xml")
	}
	hotel, hdr, units, content, err := decodeOTA(msg, body)
	if err == nil && (hdr.EchoToken == "" || len(hdr.EchoToken) > otaMaxEchoToken) {
		err = fmt.Errorf("EchoToken: required, at most %d characters", otaMaxEchoToken)
	}
	if err == nil {
		var versions []int64
		if versions, err = unitVersions(r.Header, len(units)); err == nil {
			for i := range units {
				units[i].line.Version = versions[i]
			}
		}
	}
	if err != nil {
		ch.stats.Invalid++
		return otaError(http.StatusOK, msg, hdr.EchoToken, now, otaTypeRequired, otaCodeInvalid, err.Error())
	}

	key := ch.limitKey(hotel)
	ch.arrive(key, now)
	throttled := func(status int, wait time.Duration) reply {
		t := ch.throttle(key, status, wait, now)
		rep := otaError(status, msg, hdr.EchoToken, now, wire.OTAErrorProcessingException, otaCodeUnableToProc, "too many requests")
		rep.header.Set(models.HeaderRetryAfter, t.header.Get(models.HeaderRetryAfter))
		return rep
	}
	if status := s.stormStatus(ch, f, now); status != 0 {
		return throttled(status, s.stormUntil.Sub(now))
	}
	win := ch.window(ch.windows, key)
	if win.count(now) >= ch.cfg.RatePerMinute {
		ch.stats.Throttled++
		return throttled(http.StatusTooManyRequests, win.nextFree(now))
	}
	win.add(now)

	if rep, seen, conflict := ch.replay(hdr.EchoToken, content, now, s.cfg.IdempotencyTTL); conflict {
		ch.stats.Invalid++
		return otaError(http.StatusOK, msg, hdr.EchoToken, now, otaTypeBizRule, otaCodeInvalid, "EchoToken reused with other content")
	} else if seen {
		return rep
	}
	if s.serverFault(ch, f.ErrorRatio) {
		if s.rng.IntN(2) == 0 {
			return otaError(http.StatusOK, msg, hdr.EchoToken, now, wire.OTAErrorProcessingException, otaCodeUnableToProc, "injected processing error")
		}
		return otaError(s.serverStatus(), msg, hdr.EchoToken, now, wire.OTAErrorApplication, otaCodeUnableToProc, "injected server error")
	}

	if rep, bad := s.badBody(ch, f, func() (reply, reply) {
		good := otaAnswer(http.StatusOK, msg, hdr.EchoToken, fmt.Sprintf("%s-%06d", ch.cfg.Slug, ch.seq+1), now, true, nil, nil)
		return good, otaError(http.StatusOK, msg, hdr.EchoToken, now, otaTypeBizRule, otaCodeInvalid, "injected error inside a 200")
	}); bad {
		return rep
	}

	drift, injected := s.outcomeFaults(ch, f)
	var warnings []wire.OTAIssue
	for i, u := range units {
		problem := u.problem
		if problem == "" && s.failsUnit(injected, i, len(units), len(warnings) == 0) {
			problem = "injected message failure"
		}
		if problem != "" {
			warnings = append(warnings, wire.OTAIssue{Type: otaTypeBizRule, Code: otaCodeInvalid, RPH: strconv.Itoa(i + 1), ShortText: problem})
			continue
		}
		if ch.receiveLine(hotel, u.family, u.line) {
			ch.stats.StaleReceived++
		}
		if !drift {
			ch.apply(hotel, u.family, u.line)
		}
	}
	ch.seq++
	conf := fmt.Sprintf("%s-%06d", ch.cfg.Slug, ch.seq)
	if len(warnings) == 0 {
		ch.stats.Accepted++
	} else {
		ch.stats.Partial++
	}
	rep := otaAnswer(http.StatusOK, msg, hdr.EchoToken, conf, now, true, warnings, nil)
	ch.remember(hdr.EchoToken, content, rep, now)
	if s.serverFault(ch, f.CommitThen500Ratio) {
		return otaError(http.StatusInternalServerError, msg, hdr.EchoToken, now, wire.OTAErrorApplication, otaCodeUnableToProc, "injected error after commit")
	}
	return rep
}

// decodeOTA reads the message named by the path. It returns the hotel, the header,
// one unit per message and the content to key idempotency on: the message with its
// TimeStamp cleared, as a retry is sent with a new one.
func decodeOTA(msg string, body []byte) (hotel string, hdr wire.OTAHeader, units []otaUnit, content []byte, err error) {
	family, _ := wire.OTAFamily(msg)
	m, err := otaDecoders.Of(family)(body)
	if err != nil {
		return
	}
	hotel, hdr, units = m.hotel, m.hdr, m.units
	for i := range units {
		units[i].family = family
	}
	switch {
	case hotel == "":
		return hotel, hdr, nil, nil, fmt.Errorf("HotelCode: required")
	case utf8.RuneCountInString(hotel) > models.ProtocolOpenTravel.CodeLimits().Property:
		return hotel, hdr, nil, nil, fmt.Errorf("HotelCode: longer than %d characters", models.ProtocolOpenTravel.CodeLimits().Property)
	case len(units) == 0:
		return hotel, hdr, nil, nil, fmt.Errorf("%sRQ: at least one message required", msg)
	}
	content, err = xml.Marshal(m.rq)
	return hotel, hdr, units, content, err
}

// otaMessage is one decoded message: its hotel and header, a unit per message
// element, and the message with its TimeStamp cleared.
type otaMessage struct {
	hotel string
	hdr   wire.OTAHeader
	units []otaUnit
	rq    any
}

// otaDecoders read the message of each family.
var otaDecoders = models.ByFamily[func(body []byte) (otaMessage, error)]{
	Rates: otaDecoder(func(m *wire.OTAHotelRateAmountNotifRQ) (*wire.OTAHeader, string, []wire.OTARateAmountMessage) {
		return &m.OTAHeader, m.RateAmountMessages.HotelCode, m.RateAmountMessages.Messages
	}, otaRate),
	Restrictions: otaDecoder(func(m *wire.OTAHotelAvailNotifRQ) (*wire.OTAHeader, string, []wire.OTAAvailStatusMessage) {
		return &m.OTAHeader, m.AvailStatusMessages.HotelCode, m.AvailStatusMessages.Messages
	}, otaRestriction),
	Availability: otaDecoder(func(m *wire.OTAHotelInvCountNotifRQ) (*wire.OTAHeader, string, []wire.OTAInventory) {
		return &m.OTAHeader, m.Inventories.HotelCode, m.Inventories.Inventories
	}, otaInventory),
}

// otaDecoder reads a message of type RQ: parts finds its header, its hotel and its
// elements, and unit reads each element as a line and what is wrong with it.
func otaDecoder[RQ, E any](parts func(*RQ) (*wire.OTAHeader, string, []E), unit func(E) (models.ARILine, string)) func(body []byte) (otaMessage, error) {
	return func(body []byte) (otaMessage, error) {
		var m RQ
		if err := decodeXMLStrict(body, &m); err != nil {
			return otaMessage{}, err
		}
		hdr, hotel, elems := parts(&m)
		out := otaMessage{hotel: hotel, hdr: *hdr}
		for _, e := range elems {
			l, problem := unit(e)
			out.units = append(out.units, otaUnit{line: l, problem: problem})
		}
		hdr.TimeStamp = ""
		out.rq = m
		return out, nil
	}
}

// otaControl is the line a StatusApplicationControl names, and what is wrong with
// it ("" when nothing).
func otaControl(c wire.OTAStatusApplicationControl, needPlan bool) (models.ARILine, string) {
	l := models.ARILine{RoomTypeCode: c.InvTypeCode, RatePlanCode: c.RatePlanCode, From: c.Start, To: c.End}
	days, someDay := c.Days()
	l.Days = days
	lim := models.ProtocolOpenTravel.CodeLimits()
	switch {
	case c.InvTypeCode == "":
		return l, "InvTypeCode: required"
	case utf8.RuneCountInString(c.InvTypeCode) > lim.RoomType:
		return l, fmt.Sprintf("InvTypeCode: longer than %d characters", lim.RoomType)
	case utf8.RuneCountInString(c.RatePlanCode) > lim.RatePlan:
		return l, fmt.Sprintf("RatePlanCode: longer than %d characters", lim.RatePlan)
	case needPlan && c.RatePlanCode == "":
		return l, "RatePlanCode: required"
	case c.Start.IsZero() || c.End.IsZero():
		return l, "Start and End: required"
	case c.End.Before(c.Start):
		return l, "End: before Start"
	case !someDay:
		return l, "Mon … Sun: no day set true"
	}
	return l, ""
}

// decodeXMLStrict reads one element into v and refuses anything but whitespace,
// comments and processing instructions after it.
func decodeXMLStrict(body []byte, v any) error {
	dec := xml.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		return err
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil // io.EOF, or a broken tail the decoder already rejected
		}
		switch t := tok.(type) {
		case xml.CharData:
			if len(bytes.TrimSpace(t)) > 0 {
				return fmt.Errorf("trailing data after the message")
			}
		case xml.Comment, xml.ProcInst:
		default:
			return fmt.Errorf("trailing data after the message")
		}
	}
}

// otaRate is the line of one rate message, and what is wrong with it ("" when
// nothing).
func otaRate(m wire.OTARateAmountMessage) (models.ARILine, string) {
	l, problem := otaControl(m.StatusApplicationControl, true)
	if problem != "" {
		return l, problem
	}
	if len(m.Rates) != 1 || len(m.Rates[0].BaseByGuestAmts) != 1 {
		return l, "Rates: one Rate with one BaseByGuestAmt required"
	}
	a := m.Rates[0].BaseByGuestAmts[0]
	if !currencyRE.MatchString(a.CurrencyCode) {
		return l, "CurrencyCode: want a 3-letter ISO 4217 code"
	}
	amt, err := decimal.NewFromString(a.AmountAfterTax)
	if err != nil {
		return l, "AmountAfterTax: not a decimal"
	}
	if err := validAmount(amt, a.CurrencyCode); err != nil {
		return l, "AmountAfterTax: " + err.Error()
	}
	l.Amount, l.Currency = &amt, a.CurrencyCode
	return l, ""
}

// otaInventory is the line of one inventory message, and what is wrong with it.
func otaInventory(inv wire.OTAInventory) (models.ARILine, string) {
	l, problem := otaControl(inv.StatusApplicationControl, false)
	if problem != "" {
		return l, problem
	}
	if len(inv.InvCounts) != 1 || inv.InvCounts[0].CountType != wire.OTACountTypeAvailable {
		return l, "InvCounts: one InvCount with CountType 2 required"
	}
	n := inv.InvCounts[0].Count
	if n < 0 || n > maxInventory {
		return l, fmt.Sprintf("Count: must be in 0..%d", maxInventory)
	}
	l.Inventory = &n
	return l, ""
}

// otaRestriction is the line of one restriction message, and what is wrong with
// it.
func otaRestriction(m wire.OTAAvailStatusMessage) (models.ARILine, string) {
	l, problem := otaControl(m.StatusApplicationControl, true)
	if problem != "" {
		return l, problem
	}
	if m.LengthsOfStay == nil && m.RestrictionStatus == nil {
		return l, "nothing to change"
	}
	if m.LengthsOfStay != nil {
		for _, los := range m.LengthsOfStay.LengthOfStay {
			if los.Time < 1 || los.Time > maxLOS || (los.TimeUnit != "" && los.TimeUnit != wire.OTATimeUnitDay) {
				return l, fmt.Sprintf("LengthOfStay: Time must be 1..%d days", maxLOS)
			}
			t := los.Time
			switch los.MinMaxMessageType {
			case wire.OTASetMinLOS:
				l.MinLOS = &t
			case wire.OTASetMaxLOS:
				l.MaxLOS = &t
			default:
				return l, "LengthOfStay: MinMaxMessageType must be SetMinLOS or SetMaxLOS"
			}
		}
		if l.MinLOS != nil && l.MaxLOS != nil && *l.MinLOS > *l.MaxLOS {
			return l, "LengthOfStay: SetMaxLOS below SetMinLOS"
		}
	}
	if rs := m.RestrictionStatus; rs != nil {
		var closed bool
		switch rs.Status {
		case wire.OTAStatusClose:
			closed = true
		case wire.OTAStatusOpen:
		default:
			return l, "RestrictionStatus: Status must be Open or Close"
		}
		value := wire.OTARestrictionValue(rs.Restriction, &l.Values)
		if value == nil {
			return l, "RestrictionStatus: Restriction must be Arrival or Departure, or absent"
		}
		*value = &closed
	}
	return l, ""
}
