package app

import (
	"context"

	"go.temporal.io/sdk/interceptor"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/workflow"

	"github.com/paritysync/paritysync/models"
)

// logKeys puts batch, channel and priority, read from the workflow id, on every log
// line of paritysync's workflows and activities, so one batch or one channel can be
// followed through the logs with a single filter. (Property is per request: the
// activities log it where they handle one.)
type logKeys struct {
	interceptor.WorkerInterceptorBase
}

func withKeys(l tlog.Logger, workflowID string) tlog.Logger {
	k := models.KeysOf(workflowID)
	var kv []any
	if k.Batch != "" {
		kv = append(kv, "batch", k.Batch)
	}
	if k.Channel != "" {
		kv = append(kv, "channel", k.Channel)
	}
	if k.Priority != 0 {
		kv = append(kv, "priority", k.Priority)
	}
	if len(kv) == 0 {
		return l
	}
	return tlog.With(l, kv...)
}

// InterceptActivity implements interceptor.WorkerInterceptor.
func (*logKeys) InterceptActivity(_ context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	i := &activityKeys{}
	i.Next = next
	return i
}

type activityKeys struct {
	interceptor.ActivityInboundInterceptorBase
}

func (a *activityKeys) Init(outbound interceptor.ActivityOutboundInterceptor) error {
	o := &activityKeysOut{}
	o.Next = outbound
	return a.Next.Init(o)
}

type activityKeysOut struct {
	interceptor.ActivityOutboundInterceptorBase
}

func (o *activityKeysOut) GetLogger(ctx context.Context) tlog.Logger {
	return withKeys(o.Next.GetLogger(ctx), o.Next.GetInfo(ctx).WorkflowExecution.ID)
}

// InterceptWorkflow implements interceptor.WorkerInterceptor.
func (*logKeys) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	i := &workflowKeys{}
	i.Next = next
	return i
}

type workflowKeys struct {
	interceptor.WorkflowInboundInterceptorBase
}

func (w *workflowKeys) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	o := &workflowKeysOut{}
	o.Next = outbound
	return w.Next.Init(o)
}

type workflowKeysOut struct {
	interceptor.WorkflowOutboundInterceptorBase
}

func (o *workflowKeysOut) GetLogger(ctx workflow.Context) tlog.Logger {
	return withKeys(o.Next.GetLogger(ctx), o.Next.GetInfo(ctx).WorkflowExecution.ID)
}
