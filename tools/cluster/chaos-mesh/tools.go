// Package chaosmesh pins the Chaos Mesh whose controller-manager and daemon scripts/install-cluster builds (go build
// github.com/chaos-mesh/chaos-mesh/cmd/<component> in this module: go.sum checks every module's checksum).
package chaosmesh
