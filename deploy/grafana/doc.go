// Package grafana is the home of the Grafana provisioning the compose stack
// mounts into grafana/otel-lgtm (dashboards/ and provisioning/), of the
// test that checks it without a running Grafana, and of Metrics, the
// services' metrics contract that the dashboards and the e2e test share.
package grafana
