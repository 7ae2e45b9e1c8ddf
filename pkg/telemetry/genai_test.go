package telemetry_test

import (
	"reflect"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/meshwork/meshwork/pkg/telemetry"
)

// NonEmpty leaves out only the empty strings: other types, even their zero
// values, and non-empty strings are kept, in order.
func TestNonEmpty(t *testing.T) {
	got := telemetry.NonEmpty(
		telemetry.AttrConversationID.String(""),
		telemetry.AttrRequestModel.String("sonnet"),
		telemetry.AttrNumTurns.Int(0),
		telemetry.AttrWorkerID.String(""),
		telemetry.AttrGateViolations.StringSlice(nil),
	)
	want := []attribute.KeyValue{
		telemetry.AttrRequestModel.String("sonnet"),
		telemetry.AttrNumTurns.Int(0),
		telemetry.AttrGateViolations.StringSlice(nil),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("NonEmpty = %v, want %v", got, want)
	}
	if got := telemetry.NonEmpty(); len(got) != 0 {
		t.Errorf("NonEmpty() = %v, want none", got)
	}
}
