package main

import (
	"go.temporal.io/api/workflowservice/v1"

	"github.com/paritysync/paritysync/models"
)

type quiet struct{}

func (quiet) Debug(string, ...any) {}
func (quiet) Info(string, ...any)  {}
func (quiet) Warn(string, ...any)  {}
func (quiet) Error(string, ...any) {}

func listChildren(batchID string) *workflowservice.ListWorkflowExecutionsRequest {
	return &workflowservice.ListWorkflowExecutionsRequest{
		Query: "WorkflowType = 'ChannelSync' AND " + models.SearchAttrBatchID + " = '" + batchID + "'",
	}
}
