module github.com/meshwork/meshwork/services/mesh-exec

go 1.26.0

require (
	github.com/meshwork/meshwork/pkg v0.0.0
	github.com/spf13/cobra v1.10.2
)

require (
	github.com/google/uuid v1.6.0 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/modelcontextprotocol/go-sdk v1.8.0 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	go.uber.org/goleak v1.3.0 // indirect
)

replace (
	github.com/meshwork/meshwork/migrations => ../../migrations
	github.com/meshwork/meshwork/pkg => ../../pkg
	github.com/meshwork/meshwork/workers => ../../workers
)
