module github.com/meshwork/meshwork/services/mesh-exec

go 1.26.0

require (
	github.com/meshwork/meshwork/pkg v0.0.0
	github.com/modelcontextprotocol/go-sdk v1.8.0
	github.com/spf13/cobra v1.10.2
	github.com/spf13/pflag v1.0.9
	go.uber.org/goleak v1.3.0
)

require (
	github.com/google/jsonschema-go v0.4.3 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/segmentio/asm v1.1.3 // indirect
	github.com/segmentio/encoding v0.5.4 // indirect
	github.com/yosida95/uritemplate/v3 v3.0.2 // indirect
	golang.org/x/oauth2 v0.35.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	golang.org/x/time v0.15.0 // indirect
)

replace (
	github.com/meshwork/meshwork/migrations => ../../migrations
	github.com/meshwork/meshwork/pkg => ../../pkg
	github.com/meshwork/meshwork/workers => ../../workers
)
