package ops

import (
	"fmt"
	"net/url"
	"time"

	"github.com/paritysync/paritysync/config"
	"github.com/paritysync/paritysync/models"
)

// NewValidator is the validator both mains check mutations with: the configured
// channels, the property pattern and the zones of s.
func NewValidator(s config.Settings, channels []models.ChannelConfig) (*models.Validator, error) {
	v, err := models.NewValidator(channels, s.PropertyPattern, time.Now)
	if err != nil {
		return nil, fmt.Errorf("PARITYSYNC_PROPERTY_PATTERN: %w", err)
	}
	v.Zones = s.Zones
	return v, nil
}

// WorkflowLink is where the Temporal UI of s shows a workflow.
func WorkflowLink(s config.Settings, workflowID string) string {
	return fmt.Sprintf("%s/namespaces/%s/workflows/%s", s.TemporalUI, url.PathEscape(s.TemporalNamespace),
		url.PathEscape(workflowID))
}

// ScheduleLink is where the Temporal UI of s shows a schedule.
func ScheduleLink(s config.Settings, scheduleID string) string {
	return fmt.Sprintf("%s/namespaces/%s/schedules/%s", s.TemporalUI, url.PathEscape(s.TemporalNamespace),
		url.PathEscape(scheduleID))
}
