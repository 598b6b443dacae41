// Package cluster pins the Kubernetes release whose components scripts/install-cluster builds (go build
// k8s.io/kubernetes/cmd/<component> in this module: go.sum checks every module's checksum).
package cluster
