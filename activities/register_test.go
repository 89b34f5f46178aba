package activities

import (
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// TestRegisterNamesEveryMethod holds the contract's activity names to the method
// names recorded histories carry: every exported method of Activities is
// registered, each under its own name.
func TestRegisterNamesEveryMethod(t *testing.T) {
	a := &Activities{}
	got := map[string]string{}
	for _, act := range a.named() {
		fn := runtime.FuncForPC(reflect.ValueOf(act.fn).Pointer()).Name()
		method := strings.TrimSuffix(fn[strings.LastIndex(fn, ".")+1:], "-fm")
		if method != act.name {
			t.Errorf("activity %s runs method %s; histories name the method", act.name, method)
		}
		got[act.name] = method
	}
	typ := reflect.TypeOf(a)
	for i := range typ.NumMethod() {
		if name := typ.Method(i).Name; got[name] == "" {
			t.Errorf("method %s is not registered: Register would drop an activity the worker ran", name)
		}
	}
	if len(got) != typ.NumMethod() {
		t.Errorf("%d activities registered, Activities has %d exported methods", len(got), typ.NumMethod())
	}
}
