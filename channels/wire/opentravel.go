package wire

import (
	"encoding/xml"
	"time"

	"github.com/paritysync/paritysync/models"
)

// Wire types of the OpenTravel Alliance 2003/05 notifications paritysync sends, shared
// by the client in channels/ and the simulator.

// OTANamespace is the OpenTravel 2003/05 namespace.
const OTANamespace = "http://www.opentravel.org/OTA/2003/05"

// OTAVersion is the message version paritysync writes.
const OTAVersion = "1.000"

// OTAPathPrefix is where OpenTravel messages are posted, under the channel's base:
// {base}/ota/{message name}.
const OTAPathPrefix = "/ota/"

// OpenTravel message names, one per family.
const (
	OTARateAmountNotif = "OTA_HotelRateAmountNotif"
	OTAAvailNotif      = "OTA_HotelAvailNotif"
	OTAInvCountNotif   = "OTA_HotelInvCountNotif"
)

// OTAMessage is the message name that carries family f.
func OTAMessage(f models.Family) string {
	if m := otaMessages.Of(f); m != "" {
		return m
	}
	return OTARateAmountNotif
}

// OTAFamily is the family message msg carries; false for a message paritysync
// does not send.
func OTAFamily(msg string) (models.Family, bool) {
	for _, f := range models.Families {
		if otaMessages.Of(f) == msg {
			return f, true
		}
	}
	return "", false
}

var otaMessages = models.ByFamily[string]{Rates: OTARateAmountNotif, Availability: OTAInvCountNotif,
	Restrictions: OTAAvailNotif}

// OTA error types (OpenTravel code list EWT) that classify an <Errors> answer.
const (
	OTAErrorAuthentication        = "4"
	OTAErrorAuthenticationTimeout = "5"
	OTAErrorProcessingException   = "12"
	OTAErrorApplication           = "13"
)

// OTAHeader is what every request carries: EchoToken (our idempotency key),
// TimeStamp (send time) and Version.
type OTAHeader struct {
	EchoToken string `xml:"EchoToken,attr,omitempty"`
	// CorrelationID, on an answer, is the channel's reference for the message.
	CorrelationID string `xml:"CorrelationID,attr,omitempty"`
	TimeStamp     string `xml:"TimeStamp,attr"`
	Version       string `xml:"Version,attr"`
}

// OTAStatusApplicationControl is the inventory, rate plan and inclusive dates a
// message applies to.
type OTAStatusApplicationControl struct {
	Start        models.Date `xml:"Start,attr"`
	End          models.Date `xml:"End,attr"`
	InvTypeCode  string      `xml:"InvTypeCode,attr,omitempty"`
	RatePlanCode string      `xml:"RatePlanCode,attr,omitempty"`
	// Mon … Sun (DOW_PatternGroup) keep only the days set true of Start..End;
	// absent, every day.
	Mon  *bool `xml:"Mon,attr,omitempty"`
	Tue  *bool `xml:"Tue,attr,omitempty"`
	Weds *bool `xml:"Weds,attr,omitempty"`
	Thur *bool `xml:"Thur,attr,omitempty"`
	Fri  *bool `xml:"Fri,attr,omitempty"`
	Sat  *bool `xml:"Sat,attr,omitempty"`
	Sun  *bool `xml:"Sun,attr,omitempty"`
}

// SetDays sets the day flags of w, every one of them, true or false; the zero set
// (every day) leaves them absent.
func (c *OTAStatusApplicationControl) SetDays(w models.Weekdays) {
	if w.IsZero() {
		return
	}
	for d, f := range c.days() {
		v := w.Has(d)
		*f = &v
	}
}

// Days is the set of days the flags keep; the zero set when none is given. ok is
// false when flags are given and none is true (no night at all).
func (c OTAStatusApplicationControl) Days() (w models.Weekdays, ok bool) {
	given := false
	for d, f := range c.days() {
		if *f != nil {
			given = true
			if **f {
				w |= 1 << d
			}
		}
	}
	return w, !given || w != 0
}

