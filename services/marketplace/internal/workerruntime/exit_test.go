package workerruntime_test

import (
	"testing"

	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime"
)

func TestExitString(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		exit workerruntime.Exit
		want string
	}{
		{workerruntime.Exit{Code: 137, OOMKilled: true}, "it ran out of memory (isolation.resources.memory) and was killed"},
		{workerruntime.Exit{Code: 128, Error: "OCI runtime start failed"}, "its runtime reported: OCI runtime start failed"},
		{workerruntime.Exit{Code: 143}, "it was killed by signal 15 (exit code 143)"},
		{workerruntime.Exit{Code: 2}, "it exited with code 2"},
		{workerruntime.Exit{Code: 255}, "it exited with code 255"},
	} {
		if got := tc.exit.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.exit, got, tc.want)
		}
	}
}