// days are the day flags by day of the week.
func (c *OTAStatusApplicationControl) days() map[time.Weekday]**bool {
	return map[time.Weekday]**bool{time.Monday: &c.Mon, time.Tuesday: &c.Tue, time.Wednesday: &c.Weds,
		time.Thursday: &c.Thur, time.Friday: &c.Fri, time.Saturday: &c.Sat, time.Sunday: &c.Sun}
}

// OTAHotelRateAmountNotifRQ sets rates.
type OTAHotelRateAmountNotifRQ struct {
	XMLName xml.Name `xml:"http://www.opentravel.org/OTA/2003/05 OTA_HotelRateAmountNotifRQ"`
	OTAHeader
	RateAmountMessages OTARateAmountMessages `xml:"RateAmountMessages"`
}

// OTARateAmountMessages are the rate messages of one hotel.
type OTARateAmountMessages struct {
	HotelCode string                 `xml:"HotelCode,attr"`
	Messages  []OTARateAmountMessage `xml:"RateAmountMessage"`
}

// OTARateAmountMessage is one rate over a date range.
type OTARateAmountMessage struct {
	StatusApplicationControl OTAStatusApplicationControl `xml:"StatusApplicationControl"`
	Rates                    []OTARate                   `xml:"Rates>Rate"`
}

// OTARate holds the amounts of one rate.
type OTARate struct {
	BaseByGuestAmts []OTABaseByGuestAmt `xml:"BaseByGuestAmts>BaseByGuestAmt"`
}

// OTABaseByGuestAmt is an amount, a decimal in the currency's minor units.
type OTABaseByGuestAmt struct {
	AmountAfterTax string `xml:"AmountAfterTax,attr"`
	CurrencyCode   string `xml:"CurrencyCode,attr"`
}

// OTAHotelAvailNotifRQ sets restrictions: stop-sell, closed to arrival or departure,
// lengths of stay. A message carries at most one RestrictionStatus, so one line may
// take several messages.
type OTAHotelAvailNotifRQ struct {
	XMLName xml.Name `xml:"http://www.opentravel.org/OTA/2003/05 OTA_HotelAvailNotifRQ"`
	OTAHeader
	AvailStatusMessages OTAAvailStatusMessages `xml:"AvailStatusMessages"`
}

// OTAAvailStatusMessages are the restriction messages of one hotel.
type OTAAvailStatusMessages struct {
	HotelCode string                  `xml:"HotelCode,attr"`
	Messages  []OTAAvailStatusMessage `xml:"AvailStatusMessage"`
}

// OTAAvailStatusMessage is one restriction over a date range.
type OTAAvailStatusMessage struct {
	StatusApplicationControl OTAStatusApplicationControl `xml:"StatusApplicationControl"`
	LengthsOfStay            *OTALengthsOfStay           `xml:"LengthsOfStay,omitempty"`
	RestrictionStatus        *OTARestrictionStatus       `xml:"RestrictionStatus,omitempty"`
}

// OTALengthsOfStay are min and max lengths of stay.
type OTALengthsOfStay struct {
	LengthOfStay []OTALengthOfStay `xml:"LengthOfStay"`
}

// Length-of-stay message types and restriction values.
const (
	OTASetMinLOS          = "SetMinLOS"
	OTASetMaxLOS          = "SetMaxLOS"
	OTARestrictionArrival = "Arrival"
	OTARestrictionDepart  = "Departure"
	OTAStatusOpen         = "Open"
	OTAStatusClose        = "Close"
	OTATimeUnitDay        = "Day"
	OTACountTypeAvailable = 2 // definite availability
)

// OTALengthOfStay is one length-of-stay rule, arrival based.
type OTALengthOfStay struct {
	MinMaxMessageType string `xml:"MinMaxMessageType,attr"`
	Time              int    `xml:"Time,attr"`
	TimeUnit          string `xml:"TimeUnit,attr,omitempty"`
}

// OTARestrictionStatus opens or closes the rate (no Restriction: stop-sell), or its
// arrival or departure.
type OTARestrictionStatus struct {
	Restriction string `xml:"Restriction,attr,omitempty"`
	Status      string `xml:"Status,attr"`
}

// OTARestrictions are the restrictions a RestrictionStatus opens or closes, in the
// order paritysync writes them: stop-sell (no Restriction), closed to arrival,
// closed to departure.
var OTARestrictions = []string{"", OTARestrictionArrival, OTARestrictionDepart}

// OTARestrictionValue is the value of v that a RestrictionStatus with restriction
// r carries: StopSell, CTA or CTD; nil for a restriction paritysync does not know.
func OTARestrictionValue(r string, v *models.Values) **bool {
	switch r {
	case "":
		return &v.StopSell
	case OTARestrictionArrival:
		return &v.CTA
	case OTARestrictionDepart:
		return &v.CTD
	}
	return nil
}

// OTAHotelInvCountNotifRQ sets inventory.
type OTAHotelInvCountNotifRQ struct {
	XMLName xml.Name `xml:"http://www.opentravel.org/OTA/2003/05 OTA_HotelInvCountNotifRQ"`
	OTAHeader
	Inventories OTAInventories `xml:"Inventories"`
}

// OTAInventories are the inventory messages of one hotel.
type OTAInventories struct {
	HotelCode   string         `xml:"HotelCode,attr"`
	Inventories []OTAInventory `xml:"Inventory"`
}

// OTAInventory is one room type's count over a date range.
type OTAInventory struct {
	StatusApplicationControl OTAStatusApplicationControl `xml:"StatusApplicationControl"`
	InvCounts                []OTAInvCount               `xml:"InvCounts>InvCount"`
}

// OTAInvCount is a count of rooms.
type OTAInvCount struct {
	CountType int `xml:"CountType,attr"`
	Count     int `xml:"Count,attr"`
}

// OTAResponse is any of the …RS answers: <Success/>, optionally with <Warnings>
// holding at least one <Warning>, or <Errors> holding at least one <Error>. An absent
// list is a nil pointer, never written as an empty element: the OpenTravel schemas
// refuse one.
type OTAResponse struct {
	XMLName xml.Name
	OTAHeader
	Success  *struct{}    `xml:"Success"`
	Warnings *OTAWarnings `xml:"Warnings"`
	Errors   *OTAErrors   `xml:"Errors"`
}

// OTAWarnings is the <Warnings> of an answer.
type OTAWarnings struct {
	Warning []OTAIssue `xml:"Warning"`
}

// OTAErrors is the <Errors> of an answer.
type OTAErrors struct {
	Error []OTAIssue `xml:"Error"`
}

// WarningList is the answer's warnings; nil when it has none.
func (r OTAResponse) WarningList() []OTAIssue {
	if r.Warnings == nil {
		return nil
	}
	return r.Warnings.Warning
}

// ErrorList is the answer's errors; nil when it has none.
func (r OTAResponse) ErrorList() []OTAIssue {
	if r.Errors == nil {
		return nil
	}
	return r.Errors.Error
}

// OTAShortTextMax is the longest ShortText of a Warning or Error the schemas allow
// (StringLength1to64); a longer explanation goes in the element's text.
const OTAShortTextMax = 64

// OTAIssue is one <Warning> or <Error>. RPH, when set, is the 1-based position of the
// message it concerns.
type OTAIssue struct {
	Type      string `xml:"Type,attr"`
	Code      string `xml:"Code,attr,omitempty"`
	ShortText string `xml:"ShortText,attr,omitempty"`
	RPH       string `xml:"RPH,attr,omitempty"`
	Text      string `xml:",chardata"`
}
